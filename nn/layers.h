// Layers: Linear (PyTorch's weight [out, in], bias [out] and default initialisation), the
// activations ReLU/Tanh/Sigmoid, Sequential (children "0", "1", ...), the mlp() builder, and
// PyTorch's DDP tutorial's ToyModel (net1 = Linear(10, 10), ReLU, net2 = Linear(10, 5)).
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

class Linear : public Module {
 public:
  // weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) from the default generator, weight first:
  // after the same manual_seed the values equal torch.nn.Linear's.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // input: [..., in] -> [..., out] = input @ weight^T + bias
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias
  int64_t in_features, out_features;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override { return tensor::relu(input); }
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override { return tensor::tanh(input); }
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override { return tensor::sigmoid(input); }
};

// Runs its children in order; they are named "0", "1", ... as in torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t index) const;
};

// Linear layers between consecutive widths with ReLU in between (none after the last):
// mlp({784, 256, 10}) = Sequential(Linear(784, 256), ReLU(), Linear(256, 10)).
std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& widths);

// The model of PyTorch's DDP tutorial, with their parameter names.
class ToyModel : public Module {
 public:
  ToyModel();
  Tensor forward(const Tensor& input) override;  // net2(relu(net1(input)))

  std::shared_ptr<Linear> net1;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Linear> net2;
};

}  // namespace tinyddp::nn
