// Creating tensors: TensorOptions (dtype + device, as torch::TensorOptions), empty/zeros/
// ones/full/arange, tensors from C++ values, and the *_like variants.
#pragma once

#include <initializer_list>
#include <optional>
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

// Chained setters: TensorOptions().dtype(kFloat64).device(Device::cuda(0)). Implicit from a
// DType or a Device so that zeros({2, 3}, kFloat64) reads like PyTorch.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}      // NOLINT: implicit by design
  TensorOptions(Device device) : device_(device) {}  // NOLINT: implicit by design

  TensorOptions& dtype(DType dtype) {
    dtype_ = dtype;
    return *this;
  }
  TensorOptions& device(Device device) {
    device_ = device;
    return *this;
  }
  // The dtype if one was set, else `fallback` (float32 for most factories).
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
  DType dtype() const { return dtype_or(kFloat32); }
  bool has_dtype() const { return dtype_.has_value(); }
  Device device() const { return device_.value_or(kCPU); }
  Device device_or(Device fallback) const { return device_.value_or(fallback); }

 private:
  std::optional<DType> dtype_;
  std::optional<Device> device_;
};

Tensor empty(const Shape& sizes, TensorOptions options = {});
// Laid out in `memory_format` (kContiguous or kChannelsLast, as torch.empty's memory_format).
Tensor empty(const Shape& sizes, TensorOptions options, MemoryFormat memory_format);
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, double value, TensorOptions options = {});
// A 0-d tensor holding `value` converted to the dtype.
Tensor scalar_tensor(double value, TensorOptions options = {});

// Values start, start + step, ... below end (above end for a negative step). The dtype is
// int64 when every bound is an integer type (arange(5)), float32 otherwise, unless given.
Tensor arange_impl(double start, double end, double step, DType default_dtype, TensorOptions options);
template <typename E, typename = std::enable_if_t<std::is_arithmetic_v<E>>>
Tensor arange(E end, TensorOptions options = {}) {
  return arange_impl(0, static_cast<double>(end), 1, std::is_integral_v<E> ? kInt64 : kFloat32, options);
}
template <typename S, typename E, typename P = int64_t,
          typename = std::enable_if_t<std::is_arithmetic_v<S> && std::is_arithmetic_v<E> && std::is_arithmetic_v<P>>>
Tensor arange(S start, E end, P step = 1, TensorOptions options = {}) {
  const bool integral = std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<P>;
  return arange_impl(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                     integral ? kInt64 : kFloat32, options);
}

// As torch.eye: the n x m (m defaults to n) identity matrix.
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
// As torch.linspace: `steps` values from start to end, evenly spaced (both ends included and
// exact), in the dtype's compute type: the first half counted from start, the rest back from
// end, as PyTorch's kernel (whose vectorised loop may differ from these by an ulp or two).
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});

// One number of a tensor literal, remembering whether it was written as an integer (1, -3) or
// as a floating-point value (1.0, 2.5f, NAN), as Python's numbers do.
struct TensorLiteral {
  TensorLiteral(int v) : value(v), integral(true) {}                // NOLINT: implicit by design
  TensorLiteral(long v) : value(double(v)), integral(true) {}       // NOLINT
  TensorLiteral(long long v) : value(double(v)), integral(true) {}  // NOLINT
  TensorLiteral(float v) : value(v), integral(false) {}             // NOLINT
  TensorLiteral(double v) : value(v), integral(false) {}            // NOLINT
  double value;
  bool integral;
};

// 1-D and 2-D tensors from literals, with torch.tensor's dtype rule: int64 when every number
// is written as an integer (tensor({1, 2, 3})), float32 when any is not (tensor({1, 2.5}),
// tensor({{1.0, 2}, {3, 4}})); a dtype in `options` wins (tensor({1, 2}, kFloat64)).
Tensor tensor(std::initializer_list<TensorLiteral> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<TensorLiteral>> rows, TensorOptions options = {});

// A tensor of dtype_of<T> holding a copy of `values`, shaped `sizes` (1-D when omitted).
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> sizes = {}, Device device = {});

// t's shape, dtype and device unless `options` says otherwise; laid out as t (memory_format
// kPreserve: channels last when t is, as PyTorch's default) or in `memory_format`.
Tensor empty_like(const Tensor& t, std::optional<TensorOptions> options = {},
                  MemoryFormat memory_format = MemoryFormat::kPreserve);
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> options = {},
                  MemoryFormat memory_format = MemoryFormat::kPreserve);
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> options = {},
                 MemoryFormat memory_format = MemoryFormat::kPreserve);
Tensor full_like(const Tensor& t, double value, std::optional<TensorOptions> options = {},
                 MemoryFormat memory_format = MemoryFormat::kPreserve);

// ---- template definitions ----------------------------------------------------------------

template <typename T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> sizes, Device device) {
  const Shape shape = sizes.value_or(Shape{static_cast<int64_t>(values.size())});
  TDDP_CHECK(shape_numel(shape, "from_vector") == static_cast<int64_t>(values.size()),
             "from_vector: shape {} needs {} values but {} were given", format_shape(shape), shape_numel(shape),
             values.size());
  Tensor cpu = empty(shape, TensorOptions(dtype_of<T>));
  if (!values.empty())
    std::memcpy(cpu.raw_data_ptr(), static_cast<const void*>(values.data()), values.size() * sizeof(T));
  return cpu.to(device);
}

}  // namespace tinyddp::tensor
