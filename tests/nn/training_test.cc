// End-to-end: the DDP tutorial's ToyModel trained for 8 SGD steps (lr 0.01, momentum 0.9, MSE) from
// PyTorch's initial weights on fixed data ends at PyTorch's weights, with PyTorch's losses.
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using tinyddp::testing::max_abs_diff;
using tinyddp::testing::nn_fixture;

TEST_CASE("ToyModel training equals PyTorch step for step", "[nn][training][fixture]") {
  ToyModel model;
  load_state_dict(model, nn_fixture("toy_init.safetensors"));
  const auto data = load_safetensors(nn_fixture("toy_data.safetensors")).tensors;
  const auto expected = load_safetensors(nn_fixture("toy_expected.safetensors")).tensors;
  const std::vector<double> losses = expected.at("losses").to_vector<double>();
  SGD optimizer(model.parameters(), SGDOptions(0.01).momentum(0.9));
  for (int64_t step = 0; step < 8; ++step) {
    optimizer.zero_grad();
    const Tensor loss = mse_loss(model(data.at("inputs")[step]), data.at("targets")[step]);
    INFO("step " << step << ": loss " << loss.item<double>() << ", PyTorch " << losses[step]);
    CHECK(std::fabs(loss.item<double>() - losses[step]) < 1e-5);
    loss.backward();
    optimizer.step();
  }
  for (const auto& [name, value] : model.state_dict()) {
    INFO(name);
    CHECK(max_abs_diff(value, expected.at(name)) < 1e-5);
  }
}
