// The models of //examples:train beyond nn's own (nn::mlp, nn::ToyModel).
#pragma once

#include <memory>

#include "examples/train_lib.h"
#include "tinyddp/nn/layers.h"

namespace tinyddp::examples {

// The digits CNN, exactly this PyTorch model (state-dict names "0.weight", "1.running_mean", ...,
// "10.bias"): Sequential(Conv2d(1, 16, 3, padding=1), BatchNorm2d(16), ReLU(), MaxPool2d(2),
// Conv2d(16, 32, 3, padding=1), BatchNorm2d(32), ReLU(), MaxPool2d(2), Flatten(), Dropout(p),
// Linear(128, 10)), for [N, 1, 8, 8] images.
std::shared_ptr<nn::Sequential> digits_cnn(double dropout);

// A model of build_model: created right after manual_seed(seed) so that its initial weights
// equal PyTorch's for the same seed (--init replaces them), then moved to the device: the
// same weights on every device. `in` and `out` are its input and output widths, `sample` the
// shape of one input ({in}, or {1, 8, 8} for the CNN).
struct BuiltModel {
  std::shared_ptr<nn::Module> module;
  int64_t in = 10, out = 5;
  tensor::Shape sample{10};
  // A batch's inputs in the shape the model takes (the digits come as rows of 64 pixels).
  tensor::Tensor shaped(const tensor::Tensor& inputs) const {
    tensor::Shape shape{inputs.size(0)};
    shape.insert(shape.end(), sample.begin(), sample.end());
    return inputs.reshape(shape);
  }
};

// The model `config` names (classification: the ce loss; digits: --dataset digits without --data).
BuiltModel build_model(const TrainConfig& config, const tensor::Device& device, bool classification, bool digits);

}  // namespace tinyddp::examples
