// Transposed convolutions (the gradient of a convolution with respect to its input, as a layer):
// torch.nn.ConvTranspose1d and ConvTranspose2d, computed by F::conv_transpose1d / 2d.
#pragma once

#include <memory>
#include <string>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

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
