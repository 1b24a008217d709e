// The layers of layers.h: PyTorch's default initialisation (uniform in +-1/sqrt(fan_in)),
// Linear, LayerNorm, Sequential and the descriptions modules print; mlp() and the DDP
// tutorial's ToyModel.
#include "tinyddp/nn/layers.h"

#include <algorithm>

#include <cmath>
#include <utility>

#include "tinyddp/nn/embedding_bag.h"
#include "tinyddp/nn/functional.h"

namespace tinyddp::nn {

Tensor detail::uniform_init(const tensor::Shape& shape, int64_t fan_in) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  Tensor t = tensor::empty(shape);
  if (!SkipInitGuard::active()) tensor::uniform_(t, -bound, bound);
  return t;
}

using detail::pair_repr;
using detail::uniform_init;

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

std::string detail::pair_repr(tensor::Size2d s) { return fmt::format("({}, {})", s.h, s.w); }

namespace {
// The pools keep the value they were given, so PyTorch prints MaxPool2d(2)'s kernel as 2 and
// MaxPool2d((2, 3))'s as (2, 3): a square size is printed as the one number it usually was.
std::string pool_repr(tensor::Size2d s) { return s.h == s.w ? std::to_string(s.h) : pair_repr(s); }
}  // namespace

MaxPool2d::MaxPool2d(tensor::Size2d kernel, std::optional<tensor::Size2d> stride_, tensor::Size2d padding_,
                     tensor::Size2d dilation_)
    : Module("MaxPool2d"), kernel_size(kernel), stride(stride_.value_or(kernel)), padding(padding_),
      dilation(dilation_) {}

Tensor MaxPool2d::forward(const Tensor& input) {
  return tensor::max_pool2d(input, kernel_size, stride, padding, dilation);
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode=False", pool_repr(kernel_size),
                     pool_repr(stride), pool_repr(padding), pool_repr(dilation));
}

AvgPool2d::AvgPool2d(tensor::Size2d kernel, std::optional<tensor::Size2d> stride_, tensor::Size2d padding_,
                     bool count_include_pad_)
    : Module("AvgPool2d"), kernel_size(kernel), stride(stride_.value_or(kernel)), padding(padding_),
      count_include_pad(count_include_pad_) {}

Tensor AvgPool2d::forward(const Tensor& input) {
  return tensor::avg_pool2d(input, kernel_size, stride, padding, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", pool_repr(kernel_size), pool_repr(stride),
                     pool_repr(padding));
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(tensor::Size2d output_size_)
    : Module("AdaptiveAvgPool2d"), output_size(output_size_) {}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pool_repr(output_size); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(tensor::Size2d output_size_)
    : Module("AdaptiveMaxPool2d"), output_size(output_size_) {}

Tensor AdaptiveMaxPool2d::forward(const Tensor& input) { return functional::adaptive_max_pool2d(input, output_size); }

std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + pool_repr(output_size); }

Tensor Unflatten::forward(const Tensor& input) {
  const int64_t d = tensor::wrap_dim(dim, input.dim(), "Unflatten");
  tensor::Shape shape(input.sizes().begin(), input.sizes().begin() + d);
  shape.insert(shape.end(), unflattened_size.begin(), unflattened_size.end());
  shape.insert(shape.end(), input.sizes().begin() + d + 1, input.sizes().end());
  return input.reshape(shape);
}
std::string Unflatten::extra_repr() const {
  std::string sizes;
  for (size_t i = 0; i < unflattened_size.size(); ++i) sizes += (i ? ", " : "") + std::to_string(unflattened_size[i]);
  if (unflattened_size.size() == 1) sizes += ",";
  return fmt::format("dim={}, unflattened_size=({})", dim, sizes);
}

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  TDDP_CHECK(p >= 0.0 && p < 1.0, "Dropout: probability p must be in [0, 1), got {}", p);
}

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

Dropout2d::Dropout2d(double p_) : Module("Dropout2d"), p(p_) {
  TDDP_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d: probability p must be in [0, 1], got {}", p);
}
Tensor Dropout2d::forward(const Tensor& input) { return functional::dropout2d(input, p, is_training()); }
std::string Dropout2d::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

MaxPool1d::MaxPool1d(int64_t kernel, std::optional<int64_t> stride_, int64_t padding_, int64_t dilation_)
    : Module("MaxPool1d"), kernel_size(kernel), stride(stride_.value_or(kernel)), padding(padding_),
      dilation(dilation_) {}
Tensor MaxPool1d::forward(const Tensor& input) {
  return functional::max_pool1d(input, kernel_size, stride, padding, dilation);
}
std::string MaxPool1d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode=False", kernel_size, stride,
                     padding, dilation);
}
std::shared_ptr<Module> MaxPool1d::clone_structure() const {
  return std::make_shared<MaxPool1d>(kernel_size, stride, padding, dilation);
}

AvgPool1d::AvgPool1d(int64_t kernel, std::optional<int64_t> stride_, int64_t padding_, bool count_include_pad_)
    : Module("AvgPool1d"), kernel_size(kernel), stride(stride_.value_or(kernel)), padding(padding_),
      count_include_pad(count_include_pad_) {}
Tensor AvgPool1d::forward(const Tensor& input) {
  return functional::avg_pool1d(input, kernel_size, stride, padding, count_include_pad);
}
std::string AvgPool1d::extra_repr() const {
  return fmt::format("kernel_size=({},), stride=({},), padding=({},)", kernel_size, stride, padding);
}
std::shared_ptr<Module> AvgPool1d::clone_structure() const {
  return std::make_shared<AvgPool1d>(kernel_size, stride, padding, count_include_pad);
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim) {
  TDDP_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings ({}) and embedding_dim ({}) must be positive", num, dim);
  if (padding) {
    TDDP_CHECK(*padding < num && *padding >= -num,
               "Embedding: Padding_idx must be within num_embeddings, got {} for {}", *padding, num);
    padding_idx = *padding < 0 ? *padding + num : *padding;
  }
  const bool skip = SkipInitGuard::active();
  weight = register_parameter("weight", skip ? tensor::empty({num, dim}) : tensor::randn({num, dim}));
  if (padding_idx && !skip) {
    tensor::NoGradGuard no_grad;
    weight.select(0, *padding_idx).fill_(0.0);
  }
}

Embedding::Embedding(const EmbeddingOptions& o) : Embedding(o.num_embeddings(), o.embedding_dim(), o.padding_idx()) {
  TDDP_CHECK(!o.max_norm() || (*o.max_norm() > 0 && (o.norm_type() == 1.0 || o.norm_type() == 2.0)),
             "Embedding: max_norm must be positive and norm_type 1 or 2, got max_norm {} and norm_type {}",
             o.max_norm().value_or(0.0), o.norm_type());
  TDDP_CHECK(!o.sparse(), "Embedding: sparse=true is not supported in tinyddp (no sparse gradients)");
  max_norm = o.max_norm();
  norm_type = o.norm_type();
  scale_grad_by_freq = o.scale_grad_by_freq();
}

Tensor Embedding::forward(const Tensor& input) {
  if (max_norm) functional::embedding_renorm_(weight, input, *max_norm, norm_type);  // each row looked up
  return tensor::embedding(input, weight, padding_idx, scale_grad_by_freq);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) s += fmt::format(", padding_idx={}", *padding_idx);
  // Python's float repr: 1.0, not fmt's 1.
  const auto py = [](double v) { return v == std::floor(v) ? fmt::format("{:.1f}", v) : fmt::format("{}", v); };
  if (max_norm) s += ", max_norm=" + py(*max_norm);
  if (max_norm && norm_type != 2.0) s += ", norm_type=" + py(norm_type);
  if (scale_grad_by_freq) s += ", scale_grad_by_freq=True";
  return s;
}

LayerNorm::LayerNorm(tensor::Shape shape, double eps_, bool affine, bool with_bias)
    : Module("LayerNorm"), normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  TDDP_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (const int64_t d : normalized_shape) {
    TDDP_CHECK(d > 0, "LayerNorm: normalized_shape {} must have positive sizes",
               tensor::format_shape(normalized_shape));
  }
  if (affine) {
    weight = register_parameter("weight", tensor::ones(normalized_shape));
    if (with_bias) bias = register_parameter("bias", tensor::zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  return tensor::layer_norm(input, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (const int64_t d : normalized_shape) dims += fmt::format("{}, ", d);
  if (normalized_shape.size() > 1) dims.resize(dims.size() - 2);  // "(4,)" but "(3, 4)"
  if (normalized_shape.size() == 1) dims.resize(dims.size() - 1);
  return fmt::format("({}), eps={}, elementwise_affine={}", dims, eps, elementwise_affine ? "True" : "False");
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine_)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps_), affine(affine_) {
  TDDP_CHECK(groups > 0 && channels > 0 && channels % groups == 0,
             "GroupNorm: num_channels ({}) must be divisible by num_groups ({})", channels, groups);
  if (affine) {
    weight = register_parameter("weight", tensor::ones({channels}));
    bias = register_parameter("bias", tensor::zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& input) { return tensor::group_norm(input, num_groups, weight, bias, eps); }

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps, affine ? "True" : "False");
}

CELU::CELU(double alpha_) : Module("CELU"), alpha(alpha_) { TDDP_CHECK(alpha != 0, "CELU: alpha must not be 0"); }

std::string CELU::extra_repr() const { return fmt::format("alpha={}", alpha); }

LeakyReLU::LeakyReLU(double negative_slope_) : Module("LeakyReLU"), negative_slope(negative_slope_) {}
std::string LeakyReLU::extra_repr() const { return fmt::format("negative_slope={}", negative_slope); }

GELU::GELU(std::string approximate_) : Module("GELU"), approximate(std::move(approximate_)) {
  TDDP_CHECK(approximate == "none" || approximate == "tanh", "GELU: approximate must be 'none' or 'tanh', got '{}'",
             approximate);
}

std::string GELU::extra_repr() const { return fmt::format("approximate='{}'", approximate); }

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") { extend(modules); }

void Sequential::append(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

void Sequential::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) append(m);
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : named_children()) x = (*child)(x);
  return x;
}

std::shared_ptr<Module> Sequential::operator[](int64_t index) const {
  const auto n = static_cast<int64_t>(size());
  TDDP_CHECK(index >= -n && index < n, "Sequential: index {} is out of range for {} modules", index, n);
  return (named_children().begin() + (index < 0 ? index + n : index))->second;
}

std::shared_ptr<Sequential> Sequential::slice(int64_t start, int64_t stop) const {
  const auto n = static_cast<int64_t>(size());
  const auto clamp_end = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  auto out = std::make_shared<Sequential>();
  const auto first = named_children().begin();
  for (int64_t i = clamp_end(start); i < clamp_end(stop); ++i)
    out->register_module((first + i)->first, (first + i)->second);
  return out;
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

Tensor ToyModel::forward(const Tensor& input) { return (*net2)((*relu)((*net1)(input))); }

// ---- clone_structure: the same configuration, fresh tensors (Module::clone_structure) -----------

std::shared_ptr<Module> Linear::clone_structure() const {
  return std::make_shared<Linear>(in_features, out_features, bias.defined());
}
std::shared_ptr<Module> GroupNorm::clone_structure() const {
  return std::make_shared<GroupNorm>(num_groups, num_channels, eps, affine);
}
std::shared_ptr<Module> MaxPool2d::clone_structure() const {
  return std::make_shared<MaxPool2d>(kernel_size, stride, padding, dilation);
}
std::shared_ptr<Module> AvgPool2d::clone_structure() const {
  return std::make_shared<AvgPool2d>(kernel_size, stride, padding, count_include_pad);
}
std::shared_ptr<Module> AdaptiveAvgPool2d::clone_structure() const {
  return std::make_shared<AdaptiveAvgPool2d>(output_size);
}
std::shared_ptr<Module> AdaptiveMaxPool2d::clone_structure() const {
  return std::make_shared<AdaptiveMaxPool2d>(output_size);
}
std::shared_ptr<Module> Flatten::clone_structure() const { return std::make_shared<Flatten>(start_dim, end_dim); }
std::shared_ptr<Module> Unflatten::clone_structure() const {
  return std::make_shared<Unflatten>(dim, unflattened_size);
}
std::shared_ptr<Module> Identity::clone_structure() const { return std::make_shared<Identity>(); }
std::shared_ptr<Module> Dropout::clone_structure() const { return std::make_shared<Dropout>(p); }
std::shared_ptr<Module> ReLU::clone_structure() const { return std::make_shared<ReLU>(inplace); }
std::shared_ptr<Module> Tanh::clone_structure() const { return std::make_shared<Tanh>(); }
std::shared_ptr<Module> Sigmoid::clone_structure() const { return std::make_shared<Sigmoid>(); }
std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze,
                                                      std::optional<int64_t> padding_idx) {
  TDDP_CHECK(embeddings.defined() && embeddings.dim() == 2,
             "Embedding.from_pretrained: embeddings must be 2-dimensional [num_embeddings, embedding_dim], got {}",
             embeddings.defined() ? tensor::format_shape(embeddings.sizes()) : "an undefined tensor");
  std::shared_ptr<Embedding> e;
  {
    SkipInitGuard skip;  // (the weight is replaced next: no draw from the generator)
    e = std::make_shared<Embedding>(embeddings.size(0), embeddings.size(1), padding_idx);
  }
  e->weight = e->replace_parameter("weight", embeddings.detach().requires_grad_(!freeze));
  return e;
}
std::shared_ptr<Module> Embedding::clone_structure() const {
  return std::make_shared<Embedding>(
      EmbeddingOptions(num_embeddings, embedding_dim).padding_idx(padding_idx).max_norm(max_norm).norm_type(norm_type));
}
std::shared_ptr<Module> LayerNorm::clone_structure() const {
  return std::make_shared<LayerNorm>(normalized_shape, eps, elementwise_affine, bias.defined());
}
std::shared_ptr<Module> CELU::clone_structure() const { return std::make_shared<CELU>(alpha); }
std::shared_ptr<Module> LeakyReLU::clone_structure() const { return std::make_shared<LeakyReLU>(negative_slope); }
std::shared_ptr<Module> GELU::clone_structure() const { return std::make_shared<GELU>(approximate); }
std::shared_ptr<Module> Sequential::clone_structure() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& [name, child] : named_children()) copy->register_module(name, child->clone_structure());
  return copy;
}
std::shared_ptr<Module> ToyModel::clone_structure() const { return std::make_shared<ToyModel>(); }

}  // namespace tinyddp::nn
