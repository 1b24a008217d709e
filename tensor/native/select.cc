// Ops that select elements, composed from other ops (each differentiable through them, so no
// kernel of their own): clamp and where elementwise (masked_fill, add), index_select and gather
// by index (embedding's lookup and its scatter-add backward; index_select of a host tensor with
// no gradient to record copies its rows), one_hot (a comparison).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/elementwise.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// Integers round-trip through float64 exactly up to 2^53 (the lookups run on floating rows).
constexpr double kExactInteger = 9007199254740992.0;

// `x` as rows for embedding's lookup: floating tensors as they are, integer and bool ones as
// float64 (checked to round-trip), with what converts the result back.
Tensor as_lookup_rows(const Tensor& x, const char* op) {
  if (x.is_floating_point()) return x;
  if (x.dtype() != kBool && x.numel() > 0) {
    const auto [lowest, highest] = integer_extremes(x);
    const double largest = std::max(std::fabs(static_cast<double>(lowest)), std::fabs(static_cast<double>(highest)));
    TDDP_CHECK(largest <= kExactInteger, "{}: int64 values up to 2^53 are supported, got {}", op, largest);
  }
  return x.to(kFloat64);
}

void check_index(const Tensor& index, const char* op) {
  check_defined(index, op, "index");
  TDDP_CHECK(index.dtype() == kInt64, "{}: expected an int64 index, got dtype {}", op, dtype_name(index.dtype()));
}

// index_select's and index_add's index, which may also be int32 (as PyTorch's), as int64.
Tensor long_index(const Tensor& index, const char* op) {
  check_defined(index, op, "index");
  TDDP_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "{}: expected an int64 or int32 index, got dtype {}",
             op, dtype_name(index.dtype()));
  return index.to(kInt64);
}

// The permutation that moves dim d of an n-dim tensor to the front (its inverse moves it back).
Shape front_first(int64_t d, int64_t n) {
  Shape order{d};
  for (int64_t k = 0; k < n; ++k) {
    if (k != d) order.push_back(k);
  }
  return order;
}
Shape inverse(const Shape& order) {
  Shape back(order.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) back[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  return back;
}

// Refuses an index outside [0, size) along `dim` of x, naming it (on a GPU this waits for it).
void check_index_range(const Tensor& index, int64_t size, int64_t dim, const Tensor& x, const char* op) {
  if (index.numel() == 0) return;
  const auto [lowest, highest] = integer_extremes(index);
  TDDP_CHECK(lowest >= 0 && highest < size, "{}: index {} is out of range for dim {} of size {} (input shape {})", op,
             lowest < 0 ? lowest : highest, dim, size, format_shape(x.sizes()));
}

}  // namespace

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined(x, "clamp", "x");
  TDDP_CHECK(min || max, "clamp: at least one of min and max must be given");
  check_not_bool(x, "clamp", "x");
  // Each bound replaces what lies strictly beyond it (masked_fill passes the gradient where it
  // did not fill); the max bound last and on the min-clamped values, so min > max gives max
  // everywhere (and no gradient), as torch.clamp.
  Tensor out = x;
  if (min) out = masked_fill_keeping_layout(out, lt(x, *min), *min);
  if (max) out = masked_fill_keeping_layout(out, gt(out, *max), *max);
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_defined(condition, "where", "condition");
  check_defined(a, "where", "a");
  check_defined(b, "where", "b");
  TDDP_CHECK(condition.dtype() == kBool, "where: expected a bool condition, got dtype {}",
             dtype_name(condition.dtype()));
  check_same_device(a, condition, "where", "a", "condition");
  check_same_device(a, b, "where", "a", "b");
  const Shape shape = broadcast_shapes(broadcast_shapes(condition.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const Tensor c = condition.expand(shape), not_c = eq(c.to(kInt64), 0.0);
  // Each side zeroed where the other is taken (replaced, not multiplied: an inf or NaN there
  // does not leak), then added: the sum promotes a and b as PyTorch's where does.
  const Tensor from_a = masked_fill_keeping_layout(a.expand(shape), not_c, 0.0);
  const Tensor from_b = masked_fill_keeping_layout(b.expand(shape), c, 0.0);
  return add(from_a, from_b);
}

Tensor celu(const Tensor& x, double alpha) {
  check_defined(x, "celu", "x");
  TDDP_CHECK(x.is_floating_point(), "celu: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  TDDP_CHECK(alpha != 0, "celu: alpha must not be 0 (it divides x)");
  // x where positive, alpha (exp(x / alpha) - 1) elsewhere (the same at 0: both are 0, and
  // both slopes are 1 there).
  return where(gt(x, 0.0), x, mul(sub(exp(div(x, alpha)), 1.0), alpha));
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_defined(x, "leaky_relu", "x");
  TDDP_CHECK(x.is_floating_point(), "leaky_relu: expected a floating-point input, got dtype {}", dtype_name(x.dtype()));
  // x where positive, negative_slope x elsewhere (at 0 the slope is negative_slope, as PyTorch's)
  return where(gt(x, 0.0), x, mul(x, negative_slope));
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index_in) {
  check_defined(x, "index_select", "x");
  const Tensor index = long_index(index_in, "index_select");
  TDDP_CHECK(index.dim() <= 1, "index_select: expected a 0-D or 1-D index, got shape {}", format_shape(index.sizes()));
  check_same_device(x, index, "index_select", "x", "index");
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, src.dim(), "index_select");
  check_index_range(index, src.size(d), d, x, "index_select");
  if (d == 0 && src.is_cpu() && src.is_contiguous() && !needs_grad(src)) {
    // Rows of a host tensor with no gradient to record (a batch of a dataset): copied as they are.
    Shape out_shape = src.sizes();
    out_shape[0] = index.numel();
    Tensor out = empty(out_shape, TensorOptions(src.dtype()));
    const Tensor ids = index.contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    const size_t row_bytes = src.numel() == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
    const auto* from = static_cast<const char*>(src.raw_data_ptr());
    auto* to = static_cast<char*>(out.raw_data_ptr());
    for (int64_t i = 0; i < index.numel(); ++i) std::memcpy(to + i * row_bytes, from + id[i] * row_bytes, row_bytes);
    return x.dim() == 0 ? out.reshape({}) : out;
  }
  // dim to the front, the rest flattened: one row per slice, picked by embedding's lookup.
  const Shape order = front_first(d, src.dim());
  const Tensor rows = as_lookup_rows(src, "index_select").permute(order);
  int64_t rest = 1;
  for (size_t k = 1; k < order.size(); ++k) rest *= rows.size(static_cast<int64_t>(k));
  const Tensor picked = embedding(index.reshape({-1}), rows.reshape({src.size(d), rest}));
  Shape out_shape = rows.sizes();
  out_shape[0] = index.numel();
  Tensor out = picked.reshape(out_shape).permute(inverse(order));
  if (x.dim() == 0) out = out.reshape({});
  return out.dtype() == x.dtype() ? out : out.to(x.dtype());
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(x, "gather", "x");
  check_index(index, "gather");
  check_same_device(x, index, "gather", "x", "index");
  const int64_t n = std::max<int64_t>(x.dim(), 1);
  TDDP_CHECK(std::max<int64_t>(index.dim(), 1) == n, "gather: index has {} dims, x has {} (they must match)",
             index.dim(), x.dim());
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x, idx = index.dim() == 0 ? index.reshape({1}) : index;
  const int64_t d = wrap_dim(dim, n, "gather");
  for (int64_t k = 0; k < n; ++k) {
    TDDP_CHECK(k == d || idx.size(k) <= src.size(k),
               "gather: index of shape {} is larger than x of shape {} in dim {} (only dim {} may differ)",
               format_shape(index.sizes()), format_shape(x.sizes()), k, d);
  }
  check_index_range(idx, src.size(d), d, x, "gather");
  // Each output's element of x as a flat position: the index along d, its own position
  // elsewhere, through x's contiguous strides; then one lookup of 1-element rows.
  const Tensor flat = as_lookup_rows(src, "gather").contiguous();
  Tensor position = mul(idx, static_cast<double>(flat.stride(d)));
  for (int64_t k = 0; k < n; ++k) {
    if (k == d) continue;
    Shape along(static_cast<size_t>(n), 1);
    along[k] = idx.size(k);
    const Tensor steps =
        mul(arange(idx.size(k), TensorOptions(kInt64).device(x.device())), static_cast<double>(flat.stride(k)));
    position = add(position, steps.view(along));
  }
  const Tensor picked = embedding(position, flat.reshape({-1, 1})).squeeze(-1);
  const Tensor out = index.dim() == 0 ? picked.reshape({}) : picked;
  return out.dtype() == x.dtype() ? out : out.to(x.dtype());
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  check_defined(x, "topk", "x");
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, src.dim(), "topk");
  TDDP_CHECK(k >= 0 && k <= src.size(d), "topk: selected index k ({}) out of range for dim {} of size {}", k, d,
             src.size(d));
  check_not_bool(x, "topk", "x");
  Tensor indices;
  {
    NoGradGuard no_grad;
    // Each pass takes the best position not taken yet (for the smallest, the best of -x, or of
    // -1 - x for integers, as min does; NaN then becomes the worst, as topk puts it last).
    Tensor work = src.detach();
    if (!largest) work = src.is_floating_point() ? neg(work) : sub(full_like(work, -1.0), work);
    const double worst = work.is_floating_point() ? -INFINITY : static_cast<double>(INT64_MIN);
    if (!largest && work.is_floating_point()) work = masked_fill(work, ne(work, work), worst);
    Shape along(static_cast<size_t>(src.dim()), 1);
    along[static_cast<size_t>(d)] = src.size(d);
    const Tensor positions = arange(src.size(d), TensorOptions(kInt64).device(src.device())).view(along);
    Tensor taken = zeros(src.sizes(), TensorOptions(kInt64).device(src.device()));  // 1 where picked
    std::vector<Tensor> picked;
    for (int64_t i = 0; i < k; ++i) {
      Tensor at = std::get<1>(max(masked_fill(work, eq(taken, 1.0), worst), d, true));
      // A tie of the worst value with a taken position (all that is left is worst): the first
      // position not taken instead.
      const Tensor first_free = argmax(eq(taken, 0.0).to(kInt64), d, true);
      at = where(eq(gather(taken, d, at), 1.0), first_free, at);
      picked.push_back(at);
      taken = masked_fill(taken, eq(positions, at), 1.0);
    }
    Shape empty_shape = src.sizes();
    empty_shape[static_cast<size_t>(d)] = 0;
    indices = k > 0 ? cat(picked, d) : zeros(empty_shape, TensorOptions(kInt64).device(src.device()));
  }
  Tensor values = gather(src, d, indices);
  if (x.dim() == 0) return {values.reshape({}), indices.reshape({})};
  return {values, indices};
}

namespace {

// `t` grown to `shape` with zeros after its end in every dim (cat: differentiable).
Tensor pad_to(Tensor t, const Shape& shape) {
  for (int64_t k = 0; k < t.dim(); ++k) {
    const int64_t missing = shape[static_cast<size_t>(k)] - t.size(k);
    if (missing == 0) continue;
    Shape zeros_shape = t.sizes();
    zeros_shape[static_cast<size_t>(k)] = missing;
    t = cat({t, zeros(zeros_shape, TensorOptions(t.dtype()).device(t.device()))}, k);
  }
  return t;
}

// [rows, count] positions -> [rows, count, size] one-hot rows in `dtype`.
Tensor one_hot_rows(const Tensor& positions, int64_t size, DType dtype) {
  const Tensor classes = arange(size, TensorOptions(kInt64).device(positions.device()));
  return eq(positions.unsqueeze(-1), classes).to(dtype);
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor& source, double alpha) {
  check_defined(x, "index_add", "x");
  check_defined(source, "index_add", "source");
  const Tensor index = long_index(index_in, "index_add");
  TDDP_CHECK(index.dim() <= 1, "index_add: expected a 0-D or 1-D index, got shape {}", format_shape(index.sizes()));
  check_same_dtype(x, source, "index_add", "x", "source");
  check_same_device(x, source, "index_add", "x", "source");
  check_same_device(x, index, "index_add", "x", "index");  // as PyTorch's: no index from another device
  const Tensor base = x.dim() == 0 ? x.reshape({1}) : x, src = source.dim() == 0 ? source.reshape({1}) : source;
  const int64_t d = wrap_dim(dim, base.dim(), "index_add"), k = index.numel(), n = base.size(d);
  Shape want = base.sizes();
  want[static_cast<size_t>(d)] = k;
  TDDP_CHECK(src.sizes() == want,
             "index_add: source of shape {} for x of shape {} and {} indices along dim {} "
             "(expected {})",
             format_shape(source.sizes()), format_shape(x.sizes()), k, d, format_shape(want));
  check_index_range(index, n, d, x, "index_add");
  // dim to the front, the rest as columns: x [n, rest] += one_hot(index)^T [n, k] @ source [k, rest].
  const Shape order = front_first(d, base.dim());
  const Tensor front = base.permute(order);
  const int64_t rest = n > 0 ? front.numel() / n : 0;
  const Tensor scaled = alpha == 1.0 ? src : mul(src, alpha);
  const Tensor rows = scaled.permute(order).reshape({k, rest});
  // Floating point: the rows added by embedding's backward kernel; integers (which it does not
  // take) by one_hot(index)^T [n, k] @ rows, exact in int64.
  const Tensor added = x.is_floating_point() ? add_rows(rows, index.reshape({k}), n)
                                             : summing_matmul(one_hot_rows(index.reshape({k}), n, x.dtype()).t(), rows);
  const Tensor out = add(front.reshape({n, rest}), added).reshape(front.sizes()).permute(inverse(order));
  return x.dim() == 0 ? out.reshape({}) : out;
}

namespace {

// scatter_add's and scatter's checks; returns dim wrapped.
int64_t check_scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const char* op) {
  check_defined(x, op, "x");
  check_defined(src, op, "src");
  check_index(index, op);
  check_same_dtype(x, src, op, "x", "src");
  check_same_device(x, src, op, "x", "src");
  TDDP_CHECK(index.dim() == x.dim() && src.dim() == x.dim() && x.dim() >= 1,
             "{}: index ({} dims) and src ({} dims) must have x's {} dims", op, index.dim(), src.dim(), x.dim());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  for (int64_t k = 0; k < x.dim(); ++k) {
    TDDP_CHECK(index.size(k) <= src.size(k) && (k == d || index.size(k) <= x.size(k)),
               "{}: index of shape {} must be no larger than src of shape {}, nor than x of shape {} outside dim {}",
               op, format_shape(index.sizes()), format_shape(src.sizes()), format_shape(x.sizes()), d);
  }
  check_index_range(index, x.size(d), d, x, op);
  return d;
}

// The index and the part of src it covers with dim d last, as [rows, m] (one row per position
// elsewhere); `back` turns a [rows, n] result into x's layout (x's size at d, zeros after the
// index's end in the other dims).
struct ScatterRows {
  Tensor index, src;
  int64_t rows = 0, m = 0;
  Shape order, last_shape;
  Tensor back(const Tensor& per_row, const Tensor& x) const {
    Shape shape = last_shape;
    shape.back() = per_row.size(-1);
    return pad_to(per_row.reshape(shape).permute(inverse(order)), x.sizes());
  }
};
ScatterRows scatter_rows(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src) {
  ScatterRows r;
  Tensor used = src;
  for (int64_t k = 0; k < x.dim(); ++k) used = used.narrow(k, 0, index.size(k));
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k != d) r.order.push_back(k);
  }
  r.order.push_back(d);
  const Tensor idx_last = index.permute(r.order);
  r.last_shape = idx_last.sizes();
  r.m = index.size(d);
  r.rows = r.m > 0 ? index.numel() / r.m : 0;
  r.index = idx_last.reshape({r.rows, r.m});
  r.src = used.permute(r.order).reshape({r.rows, r.m});
  return r;
}

}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = check_scatter(x, dim, index, src, "scatter_add"), n = x.size(d);
  if (index.numel() == 0) return add(x, zeros_like(x));
  const ScatterRows r = scatter_rows(x, d, index, src);
  Tensor sums;  // [rows, n]
  if (x.is_floating_point()) {
    // Every value added at its slot of the rows laid end to end (row * n + index): one pass.
    const Tensor starts = arange(int64_t{0}, r.rows * n, n, TensorOptions(kInt64).device(x.device()));
    const Tensor slots = add(r.index, starts.view({r.rows, 1}));
    sums = add_rows(r.src.reshape({r.rows * r.m, 1}), slots.reshape({r.rows * r.m}), r.rows * n).view({r.rows, n});
  } else {  // each row's values summed into n slots by a [1, m] @ [m, n] one-hot product (int64)
    sums = summing_matmul(r.src.reshape({r.rows, 1, r.m}), one_hot_rows(r.index, n, x.dtype())).reshape({r.rows, n});
  }
  return add(x, r.back(sums, x));
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = check_scatter(x, dim, index, src, "scatter"), n = x.size(d);
  if (index.numel() == 0) return add(x, zeros_like(x));
  const ScatterRows r = scatter_rows(x, d, index, src);
  Tensor last;  // [rows, n]: the last of a row's m positions that writes each slot, -1 for none
  {
    NoGradGuard no_grad;
    const TensorOptions longs = TensorOptions(kInt64).device(x.device());
    const Tensor hits = eq(r.index.unsqueeze(-1), arange(n, longs));  // [rows, m, n]
    const Tensor positions = arange(r.m, longs).view({1, r.m, 1});
    last = std::get<0>(max(where(hits, positions, full({}, -1.0, longs)), 1));
  }
  const Tensor written = gather(r.src, 1, where(ge(last, 0.0), last, zeros_like(last)));  // [rows, n]
  const Tensor mask = gt(r.back(ge(last, 0.0).to(kInt64), x), 0.0);
  return where(mask, r.back(written, x), x);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  check_defined(x, "scatter", "x");
  check_index(index, "scatter");
  return scatter(x, dim, index, full(index.sizes(), value, TensorOptions(x.dtype()).device(x.device())));
}

Tensor one_hot(const Tensor& ids, int64_t num_classes) {
  check_index(ids, "one_hot");
  TDDP_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (from the ids) or positive, got {}", num_classes);
  NoGradGuard no_grad;
  if (num_classes == -1) {
    TDDP_CHECK(ids.numel() > 0, "one_hot: cannot infer num_classes from an empty tensor (give num_classes)");
    num_classes = max(ids).item<int64_t>() + 1;
  }
  check_index_range(ids, num_classes, 0, ids, "one_hot");
  const Tensor classes = arange(num_classes, TensorOptions(kInt64).device(ids.device()));
  return eq(ids.unsqueeze(-1), classes).to(kInt64);
}

}  // namespace tinyddp::tensor
