// Python's indexing (indexing.h): basic indices as views (select, narrow, as_strided for a
// step, unsqueeze), tensor indices as a lookup (index_select; several as one over their dims
// flattened together), and index_put_ as a scatter of the values into x's flat positions,
// which the in-place machinery writes into x (so autograd records it as any in-place op:
// gradients reach both x's old values and the values).
#include "tinyddp/tensor/indexing.h"

#include <cstring>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;
using indexing::EllipsisType;
using indexing::NoneType;
using indexing::Slice;
using indexing::TensorIndex;

indexing::TensorIndex::TensorIndex(const char* text) : value_(Ellipsis) {
  TDDP_CHECK(text != nullptr && std::strcmp(text, "...") == 0,
             "index: a string index must be \"...\" (the ellipsis), got \"{}\"", text ? text : "");
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  check_defined(x, "slice", "x");
  TDDP_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  TDDP_CHECK(step > 0, "slice: step must be greater than zero, got {}", step);
  const int64_t d = wrap_dim(dim, x.dim(), "slice"), size = x.size(d);
  // Python's rules: negative bounds count from the end, then both are clamped to [0, size].
  const auto bound = [size](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    const int64_t b = *v < 0 ? *v + size : *v;
    return std::min(std::max<int64_t>(b, 0), size);
  };
  const int64_t first = bound(start, 0), stop = std::max(bound(end, size), first);
  const int64_t count = (stop - first + step - 1) / step;
  if (step == 1 || count <= 1) return x.narrow(d, first, count);
  const Tensor span = x.narrow(d, first, (count - 1) * step + 1);
  Shape sizes = span.sizes(), strides = span.strides();
  sizes[static_cast<size_t>(d)] = count;
  strides[static_cast<size_t>(d)] *= step;
  return span.as_strided(sizes, strides, span.storage_offset());
}

namespace {

// What an index list names: the dims of x (ints, slices, tensors; None, the ellipsis and a 0-d
// mask name none) and how many tensor indices it holds.
struct Named {
  int64_t dims = 0, tensors = 0;
};

Named dims_named(const std::vector<TensorIndex>& indices) {
  Named named;
  int64_t ellipses = 0;
  for (const TensorIndex& index : indices) {
    const auto& v = index.value();
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<Slice>(v)) ++named.dims;
    if (std::holds_alternative<EllipsisType>(v)) ++ellipses;
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      check_defined(*t, "index", "tensor index");
      TDDP_CHECK(t->dtype() == kInt64 || t->dtype() == kBool,
                 "index: tensors used as indices must be int64, int32, bool or uint8, got {}", dtype_name(t->dtype()));
      named.dims += t->dtype() == kBool ? t->dim() : 1;
      ++named.tensors;
    }
  }
  TDDP_CHECK(ellipses <= 1, "index: an index can only have a single ellipsis ('...')");
  return named;
}

// The int64 positions `t` along a dim of `size`: negatives count from the end, as Python's.
Tensor wrapped_positions(const Tensor& t, int64_t size, int64_t dim) {
  if (t.numel() == 0) return t;
  const int64_t lowest = t.min().item<int64_t>(), highest = t.max().item<int64_t>();
  TDDP_CHECK(lowest >= -size && highest < size, "index: index {} is out of bounds for dimension {} with size {}",
             lowest < -size ? lowest : highest, dim, size);
  return lowest < 0 ? where(lt(t, 0.0), add(t, static_cast<double>(size)), t) : t;
}

// x indexed by the int64 tensor `t` along dim d: t's shape in place of the dim.
Tensor take_positions(const Tensor& x, int64_t d, const Tensor& t) {
  const Tensor picked = index_select(x, d, wrapped_positions(t, x.size(d), d).reshape({t.numel()}));
  Shape shape;
  for (int64_t k = 0; k < d; ++k) shape.push_back(x.size(k));
  for (int64_t s : t.sizes()) shape.push_back(s);
  for (int64_t k = d + 1; k < x.dim(); ++k) shape.push_back(x.size(k));
  return picked.reshape(shape);
}

void check_mask(const Tensor& x, int64_t d, const Tensor& m, const Shape& original) {
  for (int64_t k = 0; k < m.dim(); ++k) {
    TDDP_CHECK(d + k < x.dim() && m.size(k) == x.size(d + k),
               "index: the shape of the mask {} does not match the shape of the indexed tensor {} at dim {}",
               format_shape(m.sizes()), format_shape(original), d + k);
  }
}

// x indexed by the bool mask `m` over dims d .. d + m.dim() - 1: those dims become one, the
// positions where m is true.
Tensor take_mask(const Tensor& x, int64_t d, const Tensor& m) {
  const Tensor mask = m.dim() == 0 ? m.reshape({1}) : m;
  const Tensor base = m.dim() == 0 ? x.unsqueeze(d) : x;
  check_mask(base, d, mask, x.sizes());
  const Tensor flat = mask.dim() > 1 ? base.flatten(d, d + mask.dim() - 1) : base;
  return index_select(flat, d, nonzero(mask.reshape({mask.numel()})).reshape({-1}));
}

// A tensor index met among several: the dim of the basic-indexed view it starts at.
struct Pending {
  int64_t dim;
  Tensor index;
};

// The index tensors broadcast together (NumPy's advanced indexing), each named as PyTorch does.
Shape broadcast_indices(const std::vector<std::pair<int64_t, Tensor>>& picks) {
  Shape shape;
  try {
    for (const auto& pick : picks) shape = broadcast_shapes(shape, pick.second.sizes(), "index");
  } catch (const Error&) {  // reworded as PyTorch's, naming every index tensor's shape
    std::string shapes;
    for (const auto& pick : picks) shapes += (shapes.empty() ? "" : ", ") + format_shape(pick.second.sizes());
    TDDP_CHECK(false, "index: shape mismatch: indexing tensors could not be broadcast together with shapes {}", shapes);
  }
  return shape;
}

// x indexed by several tensors at once (NumPy's advanced indexing, as PyTorch's): the index
// tensors (a mask as its nonzero coordinates, one per dim it covers) broadcast to one shape B,
// which takes the place of the dims they index when those are adjacent, else goes first.
Tensor take_together(const Tensor& x, const std::vector<Pending>& pending, const Shape& original) {
  std::vector<std::pair<int64_t, Tensor>> picks;  // (dim of x, int64 positions)
  for (const Pending& p : pending) {
    if (p.index.dtype() == kBool) {
      check_mask(x, p.dim, p.index, original);
      const Tensor coords = nonzero(p.index);
      for (int64_t k = 0; k < p.index.dim(); ++k) picks.emplace_back(p.dim + k, coords.select(1, k));
    } else {
      picks.emplace_back(p.dim, wrapped_positions(p.index, x.size(p.dim), p.dim));
    }
  }
  const Shape shape = broadcast_indices(picks);
  // The indexed dims to the front, flattened into one; each position becomes a row there.
  Shape order, rest;
  std::vector<bool> picked(static_cast<size_t>(x.dim()), false);
  bool adjacent = true;
  for (size_t i = 0; i < picks.size(); ++i) {
    order.push_back(picks[i].first);
    picked[static_cast<size_t>(picks[i].first)] = true;
    adjacent = adjacent && (i == 0 || picks[i].first == picks[i - 1].first + 1);
  }
  Shape rows_shape = {1};
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (picked[static_cast<size_t>(d)]) {
      rows_shape[0] *= x.size(d);
    } else {
      order.push_back(d);
      rows_shape.push_back(x.size(d));
      rest.push_back(x.size(d));
    }
  }
  Tensor rows_index;
  int64_t stride = 1;
  for (size_t i = picks.size(); i-- > 0;) {
    const Tensor term = stride == 1 ? picks[i].second : mul(picks[i].second, static_cast<double>(stride));
    rows_index = rows_index.defined() ? add(term, rows_index) : term;
    stride *= x.size(picks[i].first);
  }
  const int64_t count = shape_numel(shape);
  Shape out_shape = shape;
  for (int64_t s : rest) out_shape.push_back(s);
  const Tensor out = index_select(x.permute(order).reshape(rows_shape), 0, rows_index.expand(shape).reshape({count}))
                         .reshape(out_shape);
  const int64_t first = picks.front().first, b = static_cast<int64_t>(shape.size());
  if (!adjacent || first == 0) return out;
  // Adjacent dims: B goes where they were (after the `first` dims before them).
  Shape back;
  for (int64_t k = 0; k < first; ++k) back.push_back(b + k);
  for (int64_t k = 0; k < b; ++k) back.push_back(k);
  for (int64_t k = b + first; k < out.dim(); ++k) back.push_back(k);
  return out.permute(back);
}

// The tensor indices as the steps below take them: int32 positions as int64, uint8 masks as
// bool (PyTorch's older mask dtype).
std::vector<TensorIndex> long_or_mask(const std::vector<TensorIndex>& indices) {
  std::vector<TensorIndex> out = indices;
  for (TensorIndex& index : out) {
    const Tensor* t = std::get_if<Tensor>(&index.value());
    if (t != nullptr && t->defined() && (t->dtype() == kInt32 || t->dtype() == kUInt8)) {
      index = TensorIndex(t->to(t->dtype() == kInt32 ? kInt64 : kBool));
    }
  }
  return out;
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices_in) {
  check_defined(x, "index", "x");
  const std::vector<TensorIndex> indices = long_or_mask(indices_in);
  const Named named = dims_named(indices);
  TDDP_CHECK(named.dims <= x.dim(), "index: too many indices for tensor of dimension {} (got {})", x.dim(), named.dims);
  Tensor out = x;
  int64_t dim = 0;
  std::vector<Pending> pending;  // with several tensor indices: taken together at the end
  for (const TensorIndex& index : indices) {
    const auto& v = index.value();
    if (std::holds_alternative<NoneType>(v)) {
      out = out.unsqueeze(dim++);
    } else if (std::holds_alternative<EllipsisType>(v)) {
      dim += x.dim() - named.dims;
    } else if (const int64_t* i = std::get_if<int64_t>(&v)) {
      const int64_t size = out.size(dim);
      TDDP_CHECK(*i >= -size && *i < size, "index: index {} is out of bounds for dimension {} with size {}", *i, dim,
                 size);
      out = out.select(dim, *i);
    } else if (const Slice* s = std::get_if<Slice>(&v)) {
      out = slice(out, dim++, s->start, s->stop, s->step.value_or(1));
    } else if (const Tensor& t = std::get<Tensor>(v); named.tensors > 1) {
      if (t.dtype() == kBool && t.dim() == 0) out = out.unsqueeze(dim);  // a 0-d mask adds a dim of 1
      pending.push_back({dim, t.dim() == 0 && t.dtype() == kBool ? t.reshape({1}) : t});
      dim += t.dtype() == kBool ? std::max<int64_t>(t.dim(), 1) : 1;
    } else if (t.dtype() == kBool) {
      out = take_mask(out, dim++, t);
    } else {
      // A list of positions along dim 0 keeps a channels-last layout, as PyTorch's (the batch
      // reshuffled, x[perm]); elsewhere the result is row-major.
      out = dim == 0 && t.dim() == 1 ? keep_layout(take_positions(out, dim, t), out) : take_positions(out, dim, t);
      dim += t.dim();
    }
  }
  return pending.empty() ? out : take_together(out, pending, x.sizes());
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values,
                         bool accumulate) {
  check_defined(x, "index_put_", "x");
  check_defined(values, "index_put_", "values");
  check_same_device(x, values, "index_put_", "x", "values");
  Tensor positions;  // x's flat positions of the indexed part
  {
    NoGradGuard no_grad;
    positions = index(arange(x.numel(), TensorOptions(kInt64).device(x.device())).view(x.sizes()), indices);
  }
  TDDP_CHECK(is_expandable_to(values.sizes(), positions.sizes()),
             "index_put_: values of shape {} cannot be broadcast to the indexed shape {}", format_shape(values.sizes()),
             format_shape(positions.sizes()));
  return write_in_place(x, "index_put_", [&] {
    const Tensor flat_positions = positions.reshape({positions.numel()});
    const Tensor flat_values = values.to(x.dtype()).expand(positions.sizes()).reshape({positions.numel()});
    const Tensor flat = x.reshape({x.numel()});
    const Tensor out =
        accumulate ? index_add(flat, 0, flat_positions, flat_values) : scatter(flat, 0, flat_positions, flat_values);
    return out.view(x.sizes());
  });
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, double value) {
  check_defined(x, "index_put_", "x");
  return index_put_(x, indices, full({}, value, TensorOptions(x.dtype()).device(x.device())));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return tensor::index(*this, indices); }
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) const {
  return tensor::index_put_(*this, indices, values, accumulate);
}
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, double value) const {
  return tensor::index_put_(*this, indices, value);
}
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  return tensor::slice(*this, dim, start, end, step);
}

}  // namespace tinyddp::tensor
