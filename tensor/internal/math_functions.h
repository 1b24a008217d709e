// The math functions under the elementwise formulas (elementwise_math.h), for host code and
// CUDA device code alike: erf, exp, tanh, log, sqrt and pow of float or double, and
// ScalarMath, the policy through which a formula written once calls them on one value (the
// CPU's row kernels pass Eigen's vectorised versions instead: backends/cpu/isa/kernels.cc).
#pragma once

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define TINYDDP_HOST_DEVICE __host__ __device__
#else
#define TINYDDP_HOST_DEVICE
#endif

namespace tinyddp::tensor::math {

// erf, exp, tanh, log, sqrt and pow of float or double: the CUDA math library's overloads in
// device code, the standard library's on the host.
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
template <typename C>
__device__ inline C pow_(C v, C e) {
  return ::pow(v, e);
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
template <typename C>
inline C pow_(C v, C e) {
  return std::pow(v, e);
}
#endif

// The functions a formula calls, on one value; `eval` holds a value a formula uses twice.
struct ScalarMath {
  template <typename C>
  TINYDDP_HOST_DEVICE static C erf(C v) {
    return erf_(v);
  }
  template <typename C>
  TINYDDP_HOST_DEVICE static C exp(C v) {
    return exp_(v);
  }
  template <typename C>
  TINYDDP_HOST_DEVICE static C tanh(C v) {
    return tanh_(v);
  }
  template <typename C>
  TINYDDP_HOST_DEVICE static C eval(C v) {
    return v;
  }
};

// The element type of X: X itself for a number, X::Scalar for an array expression.
template <typename X, typename = void>
struct ScalarOf {
  using type = X;
};
template <typename X>
struct ScalarOf<X, std::void_t<typename X::Scalar>> {
  using type = typename X::Scalar;
};

}  // namespace tinyddp::tensor::math
