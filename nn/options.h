// The layers' options structs, as libtorch's: the required arguments in the constructor, every
// other one a chained setter with PyTorch's default, so that
//   nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(1).bias(false))
// reads as torch.nn.Conv2d(64, 64, 3, padding=1, bias=False). Each layer with more than three
// arguments takes its options (the positional constructors stay); the defaults here are the
// positional constructors' (tests/nn/options_test.cc builds every layer both ways).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/base/arg.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

// padding(kSame) and padding(kValid) of Conv1dOptions and Conv2dOptions, as libtorch's
// torch::kSame / torch::kValid (PyTorch's padding='same' / 'valid').
struct PaddingSame {};
inline constexpr PaddingSame kSame{};
struct PaddingValid {};
inline constexpr PaddingValid kValid{};

// A convolution's padding setters: a size (an int64_t or a Size2d), kSame (the output as long
// as the input at stride 1, the odd one of the padding at the end, as PyTorch's) or kValid (no
// padding); the last one set holds, as libtorch's padding variant.
template <typename Derived, typename Size>
struct ConvPadding {
  Derived& padding(const Size& size) {
    padding_ = size;
    padding_same_ = false;
    return static_cast<Derived&>(*this);
  }
  Derived& padding(PaddingSame) {
    padding_same_ = true;
    return static_cast<Derived&>(*this);
  }
  Derived& padding(PaddingValid) { return padding(Size(0)); }
  const Size& padding() const { return padding_; }
  bool padding_same() const { return padding_same_; }

 private:
  Size padding_ = Size(0);
  bool padding_same_ = false;
};

struct Conv1dOptions : ConvPadding<Conv1dOptions, int64_t> {
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TINYDDP_ARG(int64_t, in_channels);
  TINYDDP_ARG(int64_t, out_channels);
  TINYDDP_ARG(int64_t, kernel_size);
  TINYDDP_ARG(int64_t, stride) = 1;
  TINYDDP_ARG(int64_t, dilation) = 1;
  TINYDDP_ARG(int64_t, groups) = 1;
  TINYDDP_ARG(bool, bias) = true;
  // "zeros", "reflect", "replicate" or "circular", as PyTorch's padding_mode.
  TINYDDP_ARG(std::string, padding_mode) = "zeros";
};

struct Conv2dOptions : ConvPadding<Conv2dOptions, tensor::Size2d> {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, tensor::Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TINYDDP_ARG(int64_t, in_channels);
  TINYDDP_ARG(int64_t, out_channels);
  TINYDDP_ARG(tensor::Size2d, kernel_size);
  TINYDDP_ARG(tensor::Size2d, stride) = 1;
  TINYDDP_ARG(tensor::Size2d, dilation) = 1;
  TINYDDP_ARG(int64_t, groups) = 1;
  TINYDDP_ARG(bool, bias) = true;
  TINYDDP_ARG(std::string, padding_mode) = "zeros";  // as Conv1dOptions'
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TINYDDP_ARG(int64_t, num_embeddings);
  TINYDDP_ARG(int64_t, embedding_dim);
  TINYDDP_ARG(std::optional<int64_t>, padding_idx);
  // Rows looked up are first renormalised in place to a norm_type-norm of at most max_norm
  // (PyTorch's max_norm; norm_type 1 or 2).
  TINYDDP_ARG(std::optional<double>, max_norm);
  TINYDDP_ARG(double, norm_type) = 2.0;
  // Each id's gradient divided by how often it occurs in the batch.
  TINYDDP_ARG(bool, scale_grad_by_freq) = false;
  TINYDDP_ARG(bool, sparse) = false;  // true is refused: tinyddp has no sparse gradients
};

struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, tensor::Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TINYDDP_ARG(int64_t, in_channels);
  TINYDDP_ARG(int64_t, out_channels);
  TINYDDP_ARG(tensor::Size2d, kernel_size);
  TINYDDP_ARG(tensor::Size2d, stride) = 1;
  TINYDDP_ARG(tensor::Size2d, padding) = 0;
  TINYDDP_ARG(tensor::Size2d, output_padding) = 0;
  TINYDDP_ARG(int64_t, groups) = 1;
  TINYDDP_ARG(bool, bias) = true;
  TINYDDP_ARG(tensor::Size2d, dilation) = 1;
};

struct ConvTranspose1dOptions {
  ConvTranspose1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TINYDDP_ARG(int64_t, in_channels);
  TINYDDP_ARG(int64_t, out_channels);
  TINYDDP_ARG(int64_t, kernel_size);
  TINYDDP_ARG(int64_t, stride) = 1;
  TINYDDP_ARG(int64_t, padding) = 0;
  TINYDDP_ARG(int64_t, output_padding) = 0;
  TINYDDP_ARG(int64_t, groups) = 1;
  TINYDDP_ARG(bool, bias) = true;
  TINYDDP_ARG(int64_t, dilation) = 1;
};

// MaxPool2d's and AvgPool2d's; stride unset: the kernel size.
struct MaxPool2dOptions {
  explicit MaxPool2dOptions(tensor::Size2d kernel_size) : kernel_size_(kernel_size) {}
  TINYDDP_ARG(tensor::Size2d, kernel_size);
  TINYDDP_ARG(std::optional<tensor::Size2d>, stride);
  TINYDDP_ARG(tensor::Size2d, padding) = 0;
  TINYDDP_ARG(tensor::Size2d, dilation) = 1;
};

struct AvgPool2dOptions {
  explicit AvgPool2dOptions(tensor::Size2d kernel_size) : kernel_size_(kernel_size) {}
  TINYDDP_ARG(tensor::Size2d, kernel_size);
  TINYDDP_ARG(std::optional<tensor::Size2d>, stride);
  TINYDDP_ARG(tensor::Size2d, padding) = 0;
  TINYDDP_ARG(bool, count_include_pad) = true;
};

// BatchNorm1d's and BatchNorm2d's; momentum std::nullopt: a cumulative average (momentum=None).
struct BatchNormOptions {
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  TINYDDP_ARG(int64_t, num_features);
  TINYDDP_ARG(double, eps) = 1e-5;
  TINYDDP_ARG(std::optional<double>, momentum) = 0.1;
  TINYDDP_ARG(bool, affine) = true;
  TINYDDP_ARG(bool, track_running_stats) = true;
};

// InstanceNorm1d's and InstanceNorm2d's (PyTorch's defaults: no affine, no running statistics).
struct InstanceNormOptions {
  explicit InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}
  TINYDDP_ARG(int64_t, num_features);
  TINYDDP_ARG(double, eps) = 1e-5;
  TINYDDP_ARG(double, momentum) = 0.1;
  TINYDDP_ARG(bool, affine) = false;
  TINYDDP_ARG(bool, track_running_stats) = false;
};

// Upsample's: one of size or scale_factor, one entry for every spatial dim or one for all
// (empty: not given, so that .scale_factor({2.0, 2.0}) reads as PyTorch's); mode "nearest",
// "nearest-exact", "linear", "bilinear", "trilinear" or "area"; align_corners only for the
// linear modes (unset: false).
struct UpsampleOptions {
  TINYDDP_ARG(std::vector<int64_t>, size);
  TINYDDP_ARG(std::vector<double>, scale_factor);
  TINYDDP_ARG(std::string, mode) = "nearest";
  TINYDDP_ARG(std::optional<bool>, align_corners);
};

// F::interpolate's: Upsample's, and recompute_scale_factor (true: the kernel's scale comes from
// the sizes, not from scale_factor).
struct InterpolateFuncOptions {
  TINYDDP_ARG(std::vector<int64_t>, size);
  TINYDDP_ARG(std::vector<double>, scale_factor);
  TINYDDP_ARG(std::string, mode) = "nearest";
  TINYDDP_ARG(std::optional<bool>, align_corners);
  TINYDDP_ARG(std::optional<bool>, recompute_scale_factor);
  TINYDDP_ARG(bool, antialias) = false;  // bilinear and bicubic only, as PyTorch's
};

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  TINYDDP_ARG(int64_t, num_groups);
  TINYDDP_ARG(int64_t, num_channels);
  TINYDDP_ARG(double, eps) = 1e-5;
  TINYDDP_ARG(bool, affine) = true;
};

struct LayerNormOptions {
  explicit LayerNormOptions(tensor::Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  TINYDDP_ARG(tensor::Shape, normalized_shape);
  TINYDDP_ARG(double, eps) = 1e-5;
  TINYDDP_ARG(bool, elementwise_affine) = true;
  TINYDDP_ARG(bool, bias) = true;
};

// LSTM's, GRU's and RNN's (nonlinearity: RNN's only, "tanh" or "relu").
struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TINYDDP_ARG(int64_t, input_size);
  TINYDDP_ARG(int64_t, hidden_size);
  TINYDDP_ARG(int64_t, num_layers) = 1;
  TINYDDP_ARG(std::string, nonlinearity) = "tanh";
  TINYDDP_ARG(bool, bias) = true;
  TINYDDP_ARG(bool, batch_first) = false;
  TINYDDP_ARG(double, dropout) = 0.0;
  TINYDDP_ARG(bool, bidirectional) = false;
  TINYDDP_ARG(int64_t, proj_size) = 0;  // LSTM only: each h projected to this size (0: none)
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

// kdim, vdim 0: embed_dim.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  TINYDDP_ARG(int64_t, embed_dim);
  TINYDDP_ARG(int64_t, num_heads);
  TINYDDP_ARG(double, dropout) = 0.0;
  TINYDDP_ARG(bool, bias) = true;
  TINYDDP_ARG(bool, batch_first) = false;
  TINYDDP_ARG(bool, add_bias_kv) = false;
  TINYDDP_ARG(bool, add_zero_attn) = false;
  TINYDDP_ARG(int64_t, kdim) = 0;
  TINYDDP_ARG(int64_t, vdim) = 0;
};

// TransformerEncoderLayer's; activation "relu" or "gelu".
struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TINYDDP_ARG(int64_t, d_model);
  TINYDDP_ARG(int64_t, nhead);
  TINYDDP_ARG(int64_t, dim_feedforward) = 2048;
  TINYDDP_ARG(double, dropout) = 0.1;
  TINYDDP_ARG(std::string, activation) = "relu";
  TINYDDP_ARG(double, layer_norm_eps) = 1e-5;
  TINYDDP_ARG(bool, batch_first) = false;
  TINYDDP_ARG(bool, norm_first) = false;
  TINYDDP_ARG(bool, bias) = true;
};

}  // namespace tinyddp::nn
