// The CPU backend: the kernels tensor/ops/ dispatches to for tensors on the CPU, with the same
// entry points and contracts as the CUDA backend (tensor/cuda/backend.h). Arguments are
// already validated: dtypes agree, `out` has the broadcast shape, devices are CPU. Each kernel
// lives in the .cc named below.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cpu {

// elementwise.cc
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);  // out: bool
void unary(UnaryOp op, const Tensor& out, const Tensor& x);
void pow_scalar(const Tensor& out, const Tensor& x, double exponent);
void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base);  // floating only
void copy(const Tensor& dst, const Tensor& src);                               // src broadcast to dst; any dtypes
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);  // dst += src; dst may overlap itself

// reduce.cc: `dims` are wrapped and unique; an empty list means every dim.
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim);
std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim);  // values, flat indices
void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log);

// norm.cc: batch normalisation over dim 1 of contiguous x [N, C, ...], statistics [C] in x's
// dtype (accumulated in double), weight/bias [C] or undefined; see tensor/ops.h's
// batch_norm_mean_var and friends for what each computes.
std::tuple<Tensor, Tensor> batch_norm_mean_var(const Tensor& x);
void batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                      const Tensor& invstd);
std::tuple<Tensor, Tensor> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean);
void batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                               const Tensor& sum_dy_xmu, double count);

// embedding.cc: out [n, C] = the rows of contiguous weight [V, C] at ids [n] (contiguous int64,
// each in [0, V)); the backward sets grad_weight [V, C] to the sum of grad_out's rows [n, C]
// at each id (repeated ids summed, unused rows zero).
void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids);
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids);

// layer_norm.cc: layer normalisation over the rows of contiguous x [M, N]: out [M, N] =
// (x - mean) * rstd * weight + bias (weight, bias: contiguous [N] or undefined), with each row's
// mean and rstd = 1 / sqrt(biased variance + eps) written to mean, rstd [M] (float64 for
// float64 x, else float32). The backward writes, each when defined, grad_x [M, N], and
// grad_weight, grad_bias [N] (contiguous), from dy [M, N] (contiguous), x, the forward's mean
// and rstd, and weight.
void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
void layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight);

// attention.cc: causal_softmax over contiguous x [B, M, N] into out (same layout): row i of
// each [M, N] matrix keeps columns j <= i + N - M; the backward writes grad_x from grad_out
// and the forward's y (all contiguous [B, M, N]).
void causal_softmax(const Tensor& out, const Tensor& x, double scale);
void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale);

// conv.cc: col (shape [N, C, kh, kw, OH, OW], any strides) = the windows of x [N, C, H, W]
// (any strides), padding reading as pad_value; and its gradient, grad_x (contiguous, zeroed
// here) = the sum, over the col entries that read each input element, of those entries.
void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value);
void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window);
// A direct convolution for small feature maps (isa/kernels.h, conv2d_direct_f32), stride 1,
// dilation 1, one group, float32, all contiguous: out [N, O, OH, OW] = the convolution of
// x [N, C, H, W] with weight [O, C, kh, kw] plus bias (or none). `transposed`: the gradient of
// that convolution's input instead, out [N, C, H, W] from x = grad_out [N, O, OH, OW] (the
// convolution of grad_out with the kernel flipped, its channels swapped, padding k - 1 - p;
// `bias` undefined). The caller checks conv2d_direct_fits.
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
// Max pooling: out [N, C, OH, OW] = each window's maximum (NaN wins; of equal values the first
// in row-major window order), `indices` (int64, same shape) saying where it came from, in a
// form only max_pool2d_backward reads; grad_x (contiguous, zeroed here) receives each output
// gradient at its window's maximum.
void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window);
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const Window2d& window);

// How a 2-D tensor sits in memory, as BLAS (and oneDNN) sees it; matrix_layout: its layout
// if a GEMM can read it in place (one unit stride; size-1 dims may have any stride).
struct MatrixLayout {
  bool row_major = true;
  int64_t leading_dim = 1;  // elements between consecutive rows (row-major) or columns
};
std::optional<MatrixLayout> matrix_layout(const Tensor& t);

// matmul.cc: out [n, m] (contiguous) = a [n, k] x b [k, m], any strides on a and b.
void mm(const Tensor& out, const Tensor& a, const Tensor& b);
// out [n, m] = a @ b + bias [m] (each row): Linear's forward. bfloat16 products take the bias
// into oneDNN's kernel, so each result is rounded once, as PyTorch's addmm does.
void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b);
// out [..., n, m] (contiguous) = a [..., n, k] x b [..., k, m] (the same batch dims) as one
// call, where a kernel serves it (bfloat16 on oneDNN); false, with nothing written,
// otherwise: the caller multiplies matrix by matrix.
bool bmm(const Tensor& out, const Tensor& a, const Tensor& b);
// conv.cc: the CPU's own convolution algorithms, with cuda/backend.h's contracts (x, weight,
// grad_out contiguous; out = conv(x, weight) + bias when bias is defined): bfloat16 on oneDNN
// (onednn_conv.cc) where it is used, float32 on the direct kernels where they pay (small
// maps, and "same" convolutions under AVX-512). false, with nothing written, elsewhere: the
// caller's im2col + GEMM route. The backward passes are asked only after conv2d served the
// forward.
bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
            int64_t groups);
bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                           int64_t groups);
bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& window,
                            int64_t groups);
// Whether the CPU convolves `dtype` at this geometry itself; false (bfloat16 that oneDNN does
// not serve): the caller convolves in float32 and rounds once.
bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype);
// onednn_conv.cc: whether oneDNN serves a bfloat16 convolution of this geometry (AVX-512
// selected, and its forward, backward-data and backward-weights kernels exist).
bool conv2d_bf16_served(const Window2d& window, int64_t out_channels, int64_t groups, bool bias);
// Which GEMM engine float32/float64 matmuls use now, in words (for cpu_kernels_summary).
std::string matmul_engine();

// onednn.cc: out [n, m] (contiguous) = a [n, k] x b [k, m] (+ bias [m], contiguous, in each
// row, when defined), all bfloat16, a and b with any strides, accumulated in float32 and
// rounded once, on oneDNN's kernels. false, with nothing written, where oneDNN is not used
// (cpu_isa() below AVX-512): the caller computes in float32.
bool bf16_mm_onednn(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias = Tensor());
// The same for out [..., n, m] (contiguous) = a [..., n, k] x b [..., k, m] in one call (the
// same batch dims, with any strides but 0 for a batch dim longer than 1, and a unit stride in
// each matrix); false where oneDNN is not used or these strides are not served.
bool bf16_bmm_onednn(const Tensor& out, const Tensor& a, const Tensor& b);
// What bfloat16 products run on, in words (oneDNN's kernel name, or the float32 fallback).
std::string bf16_matmul_engine();

// optim.cc: one SGD update of param (float32 or float64; grad, and buf when momentum is not 0,
// contiguous, of param's shape and dtype) in one pass over memory, in the selected
// instruction set's kernel, its elements split over the intra-op threads. `first_step`: buf
// is new and takes d itself.
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStep& step, bool first_step);

}  // namespace tinyddp::tensor::cpu
