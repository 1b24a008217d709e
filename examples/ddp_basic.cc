// The example of PyTorch's DDP design note: Linear(10, 10), MSE loss, SGD with lr 0.001, one
// step on 2 ranks. Each rank starts from different random weights on purpose; DDP's
// construction broadcasts rank 0's, and the allreduce in backward gives every rank the same
// gradient, so all ranks print the same parameter checksum.
//   bazel run //examples:ddp_basic                       (forks 2 ranks itself)
//   launch --nproc_per_node 2 -- bazel-bin/examples/ddp_basic
#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;

int example(int rank) {
  auto pg = comm::init_from_env();
  t::manual_seed(static_cast<uint64_t>(rank));  // different weights per rank until DDP syncs them
  auto model = std::make_shared<nn::Linear>(10, 10);
  auto ddp_model = std::make_shared<ddp::DistributedDataParallel>(model, pg);
  nn::SGD optimizer(ddp_model->parameters(), nn::SGDOptions(0.001));

  optimizer.zero_grad();
  const t::Tensor outputs = ddp_model->forward(t::randn({20, 10}));  // each rank its own batch
  const t::Tensor labels = t::randn({20, 10});
  const t::Tensor loss = nn::mse_loss(outputs, labels);
  loss.backward();
  optimizer.step();

  fmt::print("rank {}: loss {:.6f}, parameter checksum {}\n", rank, loss.item<double>(),
             examples::parameter_checksum(*model));
  std::fflush(stdout);
  pg->barrier()->wait();
  ddp_model.reset();
  comm::destroy_process_group();
  return 0;
}

int main() { return examples::run_ranks("ddp_basic", 2, example); }
