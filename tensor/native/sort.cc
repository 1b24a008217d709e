// Sorting and the selections whose result size depends on the data (sort, argsort, unique,
// nonzero, masked_select, bincount). The order or the positions are found on the host, from a
// CPU copy of the data (for a CUDA tensor, one copy each way, as PyTorch's nonzero syncs too);
// the values are then gathered on the tensor's own device by index ops, so that the
// differentiable ones (sort's values, masked_select) take their gradients from gather's and
// index_select's.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// The rows of x along dim as host values: [rows, n] with dim last, in float64 (exact for every
// floating dtype) or int64 (integers and bool).
template <typename T>
std::vector<T> host_rows(const Tensor& x_last) {
  const Tensor host = x_last.detach().to(kCPU).to(dtype_of<T>).contiguous();
  return host.to_vector<T>();
}

// Ascending with NaN last, descending with NaN first, as PyTorch's sort; ties keep their order.
template <typename T>
void sort_row(const T* v, int64_t n, bool descending, int64_t* order) {
  std::iota(order, order + n, int64_t{0});
  const auto before = [v, descending](int64_t i, int64_t j) {
    const T a = v[i], b = v[j];
    if constexpr (std::is_floating_point_v<T>) {
      const bool nan_a = std::isnan(a), nan_b = std::isnan(b);
      if (nan_a || nan_b) return descending ? nan_a && !nan_b : nan_b && !nan_a;
    }
    return descending ? a > b : a < b;
  };
  std::stable_sort(order, order + n, before);
}

Tensor sorted_indices(const Tensor& x, int64_t d, bool descending) {
  const Tensor last = x.transpose(d, -1);
  const int64_t n = last.size(-1), rows = n == 0 ? 0 : last.numel() / n;
  std::vector<int64_t> order(static_cast<size_t>(last.numel()));
  if (x.is_floating_point()) {
    const std::vector<double> v = host_rows<double>(last);
    for (int64_t r = 0; r < rows; ++r) sort_row(v.data() + r * n, n, descending, order.data() + r * n);
  } else {
    const std::vector<int64_t> v = host_rows<int64_t>(last);
    for (int64_t r = 0; r < rows; ++r) sort_row(v.data() + r * n, n, descending, order.data() + r * n);
  }
  return from_vector(order, last.sizes(), x.device()).transpose(d, -1).contiguous();
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  (void)stable;  // always stable: one of the orders an unstable sort may give
  check_defined(x, "sort", "x");
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, src.dim(), "sort");
  const Tensor indices = sorted_indices(src, d, descending);
  const Tensor values = gather(src, d, indices);  // the gradient: gather's (scattered back)
  if (x.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return std::get<1>(sort(x, dim, descending, stable));
}

namespace {

// The distinct rows of the [rows, width] row-major values v, in lexicographic order (NaN after
// every number, as sort's): each first row of a run of equal ones, each row's run and each run's
// length. A NaN equals nothing, so each row holding one is a run of its own.
struct Runs {
  std::vector<int64_t> firsts, inverse, counts;
};

template <typename T>
Runs equal_runs(const std::vector<T>& v, int64_t rows, int64_t width) {
  const auto row = [&](int64_t r) { return v.data() + r * width; };
  const auto before = [](T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(b) && !std::isnan(a);
    }
    return a < b;
  };
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
    return std::lexicographical_compare(row(i), row(i) + width, row(j), row(j) + width, before);
  });
  Runs runs;
  runs.inverse.resize(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t r = order[k];
    if (k == 0 || !std::equal(row(r), row(r) + width, row(order[k - 1]))) {
      runs.firsts.push_back(r);
      runs.counts.push_back(0);
    }
    runs.inverse[static_cast<size_t>(r)] = static_cast<int64_t>(runs.firsts.size()) - 1;
    ++runs.counts.back();
  }
  return runs;
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted, bool return_inverse, bool return_counts,
                                          std::optional<int64_t> dim) {
  (void)sorted;  // always sorted, as PyTorch's CPU and CUDA kernels give
  (void)return_inverse;
  (void)return_counts;
  check_defined(x, "unique", "x");
  // Without a dim, the elements are the rows; with one, the slices along it (flattened in the
  // order of the other dims, as PyTorch's).
  TDDP_CHECK(!dim || x.dim() > 0, "unique: a dim was given ({}) but the tensor has no dimensions", dim.value_or(0));
  const int64_t d = dim ? wrap_dim(*dim, x.dim(), "unique") : 0;
  Shape order = {d};
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k != d) order.push_back(k);
  }
  const Tensor rows = dim ? x.permute(order).reshape({x.size(d), -1}) : x.reshape({-1, 1});
  const int64_t count = rows.size(0), width = rows.size(1);
  const Runs runs = x.is_floating_point() ? equal_runs(host_rows<double>(rows), count, width)
                                          : equal_runs(host_rows<int64_t>(rows), count, width);
  NoGradGuard no_grad;
  const Tensor firsts = from_vector(runs.firsts, {}, x.device());
  const Tensor values = dim ? index_select(x, d, firsts) : index_select(x.reshape({-1}), 0, firsts);
  return {values, from_vector(runs.inverse, dim ? Shape{count} : x.sizes(), x.device()),
          from_vector(runs.counts, {}, x.device())};
}

Tensor nonzero(const Tensor& x) {
  check_defined(x, "nonzero", "x");
  const std::vector<double> v = host_rows<double>(x.reshape({-1}));
  const Shape strides = contiguous_strides(x.sizes());
  std::vector<int64_t> coords;
  int64_t count = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) continue;  // NaN is nonzero
    ++count;
    int64_t rest = static_cast<int64_t>(i);
    for (int64_t d = 0; d < x.dim(); ++d) {
      coords.push_back(rest / strides[static_cast<size_t>(d)]);
      rest %= strides[static_cast<size_t>(d)];
    }
  }
  return from_vector(coords, Shape{count, x.dim()}, x.device());
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check_defined(x, "masked_select", "x");
  check_defined(mask, "masked_select", "mask");
  TDDP_CHECK(mask.dtype() == kBool, "masked_select: expected a bool mask, got dtype {}", dtype_name(mask.dtype()));
  check_same_device(x, mask, "masked_select", "x", "mask");
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  const Tensor positions = nonzero(mask.expand(shape).reshape({-1})).reshape({-1});
  return index_select(x.expand(shape).reshape({-1}), 0, positions);
}

Tensor bincount(const Tensor& x_in, const Tensor& weights, int64_t minlength) {
  check_defined(x_in, "bincount", "x");
  TDDP_CHECK(x_in.dim() == 1 && is_integral(x_in.dtype(), false),
             "bincount: expected a 1-D integer tensor, got dtype {} and shape {}", dtype_name(x_in.dtype()),
             format_shape(x_in.sizes()));
  const Tensor x = x_in.to(kInt64);
  TDDP_CHECK(minlength >= 0, "bincount: minlength should be >= 0, got {}", minlength);
  int64_t bins = minlength;
  if (x.numel() > 0) {
    NoGradGuard no_grad;
    TDDP_CHECK(min(x).item<int64_t>() >= 0, "bincount: input must be non-negative");
    bins = std::max(bins, max(x).item<int64_t>() + 1);
  }
  if (!weights.defined()) {
    return index_add(zeros({bins}, TensorOptions(kInt64).device(x.device())), 0, x, ones_like(x));
  }
  TDDP_CHECK(weights.sizes() == x.sizes(),
             "bincount: weights should be 1-d and have the same length as input ({} vs {})",
             format_shape(weights.sizes()), format_shape(x.sizes()));
  return index_add(zeros({bins}, TensorOptions(weights.dtype()).device(x.device())), 0, x, weights);
}

}  // namespace tinyddp::tensor
