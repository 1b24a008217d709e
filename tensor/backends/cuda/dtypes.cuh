// Device-side helpers shared by the nvcc-compiled kernels (elementwise.cu, reduce.cu,
// embedding.cu): the element types behind tensor::DType's numbering, the type each is computed
// in (16-bit floats are stored as bits and computed in float, rounding to nearest-even on the
// way back, as on the CPU), the switch from a dtype number to a typed functor call, and the
// grid of a grid-stride loop.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace tinyddp::tensor::cuda::kernels {

// Storage types for the 16-bit floats (bits), with their float conversions.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<F16> {
  using type = float;
};
template <>
struct Compute<BF16> {
  using type = float;
};
template <typename T>
using compute_t = typename Compute<T>::type;

// The floating dtypes: float, double and the 16-bit floats (computed in float).
template <typename T>
constexpr bool is_floating = std::is_floating_point_v<compute_t<T>>;

template <typename T>
__host__ __device__ inline compute_t<T> load(const T& v) {
  return v;
}
template <>
__host__ __device__ inline float load<F16>(const F16& v) {
  return __half2float(__ushort_as_half(v.bits));
}
template <>
__host__ __device__ inline float load<BF16>(const BF16& v) {
  return __bfloat162float(__ushort_as_bfloat16(v.bits));
}

// A computed value (any arithmetic type) stored as T, as PyTorch casts: bool is "!= 0".
template <typename T, typename C>
__host__ __device__ inline T store(C v) {
  if constexpr (std::is_same_v<T, F16>) {
    return F16{__half_as_ushort(__float2half_rn(static_cast<float>(v)))};
  } else if constexpr (std::is_same_v<T, BF16>) {
    return BF16{__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)))};
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != C(0);
  } else if constexpr (std::is_unsigned_v<T> && std::is_floating_point_v<C>) {
    return static_cast<T>(static_cast<int64_t>(v));  // through int64, as on the CPU: -1.0 -> 255
  } else {
    return static_cast<T>(v);
  }
}

// tensor::DType numbering: kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool, kInt32, kUInt8.
template <typename F>
cudaError_t dispatch(int dtype, F&& f) {
  switch (dtype) {
    case 0: return f(float{});
    case 1: return f(double{});
    case 2: return f(F16{});
    case 3: return f(BF16{});
    case 4: return f(int64_t{});
    case 5: return f(bool{});
    case 6: return f(int32_t{});
    case 7: return f(uint8_t{});
  }
  return cudaErrorInvalidValue;
}

// The same for arithmetic: bool is refused (before it gets here, by tensor/native/checks.cc).
template <typename F>
cudaError_t dispatch_numeric(int dtype, F&& f) {
  return dispatch(dtype, [&](auto tag) -> cudaError_t {
    if constexpr (std::is_same_v<decltype(tag), bool>) {
      return cudaErrorInvalidValue;
    } else {
      return f(tag);
    }
  });
}

// Blocks of `threads` for a grid-stride loop over `items`: one item per thread, up to a cap
// past which each thread takes several.
inline int grid_stride_blocks(int64_t items, int threads) {
  const int64_t wanted = (items + threads - 1) / threads;
  return static_cast<int>(wanted < 65535 * 8 ? (wanted > 0 ? wanted : 1) : 65535 * 8);
}

}  // namespace tinyddp::tensor::cuda::kernels
