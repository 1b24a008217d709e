// The values the collective tests reduce and the checks of their results: small integers
// that stay exact in every dtype and over 4 ranks, tensors made from a function of the
// element index on the device under test, and an element-by-element comparison within the
// dtype's rounding. Shared by collectives_test and allreduce_paths_test.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::testing {

inline const std::vector<tensor::DType> kDTypes = {tensor::kFloat32,  tensor::kFloat64, tensor::kFloat16,
                                                   tensor::kBFloat16, tensor::kInt64,   tensor::kInt32,
                                                   tensor::kUInt8};
inline constexpr int64_t k25MiB = (25 << 20) / 4;  // float32 elements

// Small integers: exact in every dtype, and their sums over 4 ranks too (<= 68 < 256).
inline double value(int rank, int64_t i) { return static_cast<double>(((rank + 1) * 3 + i) % 17 + 1); }
// 1 or 2: products over 4 ranks stay exact (<= 16).
inline double factor(int rank, int64_t i) { return static_cast<double>(1 + (rank + i) % 2); }

// Where make() and zeros_on_device() put their tensors (the GPU tests set cuda:0).
inline thread_local tensor::Device tensor_device = tensor::kCPU;

inline tensor::Tensor make(int64_t n, tensor::DType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = f(i);
  return tensor::from_vector(values).to(dtype).to(tensor_device);
}

inline tensor::Tensor zeros_on_device(int64_t n, tensor::DType dtype) {
  return tensor::zeros({n}, tensor::TensorOptions(dtype).device(tensor_device));
}

// Compares `t` with expected(i) for every element, within the dtype's rounding.
inline void expect_values(Expectations& e, const tensor::Tensor& t, const std::function<double(int64_t)>& expected,
                          const std::string& what) {
  const std::vector<double> got = t.to(tensor::kFloat64).to_vector<double>();
  const double tol = t.dtype() == tensor::kBFloat16 ? 8e-3 : t.dtype() == tensor::kFloat16 ? 1e-3 : 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = expected(static_cast<int64_t>(i));
    if (std::fabs(got[i] - want) > tol * std::max(1.0, std::fabs(want))) {
      e.failures.push_back(fmt::format("{}: element {} is {}, expected {}", what, i, got[i], want));
      return;
    }
  }
}

}  // namespace tinyddp::testing
