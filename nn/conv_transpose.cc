// ConvTranspose1d and ConvTranspose2d (conv_transpose.h): PyTorch's initial weights (the same
// draws, weight first), forward through F::conv_transpose1d / 2d, PyTorch's reprs.
#include "tinyddp/nn/conv_transpose.h"

#include "tinyddp/nn/functional.h"
#include "tinyddp/nn/layers.h"

namespace tinyddp::nn {

using detail::pair_repr;
using detail::uniform_init;

namespace {
void check_channels(const char* layer, int64_t in, int64_t out, int64_t groups) {
  TDDP_CHECK(in > 0 && out > 0, "{}: in_channels ({}) and out_channels ({}) must be positive", layer, in, out);
  TDDP_CHECK(groups > 0 && in % groups == 0 && out % groups == 0,
             "{}: groups ({}) must be positive and divide in_channels ({}) and out_channels ({})", layer, groups, in,
             out);
}
}  // namespace

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o) : Module("ConvTranspose2d"), options(o) {
  const int64_t in = o.in_channels(), out = o.out_channels(), groups = o.groups();
  check_channels("ConvTranspose2d", in, out, groups);
  const tensor::Size2d k = o.kernel_size();
  TDDP_CHECK(k.h > 0 && k.w > 0, "ConvTranspose2d: kernel_size must be positive, got {}", pair_repr(k));
  const int64_t fan_in = out / groups * k.h * k.w;  // PyTorch's fan of a [in, out / groups, kh, kw] weight
  weight = register_parameter("weight", uniform_init({in, out / groups, k.h, k.w}, fan_in));
  if (o.bias()) bias = register_parameter("bias", uniform_init({out}, fan_in));
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return functional::conv_transpose2d(input, weight, bias, options.stride(), options.padding(),
                                      options.output_padding(), options.groups(), options.dilation());
}

std::string ConvTranspose2d::extra_repr() const {
  const ConvTranspose2dOptions& o = options;
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", o.in_channels(), o.out_channels(),
                              pair_repr(o.kernel_size()), pair_repr(o.stride()));
  const auto differs = [](tensor::Size2d a, int64_t v) { return a.h != v || a.w != v; };
  if (differs(o.padding(), 0)) s += ", padding=" + pair_repr(o.padding());
  if (differs(o.dilation(), 1)) s += ", dilation=" + pair_repr(o.dilation());
  if (differs(o.output_padding(), 0)) s += ", output_padding=" + pair_repr(o.output_padding());
  if (o.groups() != 1) s += fmt::format(", groups={}", o.groups());
  if (!o.bias()) s += ", bias=False";
  return s;
}

std::shared_ptr<Module> ConvTranspose2d::clone_structure() const { return std::make_shared<ConvTranspose2d>(options); }

ConvTranspose1d::ConvTranspose1d(const ConvTranspose1dOptions& o) : Module("ConvTranspose1d"), options(o) {
  const int64_t in = o.in_channels(), out = o.out_channels(), groups = o.groups(), k = o.kernel_size();
  check_channels("ConvTranspose1d", in, out, groups);
  TDDP_CHECK(k > 0, "ConvTranspose1d: kernel_size must be positive, got {}", k);
  const int64_t fan_in = out / groups * k;
  weight = register_parameter("weight", uniform_init({in, out / groups, k}, fan_in));
  if (o.bias()) bias = register_parameter("bias", uniform_init({out}, fan_in));
}

Tensor ConvTranspose1d::forward(const Tensor& input) {
  return functional::conv_transpose1d(input, weight, bias, options.stride(), options.padding(),
                                      options.output_padding(), options.groups(), options.dilation());
}

std::string ConvTranspose1d::extra_repr() const {
  const ConvTranspose1dOptions& o = options;
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", o.in_channels(), o.out_channels(),
                              o.kernel_size(), o.stride());
  if (o.padding() != 0) s += fmt::format(", padding=({},)", o.padding());
  if (o.dilation() != 1) s += fmt::format(", dilation=({},)", o.dilation());
  if (o.output_padding() != 0) s += fmt::format(", output_padding=({},)", o.output_padding());
  if (o.groups() != 1) s += fmt::format(", groups={}", o.groups());
  if (!o.bias()) s += ", bias=False";
  return s;
}

std::shared_ptr<Module> ConvTranspose1d::clone_structure() const { return std::make_shared<ConvTranspose1d>(options); }

}  // namespace tinyddp::nn
