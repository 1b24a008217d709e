// A user's training binary: an MLP learns the line of nn/nn.h (the user's own header) with
// DistributedDataParallel, each rank on batches of its own. Started by tinyddp's launcher:
//   bazel run @tinyddp//launcher:launch -- --nproc_per_node 2 -- bazel-bin/regression
#include <cstdio>

#include "nn/nn.h"  // the user's package, not tinyddp's
#include "tinyddp/tinyddp.h"

using namespace tinyddp;

int main() {
  auto pg = comm::init_from_env();
  tensor::manual_seed(static_cast<uint64_t>(pg->rank()));
  auto model = std::make_shared<ddp::DistributedDataParallel>(nn::mlp({2, 16, 1}), pg);
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.05));
  double loss_value = 0;
  for (int step = 0; step < 300; ++step) {
    tensor::Tensor x = tensor::randn({32, 2});
    tensor::Tensor y = tensor::empty({32, 1});
    for (int64_t i = 0; i < 32; ++i) {
      y.data_ptr<float>()[i] = downstream::target(x.data_ptr<float>()[2 * i], x.data_ptr<float>()[2 * i + 1]);
    }
    optimizer.zero_grad();
    tensor::Tensor loss = nn::mse_loss(model->forward(x), y);
    loss.backward();
    optimizer.step();
    loss_value = loss.item<double>();
    if (step == 0 || step == 299) std::printf("rank %d step %d loss %.6f\n", pg->rank(), step, loss_value);
  }
  double checksum = 0;
  for (const tensor::Tensor& p : model->parameters()) checksum += tensor::sum(p.detach()).item<double>();
  std::printf("rank %d parameter sum %.9g\n", pg->rank(), checksum);
  comm::destroy_process_group();
  return loss_value < 0.05 ? 0 : 1;
}
