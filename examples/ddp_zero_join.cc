// PyTorch's Join tutorial's example: DDP and a ZeroRedundancyOptimizer (Adam) on uneven
// inputs, rank r with 10 + r of them. Join::run({&ddp, &zero}) takes both joinables: a rank
// that runs out shadows the others' iterations through DDP's hook (the gradient allreduces)
// and ZeRO's (its shard's step and broadcasts). Every rank reports how many inputs it
// processed and the checksum of its final model (the same everywhere).
//   bazel run //examples:ddp_zero_join
//   launch --nproc_per_node 2 -- bazel-bin/examples/ddp_zero_join
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

int worker(int rank) {
  auto pg = comm::init_from_env();
  auto model = std::make_shared<nn::Linear>(1, 1);
  ddp::DistributedDataParallel ddp_model(model, pg);
  ddp::ZeroRedundancyOptimizer optim(model->parameters(), ddp::optimizer_class<nn::Adam>(nn::AdamOptions(0.01)), pg);
  // Rank 1 gets one more input than rank 0.
  const std::vector<t::Tensor> inputs(static_cast<size_t>(10 + rank), t::ones({1, 1}));

  int num_inputs = 0;
  ddp::Join::run({&ddp_model, &optim}, [&] {
    for (const t::Tensor& input : inputs) {
      ++num_inputs;
      t::sum(ddp_model.forward(input)).backward();
      optim.step();
    }
  });

  fmt::print("Rank {} has exhausted all {} of its inputs! checksum {}\n", rank, num_inputs,
             examples::parameter_checksum(*model));
  std::fflush(stdout);
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

int main() { return examples::run_ranks("ddp_zero_join", 2, worker); }
