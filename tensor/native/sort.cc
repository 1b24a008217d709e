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

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted, bool return_inverse, bool return_counts) {
  (void)sorted;  // always sorted, as PyTorch's CPU and CUDA kernels give
  (void)return_inverse;
  (void)return_counts;
  check_defined(x, "unique", "x");
  const Tensor flat = x.reshape({-1});
  const Tensor order = sorted_indices(flat, 0, false).to(kCPU);
  const std::vector<int64_t> idx = order.to_vector<int64_t>();
  const bool floating = x.is_floating_point();
  const std::vector<double> fv = floating ? host_rows<double>(flat) : std::vector<double>();
  const std::vector<int64_t> iv = floating ? std::vector<int64_t>() : host_rows<int64_t>(flat);
  const auto same = [&](int64_t i, int64_t j) {
    return floating ? fv[static_cast<size_t>(i)] == fv[static_cast<size_t>(j)]
                    : iv[static_cast<size_t>(i)] == iv[static_cast<size_t>(j)];
  };
  std::vector<int64_t> firsts, inverse(idx.size()), counts;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k == 0 || !same(idx[k], idx[k - 1])) {  // NaN never equals: each NaN is its own value
      firsts.push_back(idx[k]);
      counts.push_back(0);
    }
    inverse[static_cast<size_t>(idx[k])] = static_cast<int64_t>(firsts.size()) - 1;
    ++counts.back();
  }
  NoGradGuard no_grad;
  const Tensor values = index_select(flat, 0, from_vector(firsts, {}, x.device()));
  return {values, from_vector(inverse, x.sizes(), x.device()), from_vector(counts, {}, x.device())};
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

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  check_defined(x, "bincount", "x");
  TDDP_CHECK(x.dim() == 1 && x.dtype() == kInt64, "bincount: expected a 1-D int64 tensor, got dtype {} and shape {}",
             dtype_name(x.dtype()), format_shape(x.sizes()));
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
