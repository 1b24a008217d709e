// The plain-C++ interface to the nvcc-compiled kernels (tensor/backends/cuda/elementwise.cu, reduce.cu,
// attention.cu, embedding.cu, loss.cu, optim.cu).
// No CUDA or tinyddp headers here: the .cu side sees only these descriptors, built by
// tensor/backends/cuda/backend.cc from Tensors (shapes broadcast, adjacent dims merged, devices and
// dtypes already checked). Every launcher enqueues on `stream` (a cudaStream_t) and returns
// the launch's error code (cudaError_t as int; 0 is success) for the caller to check.
#pragma once

#include <cstdint>

namespace tinyddp::tensor {
struct AdamStep;  // internal/kernel_ops.h
struct SgdStep;
}  // namespace tinyddp::tensor

namespace tinyddp::tensor::cuda::kernels {

constexpr int kMaxDims = 8;

// The shape iterated over (row-major, last dim fastest).
struct Geometry {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel = 0;
};

// One operand: its first element and, per dim of the Geometry, its stride in elements (0 for
// a broadcast dim). `dtype` uses tensor::DType's numbering.
struct Operand {
  void* data = nullptr;
  int dtype = 0;
  int64_t strides[kMaxDims] = {};
};

// Bytes of one element of `dtype` (tensor::DType's numbering).
constexpr int dtype_bytes(int dtype) {
  constexpr int bytes[] = {4, 8, 2, 2, 8, 1, 4, 1};
  return dtype >= 0 && dtype < 8 ? bytes[dtype] : 0;
}

// The elementwise kernels' vector path (elementwise.cu, flat_vectors): where the geometry is one
// dim, the output dense (stride 1) and every input dense or one element broadcast (stride 0),
// each thread moves `width` consecutive elements with one load of at most 16 bytes per dense
// input and one store (width = 16 bytes over the widest operand's element, as PyTorch's
// vectorised elementwise kernels), the last numel % width elements one by one. Returns that
// width, or 1 (element by element) where the launch is not flat or a dense operand's first
// element is not aligned to its vector (a view that starts mid-vector).
template <int N>
inline int vector_width(const Geometry& g, const Operand* const (&ops)[N]) {
  if (g.ndim != 1) return 1;
  int widest = 1;
  for (int k = 0; k < N; ++k) widest = dtype_bytes(ops[k]->dtype) > widest ? dtype_bytes(ops[k]->dtype) : widest;
  const int width = 16 / widest;
  for (int k = 0; k < N; ++k) {
    const int64_t stride = ops[k]->strides[0];
    if (stride == 0 && k > 0) continue;
    const auto address = reinterpret_cast<uintptr_t>(ops[k]->data);
    if (stride != 1 || address % static_cast<uintptr_t>(width * dtype_bytes(ops[k]->dtype)) != 0) return 1;
  }
  return width;
}

// `op`: a tensor::BinaryOp, CompareOp or UnaryOp (tensor/internal/kernel_ops.h) as an int.

// out = a op b (kAdd: a + alpha * b); out, a, b share a dtype.
int binary(int op, const Geometry& g, const Operand& out, const Operand& a, const Operand& b, double alpha,
           void* stream);
// out (bool) = a op b.
int compare(int op, const Geometry& g, const Operand& out, const Operand& a, const Operand& b, void* stream);
int unary(int op, const Geometry& g, const Operand& out, const Operand& x, void* stream);
int pow_scalar(const Geometry& g, const Operand& out, const Operand& x, double exponent, void* stream);
int pow_scalar_base(const Geometry& g, const Operand& out, const Operand& exponent, double base, void* stream);
// dst = src converted to dst's dtype, as PyTorch casts (anything -> bool is != 0).
int copy(const Geometry& g, const Operand& dst, const Operand& src, void* stream);
int fill(const Geometry& g, const Operand& dst, double value, void* stream);
// dst += src with atomic adds, so that a dst whose elements share memory (a broadcast view)
// receives every contribution. float, double, int64 (and 16-bit floats through a CAS loop).
int accumulate(const Geometry& g, const Operand& dst, const Operand& src, void* stream);
// Dropout's mask (contiguous, floating `dtype`, numel elements): element i is 1 / (1 - p) where
// philox::dropout_keep(seed, i, 1 - p) keeps it (tensor/internal/philox.h), else 0.
int dropout_mask(void* mask, int dtype, int64_t numel, double p, uint64_t seed, const uint64_t* seed_slot,
                 void* stream);

// reduce.cu: contiguous inputs, outputs of the accumulated shape (see backend.cc's plans).
// out[r] = scale * sum of row r of x [outer, inner]; out is int64 for bool x, else x's dtype.
int sum_rows(const void* x, int dtype, void* out, int64_t outer, int64_t inner, double scale, void* stream);
// out[j] = scale * sum over i of x[i, j], x [rows, inner]: the rows in sum_columns_chunks
// chunks, whose partial sums go to `partial` [chunks, inner] (float for floating x, double for
// float64, int64 for integers and bool; unused, and may be null, when there is one chunk).
int64_t sum_columns_chunks(int64_t rows, int64_t inner);
int sum_columns(const void* x, int dtype, void* out, void* partial, int64_t rows, int64_t inner, double scale,
                void* stream);
// The maximum of each row of x [outer, inner] (inner > 0) and its index in the row; NaN wins,
// ties go to the first.
int max_rows(const void* x, int dtype, void* values, int64_t* indices, int64_t outer, int64_t inner, void* stream);
// (log_)softmax of each row of x [outer, n] into out (same layout); floating dtypes.
int softmax_rows(const void* x, int dtype, void* out, int64_t outer, int64_t n, bool log_softmax, void* stream);
// Causal softmax of the rows of contiguous [rows / m matrices of m, n]: with y null, out =
// softmax(scale * x) over each row's first r % m + n - m + 1 columns, 0 beyond; with y (the
// forward's output), x is the gradient and out = scale * y * (x - sum(x * y)), 0 beyond.
int causal_softmax_rows(const void* x, const void* y, int dtype, void* out, int64_t rows, int64_t m, int64_t n,
                        double scale, void* stream);
// attention.cu's operands: heads [batch, per_batch, rows, width] with a dense last dim, element
// (b, h, r, c) at b * batch + h * head + r * row + c elements from the first (a contiguous one:
// dense_heads). The forward reads q, k, v and writes out; the backward reads dout and out too
// and writes dq, dk, dv.
struct HeadStrides {
  int64_t batch = 0, head = 0, row = 0;
};
struct AttentionLayouts {
  int64_t per_batch = 1;
  HeadStrides q, k, v, out, dout, dq, dk, dv;
};
inline HeadStrides dense_heads(int64_t per_batch, int64_t rows, int64_t width) {
  return HeadStrides{per_batch * rows * width, rows * width, width};
}
// attention.cu: flash attention over q [heads, m, e], k [heads, n, e], v [heads, n, ev] of one
// floating dtype (heads = batch x layouts.per_batch; causal: m <= n, row i sees keys j <= i + n -
// m): out [heads, m, ev] and lse [heads, m] (contiguous; float, or double for float64). The
// backward writes dq, dk, dv (the inputs' shapes) from dout and the forward's out and lse, with
// `delta` [heads, m] (lse's type) as scratch. flash_attention_supported: whether the kernels take
// this dtype and head widths (float up to 128, double up to 64); otherwise they return
// cudaErrorNotSupported. 16-bit calls with e == ev of 64 or 128, 16-byte aligned pointers and
// strides of whole 16 bytes run on tensor cores (attention_tc.cu) and take any such layouts;
// the CUDA-core kernels take contiguous operands only (cudaErrorInvalidValue otherwise).
bool flash_attention_supported(int dtype, int64_t e, int64_t ev);
// Whether flash_attention (and its backward) run on tensor cores for these operands: `count`
// pointers (every operand of the call) and the layouts' strides (those the call does not use
// left 0).
bool flash_attention_on_tensor_cores(int dtype, int64_t e, int64_t ev, const void* const* pointers, int count,
                                     const AttentionLayouts& layouts);
// dropout_p > 0: attention dropout under `seed`, or the key in device memory at `seed_slot`
// where that is not null (tensor/internal/kernel_ops.h's AttentionDropout and RandomKey).
int flash_attention(const void* q, const void* k, const void* v, int dtype, void* out, void* lse, int64_t heads,
                    int64_t m, int64_t n, int64_t e, int64_t ev, const AttentionLayouts& layouts, bool causal,
                    double scale, double dropout_p, uint64_t seed, const uint64_t* seed_slot, void* stream);
int flash_attention_backward(const void* q, const void* k, const void* v, const void* out, const void* dout,
                             const void* lse, void* delta, int dtype, void* dq, void* dk, void* dv, int64_t heads,
                             int64_t m, int64_t n, int64_t e, int64_t ev, const AttentionLayouts& layouts, bool causal,
                             double scale, double dropout_p, uint64_t seed, const uint64_t* seed_slot, void* stream);
// loss.cu: cross-entropy's rows of contiguous x [rows, n] (tensor/fused.h), targets [rows] (each
// in [0, n) or ignore_index), weight [n] (x's dtype) or null: loss [rows] (x's dtype) and stats
// [rows, 2], each row's maximum and log-sum (float, or double for float64). The backward writes
// grad [rows, n] from grad_loss [rows], x and stats; weight_sum (stats' type, on the device) is
// the weight's sum, null without a weight (n is used).
int cross_entropy_rows(const void* x, const int64_t* targets, const void* weight, int dtype, void* loss, void* stats,
                       int64_t rows, int64_t n, int64_t ignore_index, double smoothing, void* stream);
int cross_entropy_backward_rows(const void* x, const void* grad_loss, const int64_t* targets, const void* stats,
                                const void* weight, const void* weight_sum, int dtype, void* grad, int64_t rows,
                                int64_t n, int64_t ignore_index, double smoothing, void* stream);
// out [n, c] = the rows of weight [V, c] at ids [n] (in range); the backward writes into out
// [rows, c] (zeroed by the caller) each id's sum of the rows of grad [n, c] that came from it, in
// their order (no atomics: the same bits at every run), n < 2^31. Its scratch, on the device, is
// embedding_backward_scratch_bytes(n, rows) long (0: CUB failed to size it).
int embedding_rows(const void* weight, const int64_t* ids, int dtype, void* out, int64_t n, int64_t c, void* stream);
size_t embedding_backward_scratch_bytes(int64_t n, int64_t rows);
int embedding_backward_rows(const void* grad, const int64_t* ids, int dtype, void* out, int64_t n, int64_t c,
                            int64_t rows, void* scratch, void* stream);
// Layer normalisation of the rows of contiguous x [rows, n] (dtype: x, out, dy, dx, weight,
// bias; weight/bias may be null): out, and each row's mean and rstd (float, or double for
// float64); the backward writes dx from dy, x, mean, rstd and weight.
int layer_norm_rows(const void* x, const void* weight, const void* bias, int dtype, void* out, void* mean, void* rstd,
                    int64_t rows, int64_t n, double eps, void* stream);
int layer_norm_backward_rows(const void* dy, const void* x, const void* mean, const void* rstd, const void* weight,
                             int dtype, void* dx, int64_t rows, int64_t n, void* stream);

// optim.cu: the Adam step of `count` parameters (tensor/fused.h's fused_adam_steps_), each
// param, grad, exp_avg and exp_avg_sq contiguous of `numel` elements and of `dtype` (float or
// double; others: cudaErrorNotSupported), up to kTensorsPerLaunch per launch. Capturable Adam
// (fused.h's AdamDeviceNumbers): denom_scale and eps_term point at one element each on the
// device (null: the host's numbers, for every parameter of the list alike), keep too for AdamW
// with a tensor rate.
constexpr int kTensorsPerLaunch = 40;
struct AdamTensorPointers {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t numel;
  const void* denom_scale = nullptr;
  const void* eps_term = nullptr;
  const void* keep = nullptr;
};
int adam_steps(const AdamTensorPointers* list, int count, int dtype, const AdamStep& step, void* stream);
// The SGD step of `count` parameters (tensor/fused.h's fused_sgd_steps_) as adam_steps takes
// Adam's: param, grad and momentum_buffer (null without momentum) contiguous of `numel`
// elements; first_step: the buffer takes the step's direction itself.
struct SgdTensorPointers {
  void* param;
  const void* grad;
  void* momentum_buffer;
  int64_t numel;
  bool first_step;
};
int sgd_steps(const SgdTensorPointers* list, int count, int dtype, const SgdStep& step, void* stream);
// foreach_norm: out[i] (`dtype`) = the 2-norm of tensor i (data[i], numel[i] elements, contiguous,
// floating), its sum of squares in float (double for float64) over chunks whose partial sums go
// to `partial` (foreach_norm_scratch(numel, count) of them, of that type); foreach_mul: every
// tensor times *scale (one element of `dtype` on the device).
int64_t foreach_norm_scratch(const int64_t* numel, int count);
int foreach_norm(void* const* data, const int64_t* numel, int count, int dtype, void* partial, void* out, void* stream);
int foreach_mul(void* const* data, const int64_t* numel, int count, int dtype, const void* scale, void* stream);

}  // namespace tinyddp::tensor::cuda::kernels
