// The torch.distributed tutorial's Example 4, "distributed synchronous SGD", in C++: each rank
// trains the same model on its own disjoint, seeded share of the data (DistributedSampler),
// and after every backward average_gradients() allreduces each parameter's gradient and
// divides by the world size, by hand, before the optimizer step. It is what DDP does, without
// DDP: one allreduce per parameter after the whole backward, where DDP reduces buckets of
// gradients while backward is still running (docs/ddp.md). --ddp trains the same way through
// DistributedDataParallel instead; both end with the same parameters (tests/examples).
//   bazel run //examples:dist_sgd                         (forks 2 ranks itself)
//   launch --nproc_per_node 2 -- bazel-bin/examples/dist_sgd [--ddp] [--save FILE]
#include <CLI/CLI.hpp>
#include <numeric>

#include "examples/digits.h"
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

namespace {

struct Options {
  bool ddp = false;
  int epochs = 3;
  int64_t batch = 64;  // the global batch: each rank takes batch / world of it
  std::string save;
};

// The tutorial's average_gradients: every gradient summed over the ranks, then divided.
void average_gradients(nn::Module& model, comm::ProcessGroup& pg) {
  const double size = pg.size();
  for (const t::Tensor& p : model.parameters()) {
    pg.allreduce(p.grad(), comm::ReduceOp::kSum)->wait();
    p.grad().div_(size);
  }
}

int run(int rank, const Options& o) {
  auto pg = comm::init_from_env();
  const int world = pg->size();
  // The partition (DistributedSampler): every epoch the digits are shuffled with the same seed
  // on every rank, and rank r takes every world-th index: disjoint shares of the same size.
  const examples::Digits digits = examples::load_digits(examples::default_digits_path());
  std::vector<int64_t> rows(static_cast<size_t>(digits.rows()));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  auto dataset = std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{digits.inputs(rows), digits.targets(rows)});
  auto sampler = std::make_shared<nn::DistributedSampler>(dataset->size(), world, rank, true, 1234);
  nn::DataLoader loader(dataset, nn::DataLoaderOptions(o.batch / world).sampler(sampler));
  t::manual_seed(1234);  // the same initial model on every rank
  auto model = nn::mlp({examples::kDigitsPixels, 128, examples::kDigitsClasses});
  std::shared_ptr<ddp::DistributedDataParallel> ddp_model;
  if (o.ddp) ddp_model = std::make_shared<ddp::DistributedDataParallel>(model, pg);
  nn::Module& forward = o.ddp ? static_cast<nn::Module&>(*ddp_model) : *model;
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.01).momentum(0.5));
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    sampler->set_epoch(epoch);
    double epoch_loss = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      const t::Tensor loss = nn::cross_entropy(forward(batch[0]), batch[1]);
      epoch_loss += loss.item<double>();
      loss.backward();
      if (!o.ddp) average_gradients(*model, *pg);
      optimizer.step();
    }
    fmt::print("rank {}, epoch {}: {:.6f}\n", rank, epoch, epoch_loss / static_cast<double>(loader.size()));
  }
  fmt::print("rank {}: parameter checksum {}\n", rank, examples::parameter_checksum(*model));
  if (rank == 0 && !o.save.empty()) nn::save_state_dict(*model, o.save);
  std::fflush(stdout);
  pg->barrier()->wait();
  ddp_model.reset();
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The torch.distributed tutorial's synchronous SGD: gradients averaged by hand, or by DDP (--ddp)."};
  app.add_flag("--ddp", o.ddp, "average through DistributedDataParallel instead of by hand");
  app.add_option("--epochs", o.epochs, "epochs over the digits (default 3)");
  app.add_option("--batch", o.batch, "global batch, split over the ranks (default 64)");
  app.add_option("--save", o.save, "rank 0 writes the final state dict here");
  CLI11_PARSE(app, argc, argv);
  return examples::run_ranks("dist_sgd", 2, [&](int rank) { return run(rank, o); });
}
