// Element types and reductions shared by ProcessGroupGloo's collectives (internal to comm/gloo).
#pragma once

#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm::detail {

// Calls f(T{}) with the storage type of `dtype` (Half and BFloat16 are 2-byte values).
template <typename F>
void with_element_type(tensor::DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case tensor::kFloat32: f(float{}); return;
    case tensor::kFloat64: f(double{}); return;
    case tensor::kFloat16: f(tensor::Half{}); return;
    case tensor::kBFloat16: f(tensor::BFloat16{}); return;
    case tensor::kInt64: f(int64_t{}); return;
    case tensor::kInt32: f(int32_t{}); return;
    case tensor::kUInt8: f(uint8_t{}); return;
    case tensor::kBool: break;
  }
  throw Error(fmt::format(
      "ProcessGroupGloo {}: dtype {} is not supported (float32, float64, float16, bfloat16, int64, int32, uint8)", op,
      tensor::dtype_name(dtype)));
}

// The type arithmetic on T happens in: float for the 16-bit types, T otherwise.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, tensor::Half> || std::is_same_v<T, tensor::BFloat16>, float, T>;

// x `Op` y, computed in compute_t<T> and rounded back to T (kAvg sums; the caller divides).
template <ReduceOp Op, typename T>
inline T combine(T x, T y) {
  const compute_t<T> a = static_cast<compute_t<T>>(x);
  const compute_t<T> b = static_cast<compute_t<T>>(y);
  if constexpr (Op == ReduceOp::kProduct) return static_cast<T>(a * b);
  if constexpr (Op == ReduceOp::kMin) return static_cast<T>(b < a ? b : a);
  if constexpr (Op == ReduceOp::kMax) return static_cast<T>(b > a ? b : a);
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kAvg) return static_cast<T>(a + b);
}

// Calls f(std::integral_constant<ReduceOp, op>{}) and returns its result.
template <typename F>
decltype(auto) with_reduce_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kProduct: return f(std::integral_constant<ReduceOp, ReduceOp::kProduct>{});
    case ReduceOp::kMin: return f(std::integral_constant<ReduceOp, ReduceOp::kMin>{});
    case ReduceOp::kMax: return f(std::integral_constant<ReduceOp, ReduceOp::kMax>{});
    case ReduceOp::kAvg: return f(std::integral_constant<ReduceOp, ReduceOp::kAvg>{});
    case ReduceOp::kSum: break;
  }
  return f(std::integral_constant<ReduceOp, ReduceOp::kSum>{});
}

}  // namespace tinyddp::comm::detail
