// The CPU's choice of convolution algorithm (backend.h: conv2d and its two backward passes,
// conv2d_native): bfloat16 on oneDNN where it is used (onednn_conv.cc); float32 on the direct
// kernels (conv.cc, isa/conv_kernels.cc) where they beat im2col + GEMM; false elsewhere, and
// tensor/ops/conv.cc takes the im2col route. The rules are measured on this backend's kernels
// (bench/README.md), so they live here, not in the op.
#include "tinyddp/tensor/cpu/algorithms.h"
#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/onednn.h"

namespace tinyddp::tensor::cpu {

namespace {

// Small feature maps: a direct convolution instead of im2col + GEMM, for the forward and for
// the input's gradient. At the digits CNN's second layer (16 -> 32 channels, 4x4) writing the
// column matrix and reordering the GEMM's output cost as much as the product itself
// (bench/README.md). float32, stride 1, dilation 1, one group, at least 8 input channels, the
// channels it writes a multiple of 8, and either at most 64 output positions or a "same"
// convolution (output as large as the input) of any size, which the position-vector kernels
// do without the column matrix and its packing (the larger layer of bench/conv_bench.cc:
// forward 27.5 -> 23.6 ms).
constexpr int64_t kDirectMaxPositions = 64;

bool small_map(const Window2d& win, int64_t out_channels) {
  return win.oh * win.ow <= kDirectMaxPositions &&
         conv2d_direct_fits(win.c, out_channels, win.padded_h(), win.padded_w());
}

// The weight's gradient, directly, where the forward was direct.
bool direct_weight_grad_applies(const Window2d& win, int64_t out_channels) {
  return small_map(win, out_channels) || conv2d_same_size_fits(out_channels, win);
}

bool direct_applies(DType dtype, const Window2d& win, int64_t out_channels, int64_t groups) {
  return dtype == kFloat32 && groups == 1 && win.sh == 1 && win.sw == 1 && win.dh == 1 && win.dw == 1 && win.c >= 8 &&
         direct_weight_grad_applies(win, out_channels);
}

// The input's gradient, directly: a convolution of grad_out with padding k - 1 - p.
bool direct_input_grad_applies(const Window2d& win, int64_t out_channels) {
  return win.ph <= win.kh - 1 && win.pw <= win.kw - 1 &&
         (conv2d_direct_fits(out_channels, win.c, win.oh + 2 * (win.kh - 1 - win.ph),
                             win.ow + 2 * (win.kw - 1 - win.pw)) ||
          conv2d_same_size_fits(win.c, win));
}

}  // namespace

bool CpuBackend::conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Window2d& window, int64_t groups) {
  if (x.dtype() == kBFloat16) return onednn_conv2d(out, x, weight, bias, window, groups);
  if (!direct_applies(x.dtype(), window, out.size(1), groups)) return false;
  conv2d_direct(out, x, weight, bias, window, false);
  return true;
}

bool CpuBackend::conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                       const Window2d& window, int64_t groups) {
  if (grad_out.dtype() == kBFloat16) return onednn_conv2d_backward_input(grad_x, grad_out, weight, window, groups);
  const int64_t out_channels = grad_out.size(1);
  if (!direct_applies(grad_out.dtype(), window, out_channels, groups) ||
      !direct_input_grad_applies(window, out_channels)) {
    return false;
  }
  conv2d_direct(grad_x, grad_out, weight, Tensor(), window, true);
  return true;
}

bool CpuBackend::conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                        const Window2d& window, int64_t groups) {
  if (grad_out.dtype() == kBFloat16) return onednn_conv2d_backward_weight(grad_weight, grad_out, x, window, groups);
  if (!direct_applies(grad_out.dtype(), window, grad_out.size(1), groups)) return false;
  conv2d_direct_weight_grad(grad_weight, x, grad_out, window);
  return true;
}

bool CpuBackend::conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) {
  return dtype != kBFloat16 || conv2d_bf16_served(window, out_channels, groups, bias);
}

}  // namespace tinyddp::tensor::cpu
