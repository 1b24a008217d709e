// GELU and its derivative as scalar formulas, shared by the CPU kernels and the CUDA kernels
// (host and device), so that every backend computes the same expression. As torch.nn.GELU:
//   exact:  gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2
//           gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   tanh:   gelu(x) = x (1 + tanh(u)) / 2,  u = sqrt(2 / pi) (x + 0.044715 x^3)
//           gelu'(x) = (1 + t) / 2 + x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2) / 2,  t = tanh(u)
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TINYDDP_HOST_DEVICE __host__ __device__
#else
#define TINYDDP_HOST_DEVICE
#endif

namespace tinyddp::tensor::gelu_math {

// erf, exp, tanh, log and sqrt of float or double (log and sqrt for elementwise_math.h): the
// CUDA math library's overloads in device code, the standard library's on the host.
#if defined(__CUDA_ARCH__)
template <typename C>
__device__ inline C erf_(C v) {
  return ::erf(v);
}
template <typename C>
__device__ inline C exp_(C v) {
  return ::exp(v);
}
template <typename C>
__device__ inline C tanh_(C v) {
  return ::tanh(v);
}
template <typename C>
__device__ inline C log_(C v) {
  return ::log(v);
}
template <typename C>
__device__ inline C sqrt_(C v) {
  return ::sqrt(v);
}
#else
template <typename C>
inline C erf_(C v) {
  return std::erf(v);
}
template <typename C>
inline C exp_(C v) {
  return std::exp(v);
}
template <typename C>
inline C tanh_(C v) {
  return std::tanh(v);
}
template <typename C>
inline C log_(C v) {
  return std::log(v);
}
template <typename C>
inline C sqrt_(C v) {
  return std::sqrt(v);
}
#endif

template <typename C>
struct Constants {
  static constexpr C kSqrtHalf = C(0.70710678118654752440);     // 1 / sqrt(2)
  static constexpr C kInvSqrt2Pi = C(0.39894228040143267794);   // 1 / sqrt(2 pi)
  static constexpr C kSqrt2OverPi = C(0.79788456080286535588);  // sqrt(2 / pi)
  static constexpr C kCubic = C(0.044715);
};

template <typename C>
TINYDDP_HOST_DEVICE inline C gelu(C x) {
  return C(0.5) * x * (C(1) + erf_(x * Constants<C>::kSqrtHalf));
}

template <typename C>
TINYDDP_HOST_DEVICE inline C gelu_grad(C x) {
  const C cdf = C(0.5) * (C(1) + erf_(x * Constants<C>::kSqrtHalf));
  return cdf + x * exp_(C(-0.5) * x * x) * Constants<C>::kInvSqrt2Pi;
}

template <typename C>
TINYDDP_HOST_DEVICE inline C gelu_tanh(C x) {
  const C u = Constants<C>::kSqrt2OverPi * (x + Constants<C>::kCubic * x * x * x);
  return C(0.5) * x * (C(1) + tanh_(u));
}

template <typename C>
TINYDDP_HOST_DEVICE inline C gelu_tanh_grad(C x) {
  const C u = Constants<C>::kSqrt2OverPi * (x + Constants<C>::kCubic * x * x * x);
  const C t = tanh_(u);
  const C du = Constants<C>::kSqrt2OverPi * (C(1) + C(3) * Constants<C>::kCubic * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}

}  // namespace tinyddp::tensor::gelu_math
