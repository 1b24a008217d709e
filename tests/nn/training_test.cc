// End-to-end: the DDP tutorial's ToyModel trained for 8 SGD steps (lr 0.01, momentum 0.9, MSE) from
// PyTorch's initial weights on fixed data ends at PyTorch's weights, with PyTorch's losses: the
// exact (float64) run's within its float32 spread (nn_test_util.h).
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using tinyddp::testing::nn_fixture;

TEST_CASE("ToyModel training equals PyTorch step for step", "[nn][training][fixture]") {
  ToyModel model;
  load_state_dict(model, nn_fixture("toy_init.safetensors"));
  const auto data = load_safetensors(nn_fixture("toy_data.safetensors")).tensors;
  SGD optimizer(model.parameters(), SGDOptions(0.01).momentum(0.9));
  std::vector<double> losses;
  for (int64_t step = 0; step < 8; ++step) {
    optimizer.zero_grad();
    const Tensor loss = mse_loss(model(data.at("inputs")[step]), data.at("targets")[step]);
    losses.push_back(loss.item<double>());
    loss.backward();
    optimizer.step();
  }
  tinyddp::testing::check_toy_losses(losses);
  tinyddp::testing::check_toy_state(model.state_dict());
}
