// Layers: Linear and Conv2d (PyTorch's weight layouts and default initialisation), pooling,
// Flatten, Unflatten, Identity, Dropout, Embedding, LayerNorm, the activations ReLU/Tanh/Sigmoid/GELU, Sequential
// (children "0", "1", ...), the mlp() builder, and PyTorch's DDP tutorial's ToyModel
// (net1 = Linear(10, 10), ReLU, net2 = Linear(10, 5)). BatchNorm is in batchnorm.h; the GPT's
// blocks in transformer.h.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

namespace detail {
// U(-bound, bound) with bound = 1/sqrt(fan_in): PyTorch's kaiming_uniform_(a=sqrt(5)) for a
// layer's weight and its bias rule, which both reduce to this bound (nothing is drawn under
// SkipInitGuard). The layers of layers.h and conv.h initialise with it.
Tensor uniform_init(const tensor::Shape& shape, int64_t fan_in);
// "(h, w)", as PyTorch prints a pair.
std::string pair_repr(tensor::Size2d s);
}  // namespace detail

class Linear : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
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

// torch.nn.MaxPool2d / AvgPool2d / AdaptiveAvgPool2d (stride defaults to the kernel size).
// A rectangular kernel as the only argument is spelled MaxPool2d(Size2d{2, 3}): a bare {2, 3}
// could also mean (kernel 2, stride 3).
class MaxPool2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  MaxPool2d(tensor::Size2d kernel_size, std::optional<tensor::Size2d> stride = {}, tensor::Size2d padding = 0,
            tensor::Size2d dilation = 1);
  explicit MaxPool2d(const MaxPool2dOptions& o) : MaxPool2d(o.kernel_size(), o.stride(), o.padding(), o.dilation()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  tensor::Size2d kernel_size, stride, padding, dilation;
};

class AvgPool2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  AvgPool2d(tensor::Size2d kernel_size, std::optional<tensor::Size2d> stride = {}, tensor::Size2d padding = 0,
            bool count_include_pad = true);
  explicit AvgPool2d(const AvgPool2dOptions& o)
      : AvgPool2d(o.kernel_size(), o.stride(), o.padding(), o.count_include_pad()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  tensor::Size2d kernel_size, stride, padding;
  bool count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit AdaptiveAvgPool2d(tensor::Size2d output_size);
  Tensor forward(const Tensor& input) override { return tensor::adaptive_avg_pool2d(input, output_size); }
  std::string extra_repr() const override;
  tensor::Size2d output_size;
};

// torch.nn.AdaptiveMaxPool2d (F::adaptive_max_pool2d; no return_indices).
class AdaptiveMaxPool2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit AdaptiveMaxPool2d(tensor::Size2d output_size);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  tensor::Size2d output_size;
};

// torch.nn.Flatten: dims start_dim..end_dim merged into one (by default all but the batch dim).
class Flatten : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

// torch.nn.Unflatten: dim `dim` split into `unflattened_size` (one entry may be -1).
class Unflatten : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Unflatten(int64_t dim, tensor::Shape unflattened_size)
      : Module("Unflatten"), dim(dim), unflattened_size(std::move(unflattened_size)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t dim;
  tensor::Shape unflattened_size;
};

// torch.nn.Identity: its input, unchanged (a placeholder in a Sequential).
class Identity : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};

// torch.nn.Dropout: tensor::dropout in training mode (the default generator's draws), the
// identity after eval().
class Dropout : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override { return tensor::dropout(input, p, is_training()); }
  std::string extra_repr() const override;
  double p;
};

// torch.nn.Dropout2d: whole channels of [N, C, H, W] (or [C, H, W]) zeroed in training.
class Dropout2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Dropout2d>(p); }
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double p;
};

// torch.nn.MaxPool1d / AvgPool1d over the last dim of [N, C, L] or [C, L].
class MaxPool1d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride = {}, int64_t padding = 0,
                     int64_t dilation = 1);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding, dilation;
};

class AvgPool1d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride = {}, int64_t padding = 0,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t kernel_size, stride, padding;
  bool count_include_pad;
};

// inplace (torch's ReLU(inplace=True)): the input itself is overwritten and returned (relu_),
// which autograd records unless the input is a leaf that requires grad or a view.
class ReLU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit ReLU(bool inplace = false) : Module("ReLU"), inplace(inplace) {}
  Tensor forward(const Tensor& input) override { return inplace ? input.relu_() : tensor::relu(input); }
  std::string extra_repr() const override { return inplace ? "inplace=True" : ""; }
  bool inplace;
};

class Tanh : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override { return tensor::tanh(input); }
};

class Sigmoid : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override { return tensor::sigmoid(input); }
};

// torch.nn.Embedding: weight [num_embeddings, embedding_dim] ~ N(0, 1) from the default
// generator (torch.nn.Embedding's values after the same manual_seed). forward: int64 ids of any
// shape -> [..., embedding_dim].
class Embedding : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  // padding_idx (negative: from the end): that row starts as zeros and gets no gradient, as
  // PyTorch's (F::embedding with a padding_idx).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  explicit Embedding(const EmbeddingOptions& o);
  // As torch.nn.Embedding.from_pretrained: the weight is `embeddings` itself (its storage, a
  // [num_embeddings, embedding_dim] floating tensor), trained unless `freeze`; its padding_idx
  // row is kept as given.
  static std::shared_ptr<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                    std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Tensor weight;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // in [0, num_embeddings) once made
  std::optional<double> max_norm;      // EmbeddingOptions' max_norm and norm_type
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;
};

// torch.nn.LayerNorm over the trailing dims `normalized_shape`: weight (ones) and bias (zeros)
// of that shape when elementwise_affine; bias = false leaves the bias out (nanoGPT's LayerNorm
// with bias=False).
class LayerNorm : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit LayerNorm(tensor::Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(const LayerNormOptions& o)
      : LayerNorm(o.normalized_shape(), o.eps(), o.elementwise_affine(), o.bias()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  tensor::Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight;  // normalized_shape, undefined without elementwise_affine
  Tensor bias;    // normalized_shape, undefined without elementwise_affine or bias
};

// torch.nn.GroupNorm: num_groups groups of the channels normalised (tensor::group_norm), with
// weight (ones) and bias (zeros) [num_channels] when affine.
class GroupNorm : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  explicit GroupNorm(const GroupNormOptions& o) : GroupNorm(o.num_groups(), o.num_channels(), o.eps(), o.affine()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;  // [num_channels], undefined without affine
};

// torch.nn.CELU(alpha = 1).
class CELU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit CELU(double alpha = 1.0);
  Tensor forward(const Tensor& input) override { return tensor::celu(input, alpha); }
  std::string extra_repr() const override;

  double alpha;
};

// torch.nn.LeakyReLU(negative_slope = 0.01).
class LeakyReLU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& input) override { return tensor::leaky_relu(input, negative_slope); }
  std::string extra_repr() const override;

  double negative_slope;
};

// As torch.nn.GELU: approximate "none" (exact, with erf; nanoGPT's MLP) or "tanh".
class GELU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override { return tensor::gelu(input, approximate); }
  std::string extra_repr() const override;

  std::string approximate;
};

// Runs its children in order; they are named "0", "1", ... as in torch.nn.Sequential.
class Sequential : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  // torch's append (named by the count so far) and extend; push_back is append.
  void append(std::shared_ptr<Module> module);
  void push_back(std::shared_ptr<Module> module) { append(std::move(module)); }
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  Tensor forward(const Tensor& input) override;
  size_t size() const { return named_children().size(); }
  // seq[i] by position, a negative i counting from the end as in Python.
  std::shared_ptr<Module> operator[](int64_t index) const;
  // seq[start:stop] as Python slices it (negative ends count from the end, both clamped): a new
  // Sequential of the same modules (shared, not copied) under their names here, as torch's.
  std::shared_ptr<Sequential> slice(int64_t start, int64_t stop) const;
};

// Linear layers between consecutive widths with ReLU in between (none after the last):
// mlp({784, 256, 10}) = Sequential(Linear(784, 256), ReLU(), Linear(256, 10)).
std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& widths);

// The model of PyTorch's DDP tutorial, with their parameter names.
class ToyModel : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  ToyModel();
  Tensor forward(const Tensor& input) override;  // net2(relu(net1(input)))

  std::shared_ptr<Linear> net1;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Linear> net2;
};

}  // namespace tinyddp::nn
