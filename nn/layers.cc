// Layers: see layers.h.
#include "tinyddp/nn/layers.h"

#include <cmath>

namespace tinyddp::nn {

namespace {
// U(-bound, bound) with bound = 1/sqrt(fan_in): PyTorch's kaiming_uniform_(a=sqrt(5)) for
// the weight and its bias rule, which both reduce to this bound.
Tensor uniform_init(const tensor::Shape& shape, int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  Tensor t = tensor::empty(shape);
  tensor::uniform_(t, -bound, bound);
  return t;
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool with_bias) : Module("Linear"), in_features(in), out_features(out) {
  TDDP_CHECK(in >= 0 && out >= 0, "Linear: in_features ({}) and out_features ({}) must be >= 0", in, out);
  weight = register_parameter("weight", uniform_init({out, in}, in));
  if (with_bias) bias = register_parameter("bias", uniform_init({out}, in));
}

Tensor Linear::forward(const Tensor& input) {
  TDDP_CHECK(input.dim() >= 1 && input.size(-1) == in_features,
             "Linear: expected input with last dimension {} (in_features), got shape {}", in_features,
             tensor::format_shape(input.sizes()));
  // input: [..., in], weight: [out, in] -> [..., out]
  return tensor::linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features,
                     bias.defined() ? "True" : "False");
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : named_children()) x = child->forward(x);
  return x;
}

std::shared_ptr<Module> Sequential::operator[](size_t index) const {
  TDDP_CHECK(index < size(), "Sequential: index {} is out of range for {} modules", index, size());
  return named_children().at(std::to_string(index));
}

std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& widths) {
  TDDP_CHECK(widths.size() >= 2, "mlp: need at least an input and an output width, got {} width(s)", widths.size());
  auto model = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    model->push_back(std::make_shared<Linear>(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) model->push_back(std::make_shared<ReLU>());
  }
  return model;
}

ToyModel::ToyModel() : Module("ToyModel") {
  net1 = register_module("net1", std::make_shared<Linear>(10, 10));
  relu = register_module("relu", std::make_shared<ReLU>());
  net2 = register_module("net2", std::make_shared<Linear>(10, 5));
}

Tensor ToyModel::forward(const Tensor& input) { return net2->forward(relu->forward(net1->forward(input))); }

}  // namespace tinyddp::nn
