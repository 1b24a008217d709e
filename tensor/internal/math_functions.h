// The math functions under the elementwise formulas (elementwise_math.h), for host code and
// CUDA device code alike: erf, exp, tanh, log, sqrt, sin, cos, log1p, the roundings and pow of
// float or double, and ScalarMath, the policy through which a formula written once calls them
// on one value (the CPU's row kernels pass Eigen's vectorised versions instead:
// backends/cpu/isa/kernels.cc).
#pragma once

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define TINYDDP_HOST_DEVICE __host__ __device__
#else
#define TINYDDP_HOST_DEVICE
#endif

namespace tinyddp::tensor::math {

// The one-argument functions (erf_, exp_, ... of float or double) and pow_: the CUDA math
// library's overloads in device code, the standard library's on the host. rint rounds half to
// even in the default rounding mode, as torch.round.
#if defined(__CUDA_ARCH__)
#define TINYDDP_MATH_FUNCTION(name, fn) \
  template <typename C>                 \
  __device__ inline C name(C v) {       \
    return ::fn(v);                     \
  }
template <typename C>
__device__ inline C pow_(C v, C e) {
  return ::pow(v, e);
}
#else
#define TINYDDP_MATH_FUNCTION(name, fn) \
  template <typename C>                 \
  inline C name(C v) {                  \
    return std::fn(v);                  \
  }
template <typename C>
inline C pow_(C v, C e) {
  return std::pow(v, e);
}
#endif
TINYDDP_MATH_FUNCTION(erf_, erf)
TINYDDP_MATH_FUNCTION(exp_, exp)
TINYDDP_MATH_FUNCTION(tanh_, tanh)
TINYDDP_MATH_FUNCTION(log_, log)
TINYDDP_MATH_FUNCTION(sqrt_, sqrt)
TINYDDP_MATH_FUNCTION(sin_, sin)
TINYDDP_MATH_FUNCTION(cos_, cos)
TINYDDP_MATH_FUNCTION(log1p_, log1p)
TINYDDP_MATH_FUNCTION(expm1_, expm1)
TINYDDP_MATH_FUNCTION(floor_, floor)
TINYDDP_MATH_FUNCTION(ceil_, ceil)
TINYDDP_MATH_FUNCTION(trunc_, trunc)
TINYDDP_MATH_FUNCTION(rint_, rint)
#undef TINYDDP_MATH_FUNCTION

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
