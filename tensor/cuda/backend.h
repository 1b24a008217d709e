// The CUDA kernels that tensor/ops/ dispatches to for tensors on a GPU: the same entry points, with
// the same contracts, as the CPU backend (tensor/cpu/backend.h). Arguments are validated by
// tensor/ops/; the tensors passed to one call are on the same CUDA device (copy: see below). Work
// is queued on the device's compute stream and not waited for. In a build without CUDA these
// throw (no CUDA tensor can exist there anyway: allocation fails first).
#pragma once

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cuda {

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void unary(UnaryOp op, const Tensor& out, const Tensor& x);
void pow_scalar(const Tensor& out, const Tensor& x, double exponent);
void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base);  // floating only
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);
// dst = src (broadcast, dtype converted) where either side, or both, is on a GPU: between
// devices the bytes move with cudaMemcpy (staged through a contiguous buffer of src's dtype
// when src is strided). The stream rules (docs/tensor.md):
// - host to GPU: from pinned memory; a pageable source is first copied into a pinned block
//   the allocator keeps until the copy ran, so the host never waits for it. A source the
//   caller pinned is the caller's memory: copy waits for the copy unless non_blocking.
// - GPU to host: waits, unless non_blocking and dst is pinned, dense and of src's dtype.
// - GPU to GPU: the destination's stream waits for the source's work so far, the copy runs
//   there, and the source's stream waits for the copy before anything later writes src.
void copy(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// to_host_after: declared in tensor/cuda.h.
// A new contiguous CPU tensor in page-locked memory, uninitialised (tensor/cuda.cc; throws,
// saying why, without CUDA or a GPU).
Tensor empty_pinned(const Shape& sizes, DType dtype, const char* op);
// Reductions with the CPU's contracts (`dims` wrapped and unique; empty: every dim).
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim);
std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim);
// cuDNN where it applies (float32/64/16), else our kernel.
void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log);
// Attention's causal softmax with the CPU's contracts (cpu/backend.h): one block per row
// (reduce.cu).
void causal_softmax(const Tensor& out, const Tensor& x, double scale);
void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale);
// Embedding lookups with the CPU's contracts (embedding.cu).
void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids);
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids);
// Layer normalisation with the CPU's contracts (cpu/backend.h): one block per row
// (reduce.cu).
void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
// The input's gradient only: the weight's and bias's are column sums, composed in ops/
// (composite::layer_norm_param_grads).
void layer_norm_backward(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight);
// im2col/col2im with the CPU's contracts, as a strided copy of the padded input's windows and an
// accumulation into them (the copy and accumulate kernels).
void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value);
void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window);
// No kernels of its own for batch normalisation, max pooling and layer normalisation's
// parameter gradients: ops/ composes those from the ops above (ops/composite.h).
// Convolution through cuDNN (dnn::conv_* in libraries.h, the same contracts; the forward adds
// `bias` when defined): false where cuDNN does not apply, and ops/conv.cc then takes the
// im2col route.
bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
            int64_t groups);
bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                           int64_t groups);
bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& window,
                            int64_t groups);
// Whether the GPU convolves `dtype` itself: always (cuDNN, or im2col in that dtype).
bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype);
// out [n, m] (contiguous) = a [n, k] x b [k, m] through cuBLAS.
void mm(const Tensor& out, const Tensor& a, const Tensor& b);
// out [n, m] = a @ b + bias [m] (each row): Linear's forward.
void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b);
// Batched products in one call: not yet (false: the caller multiplies matrix by matrix).
bool bmm(const Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace tinyddp::tensor::cuda
