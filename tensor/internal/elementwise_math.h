// The elementwise formulas, one definition each, for every backend: the CPU's scalar loops
// (cpu/elementwise.cc), its per-instruction-set row kernels (cpu/isa/kernels.cc) and the CUDA
// kernels (cuda/elementwise.cu), on the host and on the device, as gelu_math.h does for GELU.
// Where a CPU kernel computes exp, log, tanh, sigmoid or GELU over a whole row with Eigen's
// vectorised functions instead (isa/kernels.cc), it writes the same formula over arrays.
//
// `C` is the type the arithmetic runs in (compute_t: float for float16 and bfloat16). NaN
// propagates: maximum and minimum return a NaN operand (std::max would drop one in its first
// argument), relu keeps NaN.
#pragma once

#include <cmath>
#include <type_traits>

#include "tinyddp/tensor/internal/gelu_math.h"
#include "tinyddp/tensor/internal/kernel_ops.h"

namespace tinyddp::tensor::elementwise_math {

template <typename C>
TINYDDP_HOST_DEVICE inline C nan_max(C a, C b) {
  if (a != a) return a;  // NOLINT: a NaN test that also compiles for integers
  if (b != b) return b;
  return a > b ? a : b;
}
template <typename C>
TINYDDP_HOST_DEVICE inline C nan_min(C a, C b) {
  if (a != a) return a;  // NOLINT
  if (b != b) return b;
  return a < b ? a : b;
}

// BinaryOp `op` of a and b (kernel_ops.h): kAdd is a + alpha * b, kReluBackward b > 0 ? a : 0
// (a the gradient, b relu's output), kMaskedFill b != 0 ? alpha : a. A compile-time op, so
// that each loop over a row holds one formula and vectorises.
template <BinaryOp op, typename C>
TINYDDP_HOST_DEVICE inline C binary(C a, C b, C alpha) {
  if constexpr (op == BinaryOp::kAdd) {
    return a + alpha * b;
  } else if constexpr (op == BinaryOp::kMul) {
    return a * b;
  } else if constexpr (op == BinaryOp::kDiv) {
    return a / b;
  } else if constexpr (op == BinaryOp::kMaximum) {
    return nan_max(a, b);
  } else if constexpr (op == BinaryOp::kMinimum) {
    return nan_min(a, b);
  } else if constexpr (op == BinaryOp::kReluBackward) {
    return b > C(0) ? a : C(0);
  } else {
    static_assert(op == BinaryOp::kMaskedFill);
    return b != C(0) ? alpha : a;
  }
}

// UnaryOp `op` of v (kernel_ops.h); the transcendental ones for floating C only.
template <UnaryOp op, typename C>
TINYDDP_HOST_DEVICE inline C unary(C v) {
  if constexpr (op == UnaryOp::kNeg) {
    return -v;
  } else if constexpr (op == UnaryOp::kAbs) {
    return v < C(0) ? -v : v;
  } else if constexpr (op == UnaryOp::kRelu) {
    return v < C(0) ? C(0) : v;  // NaN stays NaN
  } else if constexpr (!std::is_floating_point_v<C>) {
    return v;  // no integer tensor reaches the others (the ops refuse them)
  } else if constexpr (op == UnaryOp::kExp) {
    return gelu_math::exp_(v);
  } else if constexpr (op == UnaryOp::kLog) {
    return gelu_math::log_(v);
  } else if constexpr (op == UnaryOp::kSqrt) {
    return gelu_math::sqrt_(v);
  } else if constexpr (op == UnaryOp::kTanh) {
    return gelu_math::tanh_(v);
  } else if constexpr (op == UnaryOp::kSigmoid) {
    return C(1) / (C(1) + gelu_math::exp_(-v));
  } else if constexpr (op == UnaryOp::kGelu) {
    return gelu_math::gelu(v);
  } else if constexpr (op == UnaryOp::kGeluTanh) {
    return gelu_math::gelu_tanh(v);
  } else if constexpr (op == UnaryOp::kGeluGrad) {
    return gelu_math::gelu_grad(v);
  } else {
    static_assert(op == UnaryOp::kGeluTanhGrad);
    return gelu_math::gelu_tanh_grad(v);
  }
}

// The same with the op known only at run time (the CUDA kernels take it as an argument).
template <typename C>
TINYDDP_HOST_DEVICE inline C binary(BinaryOp op, C a, C b, C alpha) {
  switch (op) {
    case BinaryOp::kAdd: return binary<BinaryOp::kAdd>(a, b, alpha);
    case BinaryOp::kMul: return binary<BinaryOp::kMul>(a, b, alpha);
    case BinaryOp::kDiv: return binary<BinaryOp::kDiv>(a, b, alpha);
    case BinaryOp::kMaximum: return binary<BinaryOp::kMaximum>(a, b, alpha);
    case BinaryOp::kMinimum: return binary<BinaryOp::kMinimum>(a, b, alpha);
    case BinaryOp::kReluBackward: return binary<BinaryOp::kReluBackward>(a, b, alpha);
    case BinaryOp::kMaskedFill: return binary<BinaryOp::kMaskedFill>(a, b, alpha);
  }
  return a;
}
template <typename C>
TINYDDP_HOST_DEVICE inline C unary(UnaryOp op, C v) {
  switch (op) {
    case UnaryOp::kNeg: return unary<UnaryOp::kNeg>(v);
    case UnaryOp::kAbs: return unary<UnaryOp::kAbs>(v);
    case UnaryOp::kExp: return unary<UnaryOp::kExp>(v);
    case UnaryOp::kLog: return unary<UnaryOp::kLog>(v);
    case UnaryOp::kSqrt: return unary<UnaryOp::kSqrt>(v);
    case UnaryOp::kRelu: return unary<UnaryOp::kRelu>(v);
    case UnaryOp::kTanh: return unary<UnaryOp::kTanh>(v);
    case UnaryOp::kSigmoid: return unary<UnaryOp::kSigmoid>(v);
    case UnaryOp::kGelu: return unary<UnaryOp::kGelu>(v);
    case UnaryOp::kGeluTanh: return unary<UnaryOp::kGeluTanh>(v);
    case UnaryOp::kGeluGrad: return unary<UnaryOp::kGeluGrad>(v);
    case UnaryOp::kGeluTanhGrad: return unary<UnaryOp::kGeluTanhGrad>(v);
  }
  return v;
}

}  // namespace tinyddp::tensor::elementwise_math
