// Joining, splitting, tiling and reordering along dims (cat, stack, split, chunk, unbind, repeat,
// repeat_interleave, flip, roll, meshgrid, broadcast_to) and the triangular and diagonal parts of
// matrices (tril, triu, diag). split, chunk and unbind return views with one node for all of
// them (SplitBackward, UnbindBackward), whose backward joins the pieces' gradients with one cat
// or stack, zeros standing in for a piece that got none;
// cat copies each input into its slice of a new tensor, and its backward hands each input the
// matching slice of the gradient.
#include <algorithm>
#include <functional>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TDDP_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors.front();
  check_defined(first, "cat", "tensors[0]");
  TDDP_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (tensors[0]) cannot be concatenated");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.sizes();
  shape[d] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = fmt::format("tensors[{}]", i);
    check_defined(t, "cat", name.c_str());
    check_same_dtype(first, t, "cat", "tensors[0]", name.c_str());
    check_same_device(first, t, "cat", "tensors[0]", name.c_str());
    bool fits = t.dim() == first.dim();
    for (int64_t k = 0; fits && k < t.dim(); ++k) fits = k == d || t.size(k) == first.size(k);
    TDDP_CHECK(fits, "cat: {} has shape {}, which does not match tensors[0]'s shape {} outside dim {}", name,
               format_shape(t.sizes()), format_shape(first.sizes()), d);
    sizes.push_back(t.size(d));
    shape[d] += t.size(d);
  }
  // Channels last when every input is, as PyTorch's cat; else row-major.
  const bool channels_last = std::all_of(tensors.begin(), tensors.end(), [](const Tensor& t) {
    return t.suggest_memory_format() == MemoryFormat::kChannelsLast;
  });
  const Tensor out = new_output(shape, first.dtype(), first.device(),
                                channels_last ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous);
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      copy_into(out.narrow(d, offset, sizes[i]), tensors[i]);
      offset += sizes[i];
    }
  }
  // grad_out -> each input's slice of it along dim d (split's views).
  bool any_grad = false;
  for (const Tensor& t : tensors) any_grad = any_grad || needs_grad(t);
  if (any_grad) {
    record_op("CatBackward", out, tensors, [d, sizes](const Tensor& g) { return split(g, sizes, d); });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TDDP_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  check_defined(tensors.front(), "stack", "tensors[0]");
  const int64_t d = wrap_dim(dim, tensors.front().dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = fmt::format("tensors[{}]", i);
    check_defined(tensors[i], "stack", name.c_str());
    TDDP_CHECK(tensors[i].sizes() == tensors.front().sizes(),
               "stack: expects each tensor to be equal size, but got {} at entry 0 and {} at entry {}",
               format_shape(tensors.front().sizes()), format_shape(tensors[i].sizes()), i);
    unsqueezed.push_back(tensors[i].unsqueeze(d));
  }
  return cat(unsqueezed, d);  // cat's checks name the dtype or device that differs
}

namespace {

// The views one op returned together: autograd refuses an in-place op on any of them, as
// PyTorch's (each one's history is that op's; a write would not reach its siblings').
std::vector<Tensor> several_views(std::vector<Tensor> views, const char* op) {
  for (const Tensor& v : views) v.impl()->view_of_several = op;
  return views;
}

// The views `take` makes of t, one per piece, with one node `name` for all of them when t
// needs a gradient: `join` turns the pieces' gradients, zeros for those without one, into t's.
std::vector<Tensor> views_of(const Tensor& t, size_t pieces, const std::function<Tensor(size_t)>& take,
                             const char* name, std::function<Tensor(std::vector<Tensor>)> join) {
  const bool record = needs_grad(t);
  std::vector<Tensor> views;
  {
    NoGradGuard no_grad;  // no node per view: the one below stands for them all
    for (size_t k = 0; k < pieces; ++k) views.push_back(take(k));
  }
  for (const Tensor& v : views) v.impl()->view_made_without_grad = !GradMode::is_enabled();
  if (record && !views.empty()) {
    std::vector<Shape> shapes;
    for (const Tensor& v : views) shapes.push_back(v.sizes());
    const TensorOptions options = TensorOptions(t.dtype()).device(t.device());
    record_multi_op(name, views, {t},
                    [join = std::move(join), shapes = std::move(shapes), options](const std::vector<Tensor>& grads) {
                      std::vector<Tensor> parts(grads.size());
                      for (size_t k = 0; k < grads.size(); ++k) {
                        parts[k] = grads[k].defined() ? grads[k] : zeros(shapes[k], options);
                      }
                      return std::vector<Tensor>{join(std::move(parts))};
                    });
  }
  return views;
}

std::vector<Tensor> split_views(const Tensor& t, const std::vector<int64_t>& sizes, int64_t d, const char* name) {
  std::vector<int64_t> offsets{0};
  for (const int64_t s : sizes) offsets.push_back(offsets.back() + s);
  return views_of(
      t, sizes.size(), [&](size_t k) { return t.narrow(d, offsets[k], sizes[k]); }, name,
      [d](std::vector<Tensor> grads) { return cat(grads, d); });
}

// split's checks and sizes: `split_size` pieces, the last one shorter.
std::vector<int64_t> split_sizes(const Tensor& t, int64_t split_size, int64_t d) {
  TDDP_CHECK(split_size > 0 || (split_size == 0 && t.size(d) == 0),
             "split: split_size must be positive, got {} (dim {} of shape {})", split_size, d, format_shape(t.sizes()));
  std::vector<int64_t> sizes;
  for (int64_t left = t.size(d); left > 0; left -= split_size) sizes.push_back(std::min(split_size, left));
  if (sizes.empty()) sizes.push_back(0);
  return sizes;
}

}  // namespace

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(t, "split", "tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split");
  int64_t total = 0;
  for (const int64_t s : sizes) {
    TDDP_CHECK(s >= 0, "split: split sizes must be non-negative, got {}",
               format_shape(Shape(sizes.begin(), sizes.end())));
    total += s;
  }
  TDDP_CHECK(total == t.size(d), "split: split sizes {} sum to {}, but dim {} of the tensor (shape {}) has {}",
             format_shape(Shape(sizes.begin(), sizes.end())), total, d, format_shape(t.sizes()), t.size(d));
  return several_views(split_views(t, sizes, d, "SplitWithSizesBackward"), "split");
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  check_defined(t, "split", "tensor");
  const int64_t d = wrap_dim(dim, t.dim(), "split");
  return several_views(split_views(t, split_sizes(t, split_size, d), d, "SplitBackward"), "split");
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  check_defined(t, "chunk", "tensor");
  TDDP_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got {}", chunks);
  const int64_t d = wrap_dim(dim, t.dim(), "chunk");
  const int64_t size = t.size(d);
  const int64_t split_size = std::max<int64_t>((size + chunks - 1) / chunks, size == 0 ? 0 : 1);
  return several_views(split_views(t, split_sizes(t, split_size, d), d, "SplitBackward"), "chunk");
}

namespace {

// input with the elements of its last two dims where (column - row) compares true against
// `diagonal` replaced by zero.
Tensor zero_where(const Tensor& input, int64_t diagonal, bool above, const char* op) {
  check_defined(input, op, "input");
  TDDP_CHECK(input.dim() >= 2, "{}: expected a tensor of at least 2 dims (matrices in the last two), got shape {}", op,
             format_shape(input.sizes()));
  const TensorOptions index = TensorOptions(kInt64).device(input.device());
  const int64_t rows = input.size(-2), cols = input.size(-1);
  Tensor drop;
  {
    NoGradGuard no_grad;
    const Tensor offset = sub(arange(cols, index).view({1, cols}), arange(rows, index).view({rows, 1}));
    drop = above ? gt(offset, static_cast<double>(diagonal)) : lt(offset, static_cast<double>(diagonal));
  }
  return masked_fill(input, drop, 0.0);
}

}  // namespace

Tensor tril(const Tensor& input, int64_t diagonal) { return zero_where(input, diagonal, true, "tril"); }
Tensor triu(const Tensor& input, int64_t diagonal) { return zero_where(input, diagonal, false, "triu"); }

std::vector<Tensor> unbind(const Tensor& t, int64_t dim) {
  check_defined(t, "unbind", "input");
  TDDP_CHECK(t.dim() > 0, "unbind: dimension specified as {} but tensor has no dimensions", dim);
  const int64_t d = wrap_dim(dim, t.dim(), "unbind");
  const std::vector<Tensor> out = views_of(
      t, static_cast<size_t>(t.size(d)), [&](size_t i) { return t.select(d, static_cast<int64_t>(i)); },
      "UnbindBackward", [d](std::vector<Tensor> grads) { return stack(grads, d); });
  return several_views(out, "unbind");
}

Tensor repeat(const Tensor& t, const Shape& repeats) {
  check_defined(t, "repeat", "input");
  TDDP_CHECK(static_cast<int64_t>(repeats.size()) >= t.dim(),
             "repeat: number of dimensions of repeat dims ({}) can not be smaller than number of dimensions of "
             "tensor ({})",
             repeats.size(), t.dim());
  const size_t lead = repeats.size() - static_cast<size_t>(t.dim());
  Shape pairs, tiled, out;  // [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then [r0 s0, r1 s1, ...]
  for (size_t i = 0; i < repeats.size(); ++i) {
    TDDP_CHECK(repeats[i] >= 0, "repeat: repeats must be non-negative, got {}", format_shape(repeats));
    const int64_t size = i < lead ? 1 : t.size(static_cast<int64_t>(i - lead));
    for (int64_t v : {int64_t{1}, size}) pairs.push_back(v);
    for (int64_t v : {repeats[i], size}) tiled.push_back(v);
    out.push_back(repeats[i] * size);
  }
  return t.reshape(pairs).expand(tiled).contiguous().reshape(out);
}

Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim) {
  check_defined(t, "repeat_interleave", "input");
  check_defined(repeats, "repeat_interleave", "repeats");
  TDDP_CHECK(repeats.dtype() == kInt64 && repeats.dim() <= 1,
             "repeat_interleave: repeats must be a 0-d or 1-d int64 tensor, got dtype {} and shape {}",
             dtype_name(repeats.dtype()), format_shape(repeats.sizes()));
  const Tensor input = dim ? t : t.reshape({-1});
  const int64_t d = dim ? wrap_dim(*dim, t.dim(), "repeat_interleave") : 0;
  const int64_t n = input.size(d);
  const std::vector<int64_t> counts = repeats.dim() == 0
                                          ? std::vector<int64_t>(static_cast<size_t>(n), repeats.item<int64_t>())
                                          : repeats.to(kCPU).contiguous().to_vector<int64_t>();
  TDDP_CHECK(static_cast<int64_t>(counts.size()) == n,
             "repeat_interleave: repeats must have the same size as input along dim ({} != {})", counts.size(), n);
  std::vector<int64_t> index;
  for (int64_t i = 0; i < n; ++i) {
    TDDP_CHECK(counts[static_cast<size_t>(i)] >= 0, "repeat_interleave: repeats can not be negative");
    index.insert(index.end(), static_cast<size_t>(counts[static_cast<size_t>(i)]), i);
  }
  // index_select's gradient adds the copies' gradients back into each slice
  return index_select(input, d, from_vector(index, {}, input.device()));
}
Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim) {
  return repeat_interleave(t, scalar_tensor(static_cast<double>(repeats), TensorOptions(kInt64)), dim);
}

Tensor flip(const Tensor& t, DimList dims) {
  check_defined(t, "flip", "input");
  const Shape& list = dims;
  Tensor out = t;
  std::vector<bool> seen(static_cast<size_t>(t.dim()), false);
  for (int64_t dim : list) {
    const int64_t d = wrap_dim(dim, t.dim(), "flip");
    TDDP_CHECK(!seen[static_cast<size_t>(d)], "flip: dim {} appears multiple times in the list of dims", d);
    seen[static_cast<size_t>(d)] = true;
    const int64_t n = t.size(d);
    out = index_select(out, d, arange(n - 1, int64_t{-1}, int64_t{-1}, TensorOptions().device(t.device())));
  }
  return keep_layout(list.empty() ? t.clone() : out, t);
}

Tensor roll(const Tensor& t, DimList shifts, DimList dims) {
  check_defined(t, "roll", "input");
  const Shape& s = shifts;
  const Shape& ds = dims;
  if (ds.empty()) {
    TDDP_CHECK(s.size() == 1, "roll: without dims, one shift is expected (got {})", s.size());
    return roll(t.reshape({-1}), s, {0}).view(t.sizes());
  }
  TDDP_CHECK(s.size() == ds.size(), "roll: shifts and dimensions must align. shifts: {}, dims: {}", s.size(),
             ds.size());
  Tensor out = t;
  for (size_t k = 0; k < ds.size(); ++k) {
    const int64_t d = wrap_dim(ds[k], t.dim(), "roll");
    const int64_t n = t.size(d);
    if (n == 0) continue;
    const int64_t shift = ((s[k] % n) + n) % n;  // the last `shift` elements come first
    if (shift != 0) out = cat({out.narrow(d, n - shift, shift), out.narrow(d, 0, n - shift)}, d);
  }
  return out;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  check_defined(t, "broadcast_to", "input");
  TDDP_CHECK(is_expandable_to(t.sizes(), shape), "broadcast_to: shape {} cannot be broadcast to {}",
             format_shape(t.sizes()), format_shape(shape));
  return t.expand(shape);
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, std::string_view indexing) {
  TDDP_CHECK(indexing == "ij" || indexing == "xy", "meshgrid: indexing must be 'ij' or 'xy', got '{}'", indexing);
  Shape shape;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "meshgrid", "tensors");
    TDDP_CHECK(tensors[i].dim() <= 1, "meshgrid: expected 0-d or 1-d tensors, got shape {} at entry {}",
               format_shape(tensors[i].sizes()), i);
    shape.push_back(tensors[i].numel());
  }
  // "xy": the first two inputs swap their output dims (Cartesian x along columns)
  const bool swap = indexing == "xy" && tensors.size() >= 2;
  if (swap) std::swap(shape[0], shape[1]);
  std::vector<Tensor> grids;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t axis = swap && i < 2 ? 1 - i : i;
    Shape view(shape.size(), 1);
    view[axis] = tensors[i].numel();
    grids.push_back(tensors[i].reshape(view).expand(shape));
  }
  return grids;
}

Tensor diag(const Tensor& t, int64_t diagonal) {
  check_defined(t, "diag", "input");
  TDDP_CHECK(t.dim() == 1 || t.dim() == 2, "diag: expected a 1-D or 2-D tensor, got shape {}", format_shape(t.sizes()));
  const int64_t off = diagonal < 0 ? -diagonal : diagonal;
  if (t.dim() == 2) {  // the diagonal as a view: stride rows + cols from its first element
    const int64_t rows = t.size(0), cols = t.size(1);
    const int64_t len = std::max<int64_t>(0, diagonal >= 0 ? std::min(rows, cols - off) : std::min(rows - off, cols));
    const int64_t start = len == 0 ? 0 : diagonal >= 0 ? off * t.stride(1) : off * t.stride(0);
    return t.as_strided({len}, {t.stride(0) + t.stride(1)}, t.storage_offset() + start);
  }
  // a vector onto the diagonal of an n x n matrix of zeros (index_add: the gradient is the diagonal)
  const int64_t len = t.size(0), n = len + off;
  const Tensor positions = add(mul(arange(len, TensorOptions().device(t.device())), static_cast<double>(n + 1)),
                               static_cast<double>(diagonal >= 0 ? off : off * n));
  return index_add(zeros({n * n}, TensorOptions(t.dtype()).device(t.device())), 0, positions, t).view({n, n});
}

}  // namespace tinyddp::tensor
