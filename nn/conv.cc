// The convolution layers (conv.h): PyTorch's initial weights (the same draws, weight first),
// forward through tensor::conv1d / conv2d (the input padded by F::pad first for padding='same'
// or a padding mode) and F::conv_transpose1d / 2d, PyTorch's reprs.
#include "tinyddp/nn/conv.h"

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

Conv2d::Conv2d(int64_t in, int64_t out, tensor::Size2d kernel, tensor::Size2d stride_, tensor::Size2d padding_,
               tensor::Size2d dilation_, int64_t groups_, bool with_bias)
    : Module("Conv2d"), in_channels(in), out_channels(out), groups(groups_), kernel_size(kernel), stride(stride_),
      padding(padding_), dilation(dilation_) {
  TDDP_CHECK(in > 0 && out > 0, "Conv2d: in_channels ({}) and out_channels ({}) must be positive", in, out);
  TDDP_CHECK(groups > 0 && in % groups == 0 && out % groups == 0,
             "Conv2d: groups ({}) must be positive and divide in_channels ({}) and out_channels ({})", groups, in, out);
  TDDP_CHECK(kernel.h > 0 && kernel.w > 0, "Conv2d: kernel_size must be positive, got {}", pair_repr(kernel));
  const int64_t fan_in = in / groups * kernel.h * kernel.w;
  weight = register_parameter("weight", uniform_init({out, in / groups, kernel.h, kernel.w}, fan_in));
  if (with_bias) bias = register_parameter("bias", uniform_init({out}, fan_in));
}

namespace {
void check_padding(const char* layer, bool same, bool strided, const std::string& mode) {
  TDDP_CHECK(mode == "zeros" || mode == "reflect" || mode == "replicate" || mode == "circular",
             "{}: padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
             "padding_mode='{}'",
             layer, mode);
  TDDP_CHECK(!same || !strided, "{}: padding='same' is not supported for strided convolutions", layer);
}

// F::pad's [left, right] for one dim: 'same' splits dilation (k - 1) with the odd one at the
// end (PyTorch's split), else `padding` on both sides.
void add_side_pads(std::vector<int64_t>& pads, bool same, int64_t padding, int64_t dilation, int64_t kernel) {
  const int64_t total = same ? dilation * (kernel - 1) : 2 * padding;
  pads.push_back(total / 2);
  pads.push_back(total - total / 2);
}

// The input padded for a convolution that then pads nothing.
Tensor pad_input(const Tensor& input, const std::vector<int64_t>& pads, const std::string& mode) {
  return functional::pad(input, pads, mode == "zeros" ? "constant" : mode);
}

// PyTorch's repr of the padding: "same", or the explicit one when not zero.
std::string padding_repr(bool same, const std::string& explicit_padding) {
  return same ? ", padding=same" : explicit_padding;
}
}  // namespace

void Conv2d::set_padding(bool same, const std::string& mode) {
  check_padding("Conv2d", same, stride.h != 1 || stride.w != 1, mode);
  padding_same = same;
  padding_mode = mode;
}

Tensor Conv2d::forward(const Tensor& input) {
  TDDP_CHECK((input.dim() == 3 || input.dim() == 4) && input.size(-3) == in_channels,
             "Conv2d: expected input [N, {}, H, W] or [{}, H, W] ({} in_channels), got shape {}", in_channels,
             in_channels, in_channels, tensor::format_shape(input.sizes()));
  if (!padding_same && padding_mode == "zeros")
    return tensor::conv2d(input, weight, bias, stride, padding, dilation, groups);
  std::vector<int64_t> pads;  // the last dim first, as F::pad takes them
  add_side_pads(pads, padding_same, padding.w, dilation.w, kernel_size.w);
  add_side_pads(pads, padding_same, padding.h, dilation.h, kernel_size.h);
  return tensor::conv2d(pad_input(input, pads, padding_mode), weight, bias, stride, 0, dilation, groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, pair_repr(kernel_size),
                              pair_repr(stride));
  s += padding_repr(padding_same, padding.h != 0 || padding.w != 0 ? ", padding=" + pair_repr(padding) : "");
  if (dilation.h != 1 || dilation.w != 1) s += ", dilation=" + pair_repr(dilation);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != "zeros") s += ", padding_mode=" + padding_mode;
  return s;
}

Conv1d::Conv1d(int64_t in, int64_t out, int64_t kernel, int64_t stride_, int64_t padding_, int64_t dilation_,
               int64_t groups_, bool with_bias)
    : Module("Conv1d"), in_channels(in), out_channels(out), kernel_size(kernel), stride(stride_), padding(padding_),
      dilation(dilation_), groups(groups_) {
  TDDP_CHECK(in > 0 && out > 0 && kernel > 0,
             "Conv1d: in_channels ({}), out_channels ({}) and kernel_size ({}) must "
             "be positive",
             in, out, kernel);
  TDDP_CHECK(groups > 0 && in % groups == 0 && out % groups == 0,
             "Conv1d: groups ({}) must be positive and divide in_channels ({}) and out_channels ({})", groups, in, out);
  weight = register_parameter("weight", uniform_init({out, in / groups, kernel}, in / groups * kernel));
  if (with_bias) bias = register_parameter("bias", uniform_init({out}, in / groups * kernel));
}

void Conv1d::set_padding(bool same, const std::string& mode) {
  check_padding("Conv1d", same, stride != 1, mode);
  padding_same = same;
  padding_mode = mode;
}

Tensor Conv1d::forward(const Tensor& input) {
  TDDP_CHECK((input.dim() == 2 || input.dim() == 3) && input.size(-2) == in_channels,
             "Conv1d: expected input [N, {}, L] or [{}, L], got shape {}", in_channels, in_channels,
             tensor::format_shape(input.sizes()));
  if (!padding_same && padding_mode == "zeros")
    return tensor::conv1d(input, weight, bias, stride, padding, dilation, groups);
  std::vector<int64_t> pads;
  add_side_pads(pads, padding_same, padding, dilation, kernel_size);
  return tensor::conv1d(pad_input(input, pads, padding_mode), weight, bias, stride, 0, dilation, groups);
}

std::string Conv1d::extra_repr() const {
  std::string s =
      fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels, out_channels, kernel_size, stride);
  s += padding_repr(padding_same, padding != 0 ? fmt::format(", padding=({},)", padding) : "");
  if (dilation != 1) s += fmt::format(", dilation=({},)", dilation);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != "zeros") s += ", padding_mode=" + padding_mode;
  return s;
}

std::shared_ptr<Module> Conv2d::clone_structure() const {
  auto copy = std::make_shared<Conv2d>(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                                       bias.defined());
  copy->set_padding(padding_same, padding_mode);
  return copy;
}
std::shared_ptr<Module> Conv1d::clone_structure() const {
  auto copy = std::make_shared<Conv1d>(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                                       bias.defined());
  copy->set_padding(padding_same, padding_mode);
  return copy;
}

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
