// The vendor libraries behind some CUDA ops (host code, only under --config=cuda): matrix
// products through cuBLAS (Linear's, with their bias epilogues, through cuBLASLt), softmax and convolution through
// cuDNN. Handles are per device, taken from a pool for the duration of one call (so threads never share one at the same
// time) and bound to the device's compute stream, so library work is ordered with our own kernels.
#pragma once

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cuda {

namespace blas {
// out [n, m] (contiguous) = a [n, k] x b [k, m], a and b in any strides; float32, float64,
// float16 and bfloat16 (the 16-bit ones accumulate in float32). float32 products use TF32
// tensor cores only when allow_tf32() (tensor/cuda.h) is on.
void mm(const Tensor& out, const Tensor& a, const Tensor& b);
// out [..., n, m] (contiguous) = a [..., n, k] x b [..., k, m] (the same batch dims, any
// strides, broadcast ones too) in one strided-batched GEMM: the operands in place where one
// stride steps through their matrices, else as contiguous copies.
void bmm(const Tensor& out, const Tensor& a, const Tensor& b);
// Linear's products through cuBLASLt (blas_lt.cc), float32, float16 and bfloat16, a and b (g and
// x) read in place: out [n, m] (contiguous) = a [n, k] x b [k, m] + bias [m] on every row, the
// bias added in the product's epilogue (in float32, rounded once); grad_weight [m, k]
// (contiguous) = g [n, m]^T x [n, k] with grad_bias [m] = the sum of g's rows in the product's
// epilogue. Each returns false, writing nothing, where it does not apply (another dtype, a
// layout cuBLAS cannot read in place, an empty product, no algorithm from cuBLASLt's heuristics
// for the shape, layout and alignments, a bias not aligned to 16 bytes).
bool mm_bias(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
bool mm_bias_grad(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& g, const Tensor& x);
}  // namespace blas

namespace dnn {
// (log_)softmax of x along `dim` into out (contiguous, x's shape) through cuDNN when it
// applies (float32, float64, float16); returns false otherwise, leaving out untouched.
bool softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log);

// Convolution over window `w` with `groups` (dnn_conv.cc), on contiguous NCHW tensors of one
// floating dtype: out [N, O, OH, OW] = x [N, C, H, W] cross-correlated with weight
// [O, C/g, kh, kw] (no bias); grad_x from grad_out and weight; grad_weight from grad_out and
// x. Each output is overwritten. The algorithm for a shape is chosen once, by cuDNN's
// heuristics, and cached; float32 uses TF32 tensor cores only when cudnn_allow_tf32()
// (tensor/cuda.h). Each returns false, writing nothing, where cuDNN does not apply (sizes
// beyond int, an empty tensor, no algorithm for the shape).
bool conv_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Window2d& w, int64_t groups);
bool conv_backward_data(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& w,
                        int64_t groups);
bool conv_backward_filter(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& w,
                          int64_t groups);
}  // namespace dnn

}  // namespace tinyddp::tensor::cuda
