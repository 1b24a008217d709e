// CPU reductions (sum, mean, max with indices) and softmax / log_softmax. Each moves the
// reduced dims last and makes the data contiguous (a no-op in the common case of reducing
// trailing dims of a contiguous tensor), then reduces rows of a [outer, inner] matrix.
// On the intra-op threads: independent rows are shared out whole (each row summed as on one
// thread); a sum over many rows is cut into chunks of rows fixed by the shape, whose partial
// sums are added in chunk order. The bits do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/reduce_plan.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::tensor::cpu {

namespace {

// Integers (and bools) sum in int64; floating types sum in double for accuracy.
template <typename T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// acc[j] = sum over rows i of in[i * inner + j], in the accumulation type A, in row order.
// float32/float64 run in the selected instruction set's kernel.
template <typename T, typename A>
std::vector<A> sum_rows_in_order(const T* in, int64_t rows, int64_t inner) {
  std::vector<A> acc(static_cast<size_t>(inner), A(0));
  if constexpr (std::is_same_v<A, double> && std::is_same_v<T, float>) {
    isa_kernels().column_sums_f32(in, rows, inner, acc.data());
    return acc;
  }
  if constexpr (std::is_same_v<A, double> && std::is_same_v<T, double>) {
    isa_kernels().column_sums_f64(in, rows, inner, acc.data());
    return acc;
  }
  if constexpr (std::is_same_v<A, double> && is_16bit_float_v<T>) {
    // Blocks of rows widened to float (exactly) and added in row order, as below.
    const int64_t block_rows = std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1));
    std::vector<float> wide(static_cast<size_t>(block_rows * inner));
    for (int64_t first = 0; first < rows; first += block_rows) {
      const int64_t count = std::min(block_rows, rows - first);
      const T* block = in + first * inner;
      for (int64_t i = 0; i < count * inner; ++i) wide[i] = static_cast<float>(block[i]);
      isa_kernels().column_sums_f32(wide.data(), count, inner, acc.data());
    }
    return acc;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = in + i * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] += static_cast<A>(static_cast<compute_t<T>>(row[j]));
  }
  return acc;
}

// The same sum in chunks of rows fixed by the shape (parallel_row_partials) on the intra-op
// threads, the chunks' sums added in chunk order.
template <typename T, typename A>
std::vector<A> sum_rows(const T* in, int64_t rows, int64_t inner) {
  std::vector<std::vector<A>> parts = parallel_row_partials(rows, inner, 256, [&](int64_t first, int64_t last) {
    return sum_rows_in_order<T, A>(in + first * inner, last - first, inner);
  });
  if (parts.empty()) return std::vector<A>(static_cast<size_t>(inner), A(0));
  std::vector<A> acc = std::move(parts[0]);
  for (size_t c = 1; c < parts.size(); ++c) {
    for (int64_t j = 0; j < inner; ++j) acc[j] += parts[c][j];
  }
  return acc;
}

// The sum of a contiguous row of n elements in A.
template <typename A, typename T>
A row_sum(const T* row, int64_t n) {
  return partial_sums<A>(n, [row](int64_t i) { return static_cast<A>(static_cast<compute_t<T>>(row[i])); });
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<compute_t<T>> && !std::is_same_v<T, bool>) {
    return std::isnan(static_cast<compute_t<T>>(v));
  } else {
    return false;
  }
}

}  // namespace

Tensor CpuBackend::sum(const Tensor& x, const Shape& dims, bool keepdim) {
  int64_t inner = 0;
  const int64_t rows = leading_rows(x, dims, &inner);
  // [N, C, L] summed over N and L (a convolution's bias gradient, per-channel statistics):
  // each (n, c) row in place, accumulated per channel, rounded once; no reordered copy.
  const bool channels = rows == 0 && x.dim() == 3 && dims == Shape{0, 2} && x.is_contiguous() && x.numel() > 0;
  const RowPlan plan = plan_rows(*this, rows > 0 || channels ? Tensor() : x, dims, keepdim, x.sizes());
  const DType out_dtype = is_integral(x.dtype(), true) ? kInt64 : x.dtype();  // as torch.sum
  Tensor out = empty(plan.out_shape, out_dtype);
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    dispatch_all(out_dtype, [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      if constexpr (std::is_same_v<O, T> || (std::is_integral_v<T> && std::is_same_v<O, int64_t>)) {
        O* o = out.data_ptr<O>();
        if (rows > 0) {
          const std::vector<A> acc = sum_rows<T, A>(x.data_ptr<T>(), rows, inner);
          for (int64_t j = 0; j < inner; ++j) o[j] = static_cast<O>(static_cast<compute_t<O>>(acc[j]));
          return;
        }
        if (channels) {
          const int64_t n = x.size(0), c = x.size(1), l = x.size(2);
          std::vector<A> acc(static_cast<size_t>(c), A(0));
          const T* in = x.data_ptr<T>();
          parallel_rows(c, n * l, [&](int64_t first, int64_t last) {  // channels apart, each in order
            for (int64_t j = first; j < last; ++j) {
              for (int64_t i = 0; i < n; ++i) acc[j] += row_sum<A>(in + (i * c + j) * l, l);
            }
          });
          for (int64_t j = 0; j < c; ++j) o[j] = static_cast<O>(static_cast<compute_t<O>>(acc[j]));
          return;
        }
        const T* in = plan.rows.data_ptr<T>();
        parallel_rows(plan.outer, plan.inner, [&](int64_t first, int64_t last) {
          for (int64_t r = first; r < last; ++r) {
            o[r] = static_cast<O>(static_cast<compute_t<O>>(row_sum<A>(in + r * plan.inner, plan.inner)));
          }
        });
      }
    });
  });
  return out;
}

Tensor CpuBackend::mean(const Tensor& x, const Shape& dims, bool keepdim) {
  int64_t inner = 0;
  const int64_t rows = leading_rows(x, dims, &inner);
  const RowPlan plan = plan_rows(*this, rows > 0 ? Tensor() : x, dims, keepdim, x.sizes());
  Tensor out = empty(plan.out_shape, x.dtype());
  dispatch_floating(x.dtype(), "mean", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* o = out.data_ptr<T>();
    if (rows > 0) {
      const std::vector<double> acc = sum_rows<T, double>(x.data_ptr<T>(), rows, inner);
      for (int64_t j = 0; j < inner; ++j) o[j] = static_cast<T>(static_cast<C>(acc[j] / static_cast<double>(rows)));
      return;
    }
    const T* in = plan.rows.data_ptr<T>();
    parallel_rows(plan.outer, plan.inner, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const double acc = row_sum<double>(in + r * plan.inner, plan.inner);
        o[r] = static_cast<T>(static_cast<C>(acc / static_cast<double>(plan.inner)));  // 0/0 -> NaN
      }
    });
  });
  return out;
}

std::tuple<Tensor, Tensor> CpuBackend::max(const Tensor& x, const Shape& dims, bool keepdim) {
  const RowPlan plan = plan_rows(*this, x, dims, keepdim, x.sizes());
  Tensor values = empty(plan.out_shape, x.dtype());
  Tensor indices = empty(plan.out_shape, kInt64);
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = plan.rows.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* idx = indices.data_ptr<int64_t>();
    parallel_rows(plan.outer, plan.inner, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const T* row = in + r * plan.inner;
        int64_t best = 0;
        for (int64_t i = 1; i < plan.inner && !is_nan(row[best]); ++i) {
          if (is_nan(row[i]) || static_cast<C>(row[i]) > static_cast<C>(row[best])) best = i;
        }
        v[r] = row[best];
        idx[r] = best;
      }
    });
  });
  return {values, indices};
}

// Rows along `dim` are made contiguous and run in the selected instruction set's kernel;
// float16/bfloat16 rows go through float32, which is where their arithmetic happens anyway
// (the result is rounded once, at the end, as before).
void CpuBackend::softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const DType dtype = x.dtype();
  TDDP_CHECK(dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16,
             "{}: expected a floating-point tensor, got dtype {}", op, dtype_name(dtype));
  const DType compute = dtype == kFloat64 ? kFloat64 : kFloat32;
  const Tensor rows = converted(contiguous(x.transpose(dim, -1)), compute);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  if (rows.numel() == 0) return;
  const int64_t outer = rows.numel() / n;
  Tensor result = empty(rows.sizes(), compute);
  parallel_rows(outer, n, kCostSoftmax, [&](int64_t first, int64_t last) {
    if (compute == kFloat32) {
      std::vector<float> scratch(static_cast<size_t>(n));
      isa_kernels().softmax_rows_f32(rows.data_ptr<float>() + first * n, result.data_ptr<float>() + first * n,
                                     last - first, n, log, scratch.data());
    } else {
      std::vector<double> scratch(static_cast<size_t>(n));
      isa_kernels().softmax_rows_f64(rows.data_ptr<double>() + first * n, result.data_ptr<double>() + first * n,
                                     last - first, n, log, scratch.data());
    }
  });
  copy(out, result.transpose(dim, -1), false);
}

}  // namespace tinyddp::tensor::cpu
