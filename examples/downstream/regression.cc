// A user's training binary: an MLP learns the line of nn/nn.h (the user's own header) with
// DistributedDataParallel, each rank on its DistributedSampler share of the same 1024 samples.
// Started by tinyddp's launcher:
//   bazel run @tinyddp//launcher:launch -- --nproc_per_node 2 -- bazel-bin/regression
#include <cstdio>

#include "nn/nn.h"  // the user's package, not tinyddp's
#include "tinyddp/tinyddp.h"

using namespace tinyddp;

int main() {
  auto pg = comm::init_from_env();
  tensor::manual_seed(0);  // the same samples (and initial weights) on every rank
  auto dataset = std::make_shared<nn::TensorDataset>(downstream::line_samples(1024));
  auto sampler = std::make_shared<nn::DistributedSampler>(dataset->size(), pg->size(), pg->rank());
  nn::DataLoader loader(dataset, nn::DataLoaderOptions(32).sampler(sampler).num_workers(1));
  auto model = std::make_shared<ddp::DistributedDataParallel>(nn::mlp({2, 16, 1}), pg);
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.05));
  double loss_value = 0;
  for (int epoch = 0; epoch < 20; ++epoch) {
    sampler->set_epoch(epoch);  // a new order each epoch, the same on every rank
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      tensor::Tensor loss = nn::mse_loss(model->forward(batch[0]), batch[1]);
      loss.backward();
      optimizer.step();
      loss_value = loss.item<double>();
    }
    if (epoch == 0 || epoch == 19) std::printf("rank %d epoch %d loss %.6f\n", pg->rank(), epoch, loss_value);
  }
  double checksum = 0;
  for (const tensor::Tensor& p : model->parameters()) checksum += tensor::sum(p.detach()).item<double>();
  std::printf("rank %d parameter sum %.9g\n", pg->rank(), checksum);
  comm::destroy_process_group();
  return loss_value < 0.05 ? 0 : 1;
}
