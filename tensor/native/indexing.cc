// Python's indexing (indexing.h): basic indices as views (select, narrow, as_strided for a
// step, unsqueeze), one tensor index as a lookup (index_select), and index_put_ as a scatter of
// the values into x's flat positions, which the in-place machinery writes into x (so autograd
// records it as any in-place op: gradients reach both x's old values and the values).
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

// The dims of x an index list names (ints, slices, tensors; None and the ellipsis name none).
int64_t dims_named(const std::vector<TensorIndex>& indices) {
  int64_t named = 0, tensors = 0, ellipses = 0;
  for (const TensorIndex& index : indices) {
    const auto& v = index.value();
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<Slice>(v)) ++named;
    if (std::holds_alternative<EllipsisType>(v)) ++ellipses;
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      check_defined(*t, "index", "tensor index");
      TDDP_CHECK(t->dtype() == kInt64 || t->dtype() == kBool,
                 "index: tensors used as indices must be int64 or bool, got {}", dtype_name(t->dtype()));
      named += t->dtype() == kBool ? std::max<int64_t>(t->dim(), 1) : 1;
      ++tensors;
    }
  }
  TDDP_CHECK(ellipses <= 1, "index: an index can only have a single ellipsis ('...')");
  TDDP_CHECK(tensors <= 1,
             "index: {} tensor indices in one call; one is supported (index with them one after the other, or "
             "gather)",
             tensors);
  return named;
}

// x indexed by the int64 tensor `t` along dim d: t's shape in place of the dim.
Tensor take_positions(const Tensor& x, int64_t d, const Tensor& t) {
  const Tensor picked = index_select(x, d, t.reshape({t.numel()}));
  Shape shape;
  for (int64_t k = 0; k < d; ++k) shape.push_back(x.size(k));
  for (int64_t s : t.sizes()) shape.push_back(s);
  for (int64_t k = d + 1; k < x.dim(); ++k) shape.push_back(x.size(k));
  return picked.reshape(shape);
}

// x indexed by the bool mask `m` over dims d .. d + m.dim() - 1: those dims become one, the
// positions where m is true.
Tensor take_mask(const Tensor& x, int64_t d, const Tensor& m) {
  const Tensor mask = m.dim() == 0 ? m.reshape({1}) : m;
  const Tensor base = m.dim() == 0 ? x.unsqueeze(d) : x;
  for (int64_t k = 0; k < mask.dim(); ++k) {
    TDDP_CHECK(d + k < base.dim() && mask.size(k) == base.size(d + k),
               "index: the shape of the mask {} does not match the shape of the indexed tensor {} at dim {}",
               format_shape(m.sizes()), format_shape(x.sizes()), d + k);
  }
  const Tensor flat = mask.dim() > 1 ? base.flatten(d, d + mask.dim() - 1) : base;
  return index_select(flat, d, nonzero(mask.reshape({mask.numel()})).reshape({-1}));
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  check_defined(x, "index", "x");
  const int64_t named = dims_named(indices);
  TDDP_CHECK(named <= x.dim(), "index: too many indices for tensor of dimension {} (got {})", x.dim(), named);
  Tensor out = x;
  int64_t dim = 0;
  for (const TensorIndex& index : indices) {
    const auto& v = index.value();
    if (std::holds_alternative<NoneType>(v)) {
      out = out.unsqueeze(dim++);
    } else if (std::holds_alternative<EllipsisType>(v)) {
      dim += x.dim() - named;
    } else if (const int64_t* i = std::get_if<int64_t>(&v)) {
      const int64_t size = out.size(dim);
      TDDP_CHECK(*i >= -size && *i < size, "index: index {} is out of bounds for dimension {} with size {}", *i, dim,
                 size);
      out = out.select(dim, *i);
    } else if (const Slice* s = std::get_if<Slice>(&v)) {
      out = slice(out, dim++, s->start, s->stop, s->step.value_or(1));
    } else {
      const Tensor& t = std::get<Tensor>(v);
      if (t.dtype() == kBool) {
        out = take_mask(out, dim++, t);
      } else {
        // A list of positions along dim 0 keeps a channels-last layout, as PyTorch's (the batch
        // reshuffled, x[perm]); elsewhere the result is row-major.
        out = dim == 0 && t.dim() == 1 ? keep_layout(take_positions(out, dim, t), out) : take_positions(out, dim, t);
        dim += t.dim();
      }
    }
  }
  return out;
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
