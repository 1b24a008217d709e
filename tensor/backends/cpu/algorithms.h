// The CPU backend's own algorithms behind its entry points (internal to cpu/): the direct
// convolutions (conv.cc), how BLAS and oneDNN see a matrix (matmul.cc), and the product
// engines; speed_rules.cc chooses among them. Their callers check the conditions named here.
#pragma once

#include <optional>
#include <string>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cpu {

// conv.cc: a direct convolution for small feature maps (isa/kernels.h, conv2d_direct_f32),
// stride 1, dilation 1, one group, float32, all contiguous: out [N, O, OH, OW] = the
// convolution of x [N, C, H, W] with weight [O, C, kh, kw] plus bias (or none). `transposed`:
// the gradient of that convolution's input instead, out [N, C, H, W] from x = grad_out
// [N, O, OH, OW] (the convolution of grad_out with the kernel flipped, its channels swapped,
// padding k - 1 - p; `bias` undefined). The caller checks conv2d_direct_fits.
void conv2d_direct(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
                   bool transposed);
bool conv2d_direct_fits(int64_t in_channels, int64_t out_channels, int64_t padded_h, int64_t padded_w);
// Or, for a map of any size under AVX-512: the output as large as the input (stride 1, padding
// (k - 1) / 2), a multiple of 16 positions, out_channels (the channels written) a multiple of 8.
// The window's shape is the same for the input's gradient, which writes w.c channels.
bool conv2d_same_size_fits(int64_t out_channels, const Window2d& window);
// The weight's gradient of that convolution: grad_weight [O, C, kh, kw] (contiguous, written)
// from x [N, C, H, W] and grad_out [N, O, OH, OW]; needs conv2d_direct_fits(C, O, ...) or
// conv2d_same_size_fits(O, window).
void conv2d_direct_weight_grad(const Tensor& grad_weight, const Tensor& x, const Tensor& grad_out,
                               const Window2d& window);
// onednn_conv.cc: whether oneDNN serves a bfloat16 convolution of this geometry (AVX-512
// selected, and its forward, backward-data and backward-weights kernels exist).
bool conv2d_bf16_served(const Window2d& window, int64_t out_channels, int64_t groups, bool bias);

// matmul.cc: the machine's CPUs (not this process's share of them: a worker pinned to some
// cores cuts its products and convolutions as an unpinned one does).
int64_t machine_cpus();

// How a 2-D tensor sits in memory, as BLAS (and oneDNN) sees it; matrix_layout: its layout
// if a GEMM can read it in place (one unit stride; size-1 dims may have any stride).
struct MatrixLayout {
  bool row_major = true;
  int64_t leading_dim = 1;  // elements between consecutive rows (row-major) or columns
};
std::optional<MatrixLayout> matrix_layout(const Tensor& t);

// speed_rules.cc: the engine of a float32 or float64 product of n x k x m (transposed_b: a
// row-major and b column-major, Linear's x @ W^T). kEigen: the selected instruction set's
// Eigen build, whose gemm_f32 tries its narrow loops first; kEigenAvx2: the AVX2 build
// whatever is selected (large products on Zen 4).
enum class GemmEngine { kOpenBlas, kOneDnn, kEigen, kEigenAvx2 };
GemmEngine gemm_engine(int64_t n, int64_t k, int64_t m, bool transposed_b, bool f32);

// Which GEMM engine float32/float64 matmuls use now, in words (speed_rules.cc); what bfloat16
// products run on (onednn.cc: oneDNN's kernel name, or the float32 fallback).
std::string matmul_engine();
std::string bf16_matmul_engine(int64_t n = 64, int64_t k = 64, int64_t m = 64);

}  // namespace tinyddp::tensor::cpu
