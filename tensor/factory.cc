// The tensor factories of factory.h (empty, zeros, ones, full, arange, tensor and the _like
// forms), each allocating on the requested device and dtype.
#include "tinyddp/tensor/factory.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

Tensor empty(const Shape& sizes, TensorOptions options) {
  const int64_t numel = shape_numel(sizes, "empty");
  const DType dtype = options.dtype();
  TDDP_CHECK(static_cast<uint64_t>(numel) <= std::numeric_limits<size_t>::max() / element_size(dtype),
             "empty: shape {} of {} needs more bytes than size_t can count", format_shape(sizes), dtype_name(dtype));
  Storage storage(static_cast<size_t>(numel) * element_size(dtype), options.device());
  return Tensor::make(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor empty(const Shape& sizes, TensorOptions options, MemoryFormat memory_format) {
  TDDP_CHECK(memory_format != MemoryFormat::kPreserve,
             "empty: memory_format preserve has no tensor to preserve (use empty_like)");
  if (memory_format == MemoryFormat::kContiguous) return empty(sizes, options);
  TDDP_CHECK(sizes.size() == 4, "empty: channels_last needs a 4-D [N, C, H, W] shape, got {}", format_shape(sizes));
  // The same storage as a row-major tensor's, seen with channels-last strides.
  return Tensor::make(empty(sizes, options).storage(), sizes, detail::memory_format_strides(sizes, memory_format), 0,
                      options.dtype());
}

Tensor zeros(const Shape& sizes, TensorOptions options) { return full(sizes, 0.0, options); }

Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1.0, options); }

Tensor full(const Shape& sizes, double value, TensorOptions options) {
  Tensor out = empty(sizes, options);
  out.fill_(value);
  return out;
}

Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange_impl(double start, double end, double step, DType default_dtype, TensorOptions options) {
  TDDP_CHECK(step != 0, "arange: step must be nonzero");
  TDDP_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             "arange: start ({}), end ({}) and step ({}) must be finite", start, end, step);
  TDDP_CHECK((step > 0 && start <= end) || (step < 0 && start >= end) || start == end,
             "arange: upper bound and larger bound inconsistent with step sign (start {}, end {}, step {})", start, end,
             step);
  const auto count = static_cast<int64_t>(std::ceil((end - start) / step));
  std::vector<double> values(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<double>(i) * step;
  const DType dtype = options.dtype_or(default_dtype);
  return from_vector(values).to(dtype).to(options.device());
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t cols = m.value_or(n);
  TDDP_CHECK(n >= 0 && cols >= 0, "eye: n and m must be >= 0, got {} and {}", n, cols);
  std::vector<double> values(static_cast<size_t>(n * cols), 0.0);
  for (int64_t i = 0; i < std::min(n, cols); ++i) values[static_cast<size_t>(i * cols + i)] = 1.0;
  return from_vector(values, Shape{n, cols}).to(options.dtype()).to(options.device());
}

namespace {
// linspace's values in the compute type C of the dtype (float for float32 and the 16-bit
// ones, as PyTorch), the first half counted up from start and the second down from end.
template <typename C>
std::vector<double> spaced(double start, double end, int64_t steps) {
  const C first = static_cast<C>(start), last = static_cast<C>(end);
  const C step = steps > 1 ? (last - first) / static_cast<C>(steps - 1) : C(0);
  std::vector<double> values(static_cast<size_t>(steps));
  const int64_t half = steps == 1 ? 1 : steps / 2;  // one step: start
  for (int64_t i = 0; i < steps; ++i) {
    values[static_cast<size_t>(i)] =
        i < half ? first + step * static_cast<C>(i) : last - step * static_cast<C>(steps - 1 - i);
  }
  return values;
}
}  // namespace

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  TDDP_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got {}", steps);
  const DType dtype = options.dtype();
  const std::vector<double> values =
      dtype == kFloat64 || dtype == kInt64 ? spaced<double>(start, end, steps) : spaced<float>(start, end, steps);
  return from_vector(values).to(dtype).to(options.device());
}

namespace {
// The literals' tensor: options' dtype, else int64 when all are integers, else float32.
Tensor literal_tensor(const std::vector<TensorLiteral>& literals, const Shape& shape, TensorOptions options) {
  std::vector<double> values;
  bool integral = true;
  for (const TensorLiteral& v : literals) {
    values.push_back(v.value);
    integral = integral && v.integral;
  }
  const DType dtype = options.dtype_or(integral ? kInt64 : kFloat32);
  return from_vector(values, shape).to(dtype).to(options.device());
}
}  // namespace

Tensor tensor(std::initializer_list<TensorLiteral> values, TensorOptions options) {
  return literal_tensor(std::vector<TensorLiteral>(values), Shape{static_cast<int64_t>(values.size())}, options);
}

Tensor tensor(std::initializer_list<std::initializer_list<TensorLiteral>> rows, TensorOptions options) {
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  const int64_t num_cols = num_rows == 0 ? 0 : static_cast<int64_t>(rows.begin()->size());
  std::vector<TensorLiteral> values;
  for (const auto& row : rows) {
    TDDP_CHECK(static_cast<int64_t>(row.size()) == num_cols,
               "tensor: rows have different lengths ({} and {}); a 2-D tensor needs equal rows", num_cols, row.size());
    values.insert(values.end(), row.begin(), row.end());
  }
  return literal_tensor(values, Shape{num_rows, num_cols}, options);
}

namespace {
TensorOptions like_options(const Tensor& t, const std::optional<TensorOptions>& options) {
  if (!options) return TensorOptions().dtype(t.dtype()).device(t.device());
  return TensorOptions().dtype(options->dtype_or(t.dtype())).device(options->device_or(t.device()));
}
}  // namespace

Tensor empty_like(const Tensor& t, std::optional<TensorOptions> options, MemoryFormat memory_format) {
  return empty(t.sizes(), like_options(t, options), detail::resolve_format(t, memory_format));
}
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> options, MemoryFormat memory_format) {
  return full_like(t, 0.0, options, memory_format);
}
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> options, MemoryFormat memory_format) {
  return full_like(t, 1.0, options, memory_format);
}
Tensor full_like(const Tensor& t, double value, std::optional<TensorOptions> options, MemoryFormat memory_format) {
  Tensor out = empty_like(t, options, memory_format);
  out.fill_(value);
  return out;
}

}  // namespace tinyddp::tensor
