// The elementwise formulas, one definition each, for every backend: the CPU's scalar loops
// (backends/cpu/elementwise.cc), its per-instruction-set row kernels (backends/cpu/isa/kernels.cc) and the CUDA
// kernels (backends/cuda/elementwise.cu), on the host and on the device. Sigmoid and GELU take their
// math functions from a policy `M` (math_functions.h): ScalarMath for one value, or Eigen's
// vectorised versions over a whole row (isa/kernels.cc), so the row kernels evaluate the very
// expression the scalar loops do. As torch.nn.GELU:
//   exact:  gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2
//           gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   tanh:   gelu(x) = x (1 + tanh(u)) / 2,  u = sqrt(2 / pi) (x + 0.044715 x^3)
//           gelu'(x) = (1 + t) / 2 + x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2) / 2,  t = tanh(u)
// with x^3 and x^2 computed first, as PyTorch's kernels do.
//
// `C` is the type the arithmetic runs in (compute_t: float for float16 and bfloat16). NaN
// propagates: maximum and minimum return a NaN operand (std::max would drop one in its first
// argument), relu keeps NaN.
#pragma once

#include <cmath>
#include <type_traits>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/internal/math_functions.h"

namespace tinyddp::tensor::elementwise_math {

template <typename C>
struct Constants {
  static constexpr C kSqrtHalf = C(0.70710678118654752440);     // 1 / sqrt(2)
  static constexpr C kInvSqrt2Pi = C(0.39894228040143267794);   // 1 / sqrt(2 pi)
  static constexpr C kSqrt2OverPi = C(0.79788456080286535588);  // sqrt(2 / pi)
  static constexpr C kCubic = C(0.044715);
};

// out = f(x) for one value (X a number) or a whole row (X an array expression, Out an array).
template <typename M, typename Out, typename X>
TINYDDP_HOST_DEVICE inline void sigmoid(Out& out, const X& x) {
  using C = typename math::ScalarOf<X>::type;
  out = C(1) / (C(1) + M::exp(-x));
}

template <typename M, typename Out, typename X>
TINYDDP_HOST_DEVICE inline void gelu(Out& out, const X& x) {
  using C = typename math::ScalarOf<X>::type;
  out = C(0.5) * x * (C(1) + M::erf(x * Constants<C>::kSqrtHalf));
}

template <typename M, typename Out, typename X>
TINYDDP_HOST_DEVICE inline void gelu_grad(Out& out, const X& x) {
  using C = typename math::ScalarOf<X>::type;
  using K = Constants<C>;
  out = C(0.5) * (C(1) + M::erf(x * K::kSqrtHalf)) + x * M::exp(C(-0.5) * (x * x)) * K::kInvSqrt2Pi;
}

template <typename M, typename Out, typename X>
TINYDDP_HOST_DEVICE inline void gelu_tanh(Out& out, const X& x) {
  using C = typename math::ScalarOf<X>::type;
  using K = Constants<C>;
  out = C(0.5) * x * (C(1) + M::tanh(K::kSqrt2OverPi * (x + K::kCubic * (x * x * x))));
}

template <typename M, typename Out, typename X>
TINYDDP_HOST_DEVICE inline void gelu_tanh_grad(Out& out, const X& x) {
  using C = typename math::ScalarOf<X>::type;
  using K = Constants<C>;
  const auto t = M::eval(M::tanh(K::kSqrt2OverPi * (x + K::kCubic * (x * x * x))));
  out = C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * (K::kSqrt2OverPi * (C(1) + C(3) * K::kCubic * (x * x)));
}

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
// (a the gradient, b relu's output), kMaskedFill b != 0 ? alpha : a, kPow a ** b, kGeluBackward
// a * gelu'(b) (b gelu's input). A compile-time op, so
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
  } else if constexpr (op == BinaryOp::kMaskedFill) {
    return b != C(0) ? alpha : a;
  } else if constexpr (op == BinaryOp::kGeluBackward || op == BinaryOp::kGeluTanhBackward) {
    if constexpr (std::is_floating_point_v<C>) {  // floating only (the op checks it)
      C d;
      if constexpr (op == BinaryOp::kGeluBackward) {
        gelu_grad<math::ScalarMath>(d, b);
      } else {
        gelu_tanh_grad<math::ScalarMath>(d, b);
      }
      return a * d;
    } else {
      return a;
    }
  } else {
    static_assert(op == BinaryOp::kPow);
    if constexpr (std::is_integral_v<C>) {  // b >= 0 (the op checks it): repeated squaring,
      using U = std::make_unsigned_t<C>;    // wrapping around on overflow
      U r = 1, base = static_cast<U>(a);
      for (U e = static_cast<U>(b); e > 0; e >>= 1) {
        if (e & 1) r *= base;
        base *= base;
      }
      return static_cast<C>(r);
    } else {
      return math::pow_(a, b);
    }
  }
}

// UnaryOp `op` of v (kernel_ops.h); the transcendental ones for floating C only.
// v < 0, false for unsigned types without comparing (uint8: nvcc warns of a pointless test).
template <typename C>
TINYDDP_HOST_DEVICE inline bool below_zero(C v) {
  if constexpr (std::is_unsigned_v<C>) {
    return false;
  } else {
    return v < C(0);
  }
}

template <UnaryOp op, typename C>
TINYDDP_HOST_DEVICE inline C unary(C v) {
  if constexpr (op == UnaryOp::kNeg) {
    return -v;
  } else if constexpr (op == UnaryOp::kAbs) {
    return below_zero(v) ? -v : v;
  } else if constexpr (op == UnaryOp::kRelu) {
    return below_zero(v) ? C(0) : v;  // NaN stays NaN
  } else if constexpr (op == UnaryOp::kSign) {
    return static_cast<C>((C(0) < v) - below_zero(v));  // NaN: 0
  } else if constexpr (!std::is_floating_point_v<C>) {
    return v;  // the roundings of an integer; no integer tensor reaches the others
  } else if constexpr (op == UnaryOp::kSin) {
    return math::sin_(v);
  } else if constexpr (op == UnaryOp::kCos) {
    return math::cos_(v);
  } else if constexpr (op == UnaryOp::kErf) {
    return math::erf_(v);
  } else if constexpr (op == UnaryOp::kLog1p) {
    return math::log1p_(v);
  } else if constexpr (op == UnaryOp::kExpm1) {
    return math::expm1_(v);
  } else if constexpr (op == UnaryOp::kRsqrt) {
    return C(1) / math::sqrt_(v);
  } else if constexpr (op == UnaryOp::kReciprocal) {
    return C(1) / v;
  } else if constexpr (op == UnaryOp::kFloor) {
    return math::floor_(v);
  } else if constexpr (op == UnaryOp::kCeil) {
    return math::ceil_(v);
  } else if constexpr (op == UnaryOp::kTrunc) {
    return math::trunc_(v);
  } else if constexpr (op == UnaryOp::kRound) {
    return math::rint_(v);
  } else if constexpr (op == UnaryOp::kExp) {
    return math::exp_(v);
  } else if constexpr (op == UnaryOp::kLog) {
    return math::log_(v);
  } else if constexpr (op == UnaryOp::kSqrt) {
    return math::sqrt_(v);
  } else if constexpr (op == UnaryOp::kTanh) {
    return math::tanh_(v);
  } else {
    C r;
    if constexpr (op == UnaryOp::kSigmoid) {
      sigmoid<math::ScalarMath>(r, v);
    } else if constexpr (op == UnaryOp::kGelu) {
      gelu<math::ScalarMath>(r, v);
    } else if constexpr (op == UnaryOp::kGeluTanh) {
      gelu_tanh<math::ScalarMath>(r, v);
    } else if constexpr (op == UnaryOp::kGeluGrad) {
      gelu_grad<math::ScalarMath>(r, v);
    } else {
      static_assert(op == UnaryOp::kGeluTanhGrad);
      gelu_tanh_grad<math::ScalarMath>(r, v);
    }
    return r;
  }
}

// CompareOp `op` of a and b (a compile-time op, as binary's; then the run-time form).
template <CompareOp op, typename C>
TINYDDP_HOST_DEVICE inline bool compare(C a, C b) {
  if constexpr (op == CompareOp::kEq) {
    return a == b;
  } else if constexpr (op == CompareOp::kNe) {
    return a != b;
  } else if constexpr (op == CompareOp::kLt) {
    return a < b;
  } else if constexpr (op == CompareOp::kLe) {
    return a <= b;
  } else if constexpr (op == CompareOp::kGt) {
    return a > b;
  } else if constexpr (op == CompareOp::kGe) {
    return a >= b;
  } else if constexpr (op == CompareOp::kLogicalAnd) {
    return a != C(0) && b != C(0);
  } else if constexpr (op == CompareOp::kLogicalOr) {
    return a != C(0) || b != C(0);
  } else {
    static_assert(op == CompareOp::kLogicalXor);
    return (a != C(0)) != (b != C(0));
  }
}
template <typename C>
TINYDDP_HOST_DEVICE inline bool compare(CompareOp op, C a, C b) {
  switch (op) {
    case CompareOp::kEq: return compare<CompareOp::kEq>(a, b);
    case CompareOp::kNe: return compare<CompareOp::kNe>(a, b);
    case CompareOp::kLt: return compare<CompareOp::kLt>(a, b);
    case CompareOp::kLe: return compare<CompareOp::kLe>(a, b);
    case CompareOp::kGt: return compare<CompareOp::kGt>(a, b);
    case CompareOp::kGe: break;
    case CompareOp::kLogicalAnd: return compare<CompareOp::kLogicalAnd>(a, b);
    case CompareOp::kLogicalOr: return compare<CompareOp::kLogicalOr>(a, b);
    case CompareOp::kLogicalXor: return compare<CompareOp::kLogicalXor>(a, b);
  }
  return compare<CompareOp::kGe>(a, b);
}

// pow(x, exponent) for a scalar exponent: x * x for 2 (exact, as PyTorch's special case), sqrt
// for 0.5, else pow; an integer x to a non-negative integral exponent (the ops check it) by
// repeated products. pow_kind is decided once per tensor, so that each loop holds one formula.
enum class PowKind { kSquare, kSqrt, kGeneral };
TINYDDP_HOST_DEVICE inline PowKind pow_kind(double exponent) {
  return exponent == 2.0 ? PowKind::kSquare : exponent == 0.5 ? PowKind::kSqrt : PowKind::kGeneral;
}
template <PowKind kind, typename C>
TINYDDP_HOST_DEVICE inline C pow_scalar(C v, double exponent) {
  if constexpr (std::is_integral_v<C>) {
    C r = 1;
    for (int64_t i = 0; i < static_cast<int64_t>(exponent); ++i) r *= v;
    return r;
  } else if constexpr (kind == PowKind::kSquare) {
    return v * v;
  } else if constexpr (kind == PowKind::kSqrt) {
    return math::sqrt_(v);
  } else {
    return math::pow_(v, static_cast<C>(exponent));
  }
}
template <typename C>
TINYDDP_HOST_DEVICE inline C pow_scalar(PowKind kind, C v, double exponent) {
  switch (kind) {
    case PowKind::kSquare: return pow_scalar<PowKind::kSquare>(v, exponent);
    case PowKind::kSqrt: return pow_scalar<PowKind::kSqrt>(v, exponent);
    case PowKind::kGeneral: break;
  }
  return pow_scalar<PowKind::kGeneral>(v, exponent);
}
// base ** x for a scalar base, x floating.
template <typename C>
TINYDDP_HOST_DEVICE inline C pow_scalar_base(C base, C x) {
  return math::pow_(base, x);
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
    case BinaryOp::kPow: return binary<BinaryOp::kPow>(a, b, alpha);
    case BinaryOp::kGeluBackward: return binary<BinaryOp::kGeluBackward>(a, b, alpha);
    case BinaryOp::kGeluTanhBackward: return binary<BinaryOp::kGeluTanhBackward>(a, b, alpha);
  }
  return a;
}
template <typename C>
TINYDDP_HOST_DEVICE inline C unary(UnaryOp op, C v) {
  switch (op) {
#define TINYDDP_UNARY_CASE(name) \
  case UnaryOp::name: return unary<UnaryOp::name>(v);
    TINYDDP_UNARY_OPS(TINYDDP_UNARY_CASE)
#undef TINYDDP_UNARY_CASE
  }
  return v;
}

}  // namespace tinyddp::tensor::elementwise_math
