// Why DDP rebuilds its buckets once. At construction the buckets take the parameters in reverse
// registration order, a guess at the order backward will produce their gradients; the guess is
// right only when the model registers its layers in the order forward uses them. This model
// registers its first layer last (its constructor builds the body, then the stem), so bucket
// 0 holds the gradient that backward produces last. Buckets are launched in order, so in the
// first iteration no allreduce starts before backward has ended. That backward records the
// order the gradients came in, and the next forward rebuilds the buckets in that order: from
// then on each bucket fills, and its allreduce starts, while backward still computes the
// layers below. Each rank prints its buckets before and after and the iteration's overlap.
//   bazel run //examples:ddp_rebuild
//   TINYDDP_DDP_TIMELINE=/tmp/rebuild bazel-bin/examples/ddp_rebuild   (writes the timelines that
//   scripts/make_pictures.sh draws as docs/rebuild.png)
#include <string>
#include <vector>

#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

namespace {

constexpr int64_t kWidth = 1024;

// fc1 -> fc2 -> fc3 -> fc4 in forward, registered as fc2, fc3, fc4, fc1.
class StemRegisteredLast : public nn::Module {
 public:
  StemRegisteredLast() {
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(kWidth, kWidth));
    fc3_ = register_module("fc3", std::make_shared<nn::Linear>(kWidth, kWidth));
    fc4_ = register_module("fc4", std::make_shared<nn::Linear>(kWidth, 10));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(64, kWidth));
  }
  t::Tensor forward(const t::Tensor& x) override {
    return fc4_->forward(t::relu(fc3_->forward(t::relu(fc2_->forward(t::relu(fc1_->forward(x)))))));
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_, fc4_;
};

// "[fc1.weight fc1.bias] [fc4.weight ...] ...": each bucket's parameters, in bucket order.
std::string describe_buckets(const ddp::DistributedDataParallel& model) {
  const std::vector<std::string> names_of = model.module()->named_parameters().keys();
  std::string out;
  for (const std::vector<size_t>& bucket : model.reducer().snapshot().assignment.buckets) {
    std::string names;
    for (size_t index : bucket) names += (names.empty() ? "" : " ") + names_of[index];
    out += " [" + names + "]";
  }
  return out;
}

int worker(int rank) {
  auto pg = comm::init_from_env();
  t::manual_seed(0);
  auto model = std::make_shared<StemRegisteredLast>();
  // A bucket closes once it reaches 2 MiB, so a 1024x1024 weight (4 MiB) ends the bucket it
  // joins: at construction bucket 0 gathers fc1, fc4 and fc3 (4400 KiB), bucket 1 holds fc2.
  ddp::DistributedDataParallel ddp_model(model, pg, ddp::DDPOptions().bucket_cap_mb(2).first_bucket_cap_mb(2));
  nn::SGD optimizer(ddp_model.parameters(), nn::SGDOptions(0.01));
  fmt::print("rank {}: buckets at construction:{}\n", rank, describe_buckets(ddp_model));
  t::manual_seed(1 + static_cast<uint64_t>(rank));  // each rank its own data
  for (int iteration = 0; iteration < 6; ++iteration) {
    optimizer.zero_grad();
    const t::Tensor loss = nn::mse_loss(ddp_model.forward(t::randn({256, 64})), t::randn({256, 10}));
    loss.backward();
    optimizer.step();
    if (iteration == 0 || iteration == 5) {
      const ddp::DDPStats s = ddp_model.stats();
      fmt::print("rank {}: iteration {}: {:.0f}% of communication hidden behind backward\n", rank, iteration,
                 100.0 * s.last_overlap_us / std::max(s.last_backward_comm_us, 1e-9));
    }
    if (iteration == 1) fmt::print("rank {}: buckets after the rebuild:{}\n", rank, describe_buckets(ddp_model));
  }
  std::fflush(stdout);
  pg->barrier()->wait();
  return 0;
}

}  // namespace

int main() { return examples::run_ranks("ddp_rebuild", 2, worker); }
