// The CPU kernels that are compiled once per instruction set (isa/kernels.cc, built twice:
// for x86-64-v3 = AVX2 + FMA and for x86-64-v4 = AVX-512). Each build fills one table of
// plain function pointers over raw, contiguous memory; the rest of the CPU backend (layouts,
// strides, broadcasting, dtypes) is compiled once and calls through the table that
// cpu_isa() selects at start-up (tensor/cpu_isa.h).
//
// This header is the whole interface between the two worlds, so it declares data only: no
// inline function or template with code lives here, and the kernels' translation unit puts
// everything it defines (Eigen included) in namespaces named after its instruction set.
// That keeps the linker from merging an AVX-512 copy of some inline function into code that
// must run on an AVX2-only host (tests/tensor:isa_symbols_test checks the object files).
#pragma once

#include <cstdint>

#include "tinyddp/tensor/internal/kernel_ops.h"

namespace tinyddp::tensor::cpu {

// A 16-bit matrix b [k, m] (element (p, j) at b[p * row_stride + j * column_stride], one of the
// strides 1; where the row stride is, the column stride even and b 4-byte aligned) copied into
// the pair-interleaved blocks AMX's bfloat16 products read b in (oneDNN's BA16a<width>b2a):
// column blocks of `width` columns, each k x width elements, one after another; in a block, line
// q (q < k / 2) holds rows 2q and 2q + 1 interleaved, (b[2q][j], b[2q + 1][j]) for each of the
// block's columns j in order. Blocks [block_from, block_to) of dst; k even, m whole blocks.
struct PairPackArgs {
  const uint16_t* b;
  int64_t k, row_stride, column_stride, width;
  int64_t block_from, block_to;
  uint16_t* dst;
};

// c [n, m] (row-major, leading dimension ldc, or m) = a [n, k] x b [k, m]. Each operand is row-major
// or column-major with the given leading dimension (elements between rows, or columns).
template <typename T>
struct GemmArgs {
  int64_t n = 0, k = 0, m = 0;
  const T* a = nullptr;
  int64_t lda = 0;
  bool a_row_major = true;
  const T* b = nullptr;
  int64_t ldb = 0;
  bool b_row_major = true;
  T* c = nullptr;
  int64_t ldc = 0;  // c's row stride; 0: m (c holds whole rows). A plain field, as the per-ISA
                    // objects may share no inline function (tests/tensor:isa_symbols_test).
};

// Which operands of a binary row step along it: both, only a (b is one value), only b.
enum class RowPattern { kBoth, kScalarB, kScalarA };

// One SGD update over n contiguous elements: the options and the first-step flag of
// torch.optim.SGD (momentum buffer `buf` may be null when momentum is 0).
template <typename T>
struct SgdArgs {
  T* param = nullptr;
  const T* grad = nullptr;
  T* buf = nullptr;
  int64_t n = 0;
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};

// An Adam step (kernel_ops.h's AdamStep) of n elements: param, exp_avg and exp_avg_sq updated
// in place from grad. device_numbers: capturable Adam's form (tensor/fused.h's
// AdamDeviceNumbers, their values here), whose update divides m by sqrt(v) / denom_scale +
// eps_term (step.lr and step.step unused); has_keep: AdamW's factor 1 - lr * decay given.
template <typename T>
struct AdamArgs {
  T* param = nullptr;
  const T* grad = nullptr;
  T* exp_avg = nullptr;
  T* exp_avg_sq = nullptr;
  int64_t n = 0;
  AdamStep step;
  bool device_numbers = false, has_keep = false;
  T denom_scale = 0, eps_term = 0, keep = 0;
};

// A direct 2-D convolution, stride 1, dilation 1, for small feature maps (no im2col matrix):
// out[n, o, y, x] = bias[o] + sum over c, i, j of wt[(c * kh + i) * kw + j][o] *
// in[n, c, y + i - pad_h, x + j - pad_w] (zero outside the input). `in` is [n, c, h, w] and
// `out` [n, o, oh, ow], both contiguous; wt is [c * kh * kw, o] with o a multiple of 8;
// `bias` may be null. c * (h + 2 pad_h) * (w + 2 pad_w) must be at most kDirectConvFrame.
// The weight's gradient of the same convolution (conv2d_direct_weight_grad_f32) reads `in` and
// `grad` (grad_out, [n, o, oh, ow]) and writes out[(c * kh + i) * kw + j][o] = the sum over
// n, y, x of grad[n, o, y, x] * in[n, c, y + i - pad_h, x + j - pad_w]; wt and bias unused;
// `scratch` holds conv2d_direct_weight_grad_scratch(args) floats (images' padded planes and
// transposed grad_out, or shifted copies of the planes), its contents not read.
struct DirectConvArgs {
  const float* in = nullptr;
  int64_t n = 0, c = 0, h = 0, w = 0;
  const float* wt = nullptr;
  int64_t o = 0, kh = 0, kw = 0, pad_h = 0, pad_w = 0;
  const float* bias = nullptr;
  float* out = nullptr;
  int64_t oh = 0, ow = 0;
  const float* grad = nullptr;
  float* scratch = nullptr;
};
constexpr int64_t kDirectConvFrame = 4096;  // floats: one image's padded planes, on the stack
// Same-size maps (oh == h, ow == w, oh * ow a multiple of 16) take position-vector kernels with
// one load mask per tap and vector of positions: kh * kw * oh * ow / 8 masks at most this many.
constexpr int64_t kDirectConvTapMasks = 2048;  // on the stack: 4 KB under AVX-512, 64 KB under AVX2

// The kernels of one instruction set, for float32 and float64 (index 0 and 1 of each array).
struct IsaKernels {
  const char* isa;  // "avx2" or "avx512"

  void (*gemm_f32)(const GemmArgs<float>&);
  void (*gemm_f64)(const GemmArgs<double>&);
  // float32's products with a dimension of 16 or less, in the layouts and sizes the
  // register-blocked loops serve (gemm_kernels.cc); false, with c untouched, for the rest.
  // gemm_f32 tries it first.
  bool (*narrow_gemm_f32)(const GemmArgs<float>&);
  // The level-1 cache size Eigen's GEMM blocks its products for (its depth blocking grows with
  // it); the other levels stay as Eigen detected them. Call before the first product.
  void (*set_gemm_l1_blocking)(int64_t bytes);

  // o[i] = op(a[i], b[i]) over n elements (a or b a single value per `pattern`); o may be a or b.
  void (*binary_f32)(BinaryOp op, RowPattern pattern, int64_t n, float* o, const float* a, const float* b, float alpha);
  void (*binary_f64)(BinaryOp op, RowPattern pattern, int64_t n, double* o, const double* a, const double* b,
                     double alpha);
  // o[i] = op(x[i]); o may be x.
  void (*unary_f32)(UnaryOp op, int64_t n, float* o, const float* x);
  void (*unary_f64)(UnaryOp op, int64_t n, double* o, const double* x);
  // o[i] = exp(x[i]), every element in vector packets (unary's kExp runs a scalar head up to the
  // first aligned element, so its bits depend on the address; these do not).
  void (*exp_f32)(const float* x, float* o, int64_t n);
  void (*exp_f64)(const double* x, double* o, int64_t n);
  // dst[r * ld_dst + c] = src[c * ld_src + r] for r < rows, c < cols: a block of 4-byte elements
  // (any type's bits, moved as floats) transposed, 8 x 8 at a time in registers (transpose_kernels.cc).
  void (*transpose_32)(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src);
  // The same copy row by row, each row's elements gathered 8 to a register and stored as one
  // vector: for the copies whose src lines survive in the caches from row to row (tiles_pay false).
  void (*transpose_rows_32)(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src);
  // The copy PairPackArgs describes (transpose_kernels.cc).
  void (*pack_pairs_16)(const PairPackArgs& p);
  // dst[i] += src[i] (distinct memory).
  void (*accumulate_f32)(int64_t n, float* dst, const float* src);
  void (*accumulate_f64)(int64_t n, double* dst, const double* src);

  // acc[j] += x[i * cols + j] for every row i, in row order (the sum over a tensor's leading
  // dims; accumulating in double keeps the result independent of the vector width).
  void (*column_sums_f32)(const float* x, int64_t rows, int64_t cols, double* acc);
  void (*column_sums_f64)(const double* x, int64_t rows, int64_t cols, double* acc);
  // Softmax (or log-softmax) of each of `rows` contiguous rows of n elements; `scratch` has n
  // elements.
  void (*softmax_rows_f32)(const float* x, float* out, int64_t rows, int64_t n, bool log, float* scratch);
  void (*softmax_rows_f64)(const double* x, double* out, int64_t rows, int64_t n, bool log, double* scratch);
  // Causal softmax of contiguous [rows / m matrices of m, n] (internal/backend.h): row r keeps its
  // first r % m + n - m + 1 columns. The forward's rows round as softmax_rows' over the
  // masked row; the backward (dx from g and the forward's y) as sum and the elementwise ops,
  // with each row's sum(g * y) rounded to bfloat16 when `bf16_dot` (PyTorch's bfloat16
  // softmax backward keeps that sum in bfloat16). `scratch` has n elements.
  void (*causal_softmax_rows_f32)(const float* x, float* out, int64_t rows, int64_t m, int64_t n, double scale,
                                  float* scratch);
  void (*causal_softmax_rows_f64)(const double* x, double* out, int64_t rows, int64_t m, int64_t n, double scale,
                                  double* scratch);
  void (*causal_softmax_backward_rows_f32)(const float* g, const float* y, float* dx, int64_t rows, int64_t m,
                                           int64_t n, double scale, bool bf16_dot);
  void (*causal_softmax_backward_rows_f64)(const double* g, const double* y, double* dx, int64_t rows, int64_t m,
                                           int64_t n, double scale, bool bf16_dot);

  void (*sgd_f32)(const SgdArgs<float>&);
  void (*sgd_f64)(const SgdArgs<double>&);
  void (*adam_f32)(const AdamArgs<float>&);
  void (*adam_f64)(const AdamArgs<double>&);

  void (*conv2d_direct_f32)(const DirectConvArgs&);
  void (*conv2d_direct_weight_grad_f32)(const DirectConvArgs&);
  int64_t (*conv2d_direct_weight_grad_scratch)(const DirectConvArgs&);
};

const IsaKernels& avx2_kernels();    // isa/kernels.cc built for x86-64-v3
const IsaKernels& avx512_kernels();  // isa/kernels.cc built for x86-64-v4 (call only where cpu_has(kAvx512))

// The table of the instruction set cpu_isa() selects.
const IsaKernels& isa_kernels();

}  // namespace tinyddp::tensor::cpu
