// The convolution layers: torch.nn.Conv1d and Conv2d (tensor::conv1d / conv2d, with PyTorch's
// padding='same' and padding modes), and the transposed ones (the gradient of a convolution with
// respect to its input, as a layer), ConvTranspose1d and ConvTranspose2d (F::conv_transpose1d / 2d).
#pragma once

#include <memory>
#include <string>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

// torch.nn.Conv2d: weight [out, in / groups, kh, kw], bias [out]; both ~ U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw, weight first (torch.nn.Conv2d's
// values after the same manual_seed). Zero padding unless Conv2dOptions' padding(kSame) or
// padding_mode say otherwise (then F::pad pads the input first, as PyTorch does).
class Conv2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Conv2d(int64_t in_channels, int64_t out_channels, tensor::Size2d kernel_size, tensor::Size2d stride = 1,
         tensor::Size2d padding = 0, tensor::Size2d dilation = 1, int64_t groups = 1, bool bias = true);
  explicit Conv2d(const Conv2dOptions& o)
      : Conv2d(o.in_channels(), o.out_channels(), o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.groups(),
               o.bias()) {
    set_padding(o.padding_same(), o.padding_mode());
  }
  // padding='same' (stride 1 only) and padding_mode ("zeros", "reflect", "replicate",
  // "circular"), checked as PyTorch checks them.
  void set_padding(bool same, const std::string& mode);
  // input: [N, in, H, W] (or [in, H, W]) -> [N, out, OH, OW]
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Tensor weight;  // [out, in / groups, kh, kw]
  Tensor bias;    // [out], undefined without bias
  int64_t in_channels, out_channels, groups;
  tensor::Size2d kernel_size, stride, padding, dilation;
  bool padding_same = false;
  std::string padding_mode = "zeros";
};

// torch.nn.Conv1d: weight [out, in / groups, k], bias [out], initialised as Conv2d's (fan_in =
// in / groups * k); input [N, in, L] (or [in, L]) -> [N, out, OL] (tensor::conv1d); padding
// as Conv2d's.
class Conv1d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  explicit Conv1d(const Conv1dOptions& o)
      : Conv1d(o.in_channels(), o.out_channels(), o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.groups(),
               o.bias()) {
    set_padding(o.padding_same(), o.padding_mode());
  }
  void set_padding(bool same, const std::string& mode);  // as Conv2d's
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation, groups;
  bool padding_same = false;
  std::string padding_mode = "zeros";
};

// torch.nn.ConvTranspose2d (the gradient of a Conv2d with respect to its input, as a layer):
// weight [in, out / groups, kh, kw], bias [out], both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = out / groups * kh * kw (PyTorch's reading of the weight's shape), weight first; the
// output [N, out, (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1, ...].
class ConvTranspose2d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, tensor::Size2d kernel_size, tensor::Size2d stride = 1,
                  tensor::Size2d padding = 0, tensor::Size2d output_padding = 0)
      : ConvTranspose2d(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)
                            .stride(stride)
                            .padding(padding)
                            .output_padding(output_padding)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  ConvTranspose2dOptions options;
  Tensor weight;  // [in, out / groups, kh, kw]
  Tensor bias;    // [out], undefined without bias
};

// torch.nn.ConvTranspose1d: weight [in, out / groups, k], bias [out], initialised as
// ConvTranspose2d's (fan_in = out / groups * k); input [N, in, L] (or [in, L]) -> [N, out,
// (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1].
class ConvTranspose1d : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit ConvTranspose1d(const ConvTranspose1dOptions& options);
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
                  int64_t padding = 0, int64_t output_padding = 0)
      : ConvTranspose1d(ConvTranspose1dOptions(in_channels, out_channels, kernel_size)
                            .stride(stride)
                            .padding(padding)
                            .output_padding(output_padding)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  ConvTranspose1dOptions options;
  Tensor weight;  // [in, out / groups, k]
  Tensor bias;    // [out], undefined without bias
};

}  // namespace tinyddp::nn
