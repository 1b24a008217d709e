// The tensor operations: elementwise math with NumPy broadcasting, comparisons, reductions,
// softmax, matmul, and the out-variants behind the in-place methods. Each op validates its
// arguments (shape, dtype, device: errors name the op and the offending argument) and then
// dispatches on the device with a plain switch to a kernel in cpu/ (cuda/ later).
//
// dtype rules: tensor operands of a binary op must share a dtype (no silent promotion).
// A scalar keeps the tensor's dtype, except that a non-integral scalar with an int64 tensor
// computes in float32, a float16/bfloat16 tensor combines with a scalar in float32 and rounds
// the result once (as PyTorch 2.x), and div/exp/log/sqrt/tanh/sigmoid of int64 compute in
// float32, as in PyTorch. bool tensors take part in comparisons and copies, not arithmetic.
#pragma once

#include <tuple>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

// ---- elementwise, binary (broadcasting) -----------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);  // true division
Tensor div(const Tensor& a, double b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN wins, as in PyTorch
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- comparisons: bool masks ------------------------------------------------------------------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// ---- elementwise, unary -------------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);

// ---- reductions -------------------------------------------------------------------------------
// Over all elements (a 0-d result), or over `dims` (an empty list also means all).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// max over all elements; max along a dim gives (values, indices) with the first index of the
// maximum (NaN counts as the maximum, as in PyTorch).
Tensor max(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// Numerically stable (the row maximum is subtracted first).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra ---------------------------------------------------------------------------
// 1-D/2-D/batched as torch.matmul: batch dims broadcast; transposed views are used in place.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);  // strictly 2-D x 2-D
// input [..., in] @ weight^T [in, out] + bias [out] (bias may be undefined), as
// torch.nn.functional.linear: one GEMM and one graph node, whose backward computes the
// weight gradient directly in the weight's layout.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

// Sums `grad` over the dims that broadcasting expanded, giving it `shape` (the gradient of a
// broadcast input; torch.Tensor.sum_to_size).
Tensor sum_to_size(const Tensor& grad, const Shape& shape);

// ---- comparing whole tensors ------------------------------------------------------------------
// |a - b| <= atol + rtol * |b| elementwise (a, b broadcast); dtypes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape and the same values (NaN != NaN).
bool equal(const Tensor& a, const Tensor& b);

// ---- operators ------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b);
inline Tensor operator-(const Tensor& x) { return neg(x); }

// ---- out-variants and helpers (also used by the in-place methods) ---------------------------
// out = a + alpha * b, out = a * b, out = a / b, written into an existing tensor whose shape
// must be the broadcast shape; `op` names the caller in errors.
void add_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, const char* op);
void mul_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op);
void div_out(const Tensor& out, const Tensor& a, const Tensor& b, const char* op);
// dst = src (src broadcast to dst's shape, dtype converted, any strides on either side).
void copy_into(const Tensor& dst, const Tensor& src, bool non_blocking = false);
void fill_out(const Tensor& dst, double value);
// dst += src where elements of dst may share memory (a broadcast view): each write adds in
// turn, so shared slots receive the sum. Used by as_strided's backward.
void accumulate_into(const Tensor& dst, const Tensor& src);
// The scalar `value` as a 0-d tensor in the dtype it combines with `t` in (the rules above).
Tensor scalar_like(const Tensor& t, double value, const char* op);

// ---- fused optimizer steps --------------------------------------------------------------------
// torch.optim.SGD's options for one parameter's update.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
// One SGD update of `param` in a single pass over memory, in the selected instruction set's
// kernel: the same float operations, in the same order and rounding, as SGD's op-by-op update
// (grad + wd * p; buf = buf * momentum + (1 - dampening) * d, or d itself on the first step;
// p += -lr * d), so both give bit-identical parameters. With momentum, an undefined
// `*momentum_buffer` means the first step: it is allocated here. Applies to CPU
// float32/float64 tensors that are contiguous, of one shape and dtype; returns false,
// touching nothing, for anything else.
bool fused_sgd_step_(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step);

}  // namespace tinyddp::tensor
