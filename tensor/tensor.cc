// Tensor metadata and the view operations. Every view builds a new TensorImpl over the same
// Storage; nothing here copies data except contiguous(), clone() and reshape()'s fallback.
// Each differentiable method records its backward formula right after its forward.
#include "tinyddp/tensor/tensor.h"

#include <algorithm>
#include <numeric>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/internal/iteration_order.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/native/graph_formulas.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

namespace {

// Marks `view` as a view of `from`: its base is from's base when from is a view that has one,
// else from itself.
void mark_view(const Tensor& from, TensorImpl& view) {
  const TensorImpl& source = *from.impl();
  view.is_view = true;
  view.view_version = view.storage.version();
  view.view_base = source.is_view && !source.view_base.expired() ? source.view_base : from.impl_ptr();
  view.view_made_without_grad = !GradMode::is_enabled();
}

// A view of `base` with new geometry; shares storage (and nothing else) with it. Not
// `differentiable` (detach()'s alias): no base, so its in-place ops are its own.
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t storage_offset, bool differentiable = true) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->storage_offset = storage_offset;
  impl->dtype = base.dtype();
  if (differentiable) {
    mark_view(base, *impl);
  } else {
    impl->is_view = true;
    impl->view_version = impl->storage.version();
  }
  return Tensor(std::move(impl));
}

// Records a view whose elements are the input's in the same row-major order (view, squeeze,
// unsqueeze, identity aliases): grad_in = grad_out reshaped to the input's shape.
Tensor record_reshape(const Tensor& input, const Tensor& out, const char* node) {
  if (needs_grad(input)) {
    record_op(node, out, {input},
              [shape = input.sizes()](const Tensor& g) { return std::vector<Tensor>{g.reshape(shape)}; });
  }
  return out;
}

}  // namespace

Tensor Tensor::make(Storage storage, Shape sizes, Shape strides, int64_t storage_offset, DType dtype) {
  TDDP_CHECK(sizes.size() == strides.size(), "as_strided: got {} sizes {} but {} strides {}", sizes.size(),
             format_shape(sizes), strides.size(), format_shape(strides));
  TDDP_CHECK(storage_offset >= 0, "as_strided: negative storage offset {}", storage_offset);
  const int64_t numel = shape_numel(sizes, "as_strided");
  // The furthest element the geometry touches must lie inside the storage.
  int64_t last = storage_offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TDDP_CHECK(strides[i] >= 0, "as_strided: negative stride {} in strides {}", strides[i], format_shape(strides));
    if (numel > 0) last += (sizes[i] - 1) * strides[i];
  }
  const int64_t needed_bytes = numel == 0 ? 0 : (last + 1) * static_cast<int64_t>(tensor::element_size(dtype));
  TDDP_CHECK(needed_bytes <= static_cast<int64_t>(storage.nbytes()),
             "as_strided: sizes {}, strides {}, storage offset {} and element size {} need a storage of {} bytes, "
             "but the storage holds {} bytes",
             format_shape(sizes), format_shape(strides), storage_offset, tensor::element_size(dtype), needed_bytes,
             storage.nbytes());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->storage_offset = storage_offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t dim) const {
  TDDP_CHECK(this->dim() > 0, "size: a 0-d tensor has no dimension {}", dim);
  return sizes()[wrap_dim(dim, this->dim(), "size")];
}

int64_t Tensor::stride(int64_t dim) const {
  TDDP_CHECK(this->dim() > 0, "stride: a 0-d tensor has no dimension {}", dim);
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

int64_t Tensor::numel() const { return shape_numel(sizes()); }

bool Tensor::is_contiguous() const { return row_major(sizes(), strides()); }

void* Tensor::raw_data_ptr() const {
  char* base = static_cast<char*>(storage().data());
  if (base == nullptr) {
    TDDP_CHECK(numel() == 0 || !storage().defined(),
               "a tensor of shape {} reads a storage whose bytes were freed (Storage::free_bytes: a parameter of a "
               "fully sharded unit between its forward and its backward)",
               format_shape(sizes()));
    return nullptr;
  }
  return base + storage_offset() * static_cast<int64_t>(element_size());
}

void Tensor::check_dtype(DType expected, const char* op) const {
  TDDP_CHECK(dtype() == expected, "{}: expected a tensor of dtype {} but it has dtype {}", op, dtype_name(expected),
             dtype_name(dtype()));
}

namespace detail {

double item_as_double(const Tensor& t) {
  TDDP_CHECK(t.numel() == 1, "item: a tensor with {} elements (shape {}) cannot be converted to a scalar", t.numel(),
             format_shape(t.sizes()));
  NoGradGuard no_grad;
  const Tensor value = t.to(kCPU).to(kFloat64);
  return *value.data_ptr<double>();
}

int64_t item_as_int64(const Tensor& t) {
  TDDP_CHECK(t.numel() == 1, "item: a tensor with {} elements (shape {}) cannot be converted to a scalar", t.numel(),
             format_shape(t.sizes()));
  NoGradGuard no_grad;
  const Tensor value = t.to(kCPU).to(kInt64);
  return *value.data_ptr<int64_t>();
}

}  // namespace detail

// ---- views -------------------------------------------------------------------------------

Tensor Tensor::view(const Shape& sizes) const {
  const Shape new_sizes = infer_size(sizes, numel(), "view");
  const std::optional<Shape> new_strides = view_strides(this->sizes(), strides(), new_sizes);
  TDDP_CHECK(new_strides.has_value(),
             "view: shape {} is not compatible with the input's sizes {} and strides {} (at least one dimension "
             "spans across two contiguous subspaces); use reshape() instead",
             format_shape(sizes), format_shape(this->sizes()), format_shape(strides()));
  return record_reshape(*this, make_view(*this, new_sizes, *new_strides, storage_offset()), "ViewBackward");
}

Tensor Tensor::reshape(const Shape& sizes) const {
  const Shape new_sizes = infer_size(sizes, numel(), "reshape");
  if (new_sizes == this->sizes()) return *this;  // nothing to do (also nothing to record)
  if (view_strides(this->sizes(), strides(), new_sizes)) return view(new_sizes);
  return clone(MemoryFormat::kContiguous).view(new_sizes);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  TDDP_CHECK(this->dim() > 0, "narrow: cannot narrow a 0-d tensor");
  const int64_t d = wrap_dim(dim, this->dim(), "narrow");
  const int64_t size = sizes()[d];
  if (start < 0) start += size;
  TDDP_CHECK(start >= 0 && start <= size, "narrow: start {} is out of range for dimension {} of size {}", start, d,
             size);
  TDDP_CHECK(length >= 0 && start + length <= size,
             "narrow: start ({}) + length ({}) exceeds dimension {} of size {} (shape {})", start, length, d, size,
             format_shape(sizes()));
  Shape new_sizes = sizes();
  new_sizes[d] = length;
  const Tensor out = make_view(*this, new_sizes, strides(), storage_offset() + start * strides()[d]);
  // grad_out: self's shape with `length` at d -> grad_self: zeros with grad_out in the slice
  if (needs_grad(*this)) {
    record_op("NarrowBackward", out, {*this}, [shape = sizes(), d, start, length](const Tensor& g) {
      return std::vector<Tensor>{
          detail::embed_slice(g, shape, [d, start, length](const Tensor& t) { return t.narrow(d, start, length); })};
    });
  }
  return out;
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  TDDP_CHECK(this->dim() > 0, "select: cannot select on a 0-d tensor");
  const int64_t d = wrap_dim(dim, this->dim(), "select");
  const int64_t size = sizes()[d];
  TDDP_CHECK(index >= -size && index < size, "select: index {} is out of range for dimension {} with size {}", index, d,
             size);
  if (index < 0) index += size;
  Shape new_sizes = sizes();
  Shape new_strides = strides();
  new_sizes.erase(new_sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  const Tensor out = make_view(*this, new_sizes, new_strides, storage_offset() + index * strides()[d]);
  // grad_out: self's shape without d -> grad_self: zeros with grad_out at `index` along d
  if (needs_grad(*this)) {
    record_op("SelectBackward", out, {*this}, [shape = sizes(), d, index](const Tensor& g) {
      return std::vector<Tensor>{
          detail::embed_slice(g, shape, [d, index](const Tensor& t) { return t.select(d, index); })};
    });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return record_reshape(*this, make_view(*this, sizes(), strides(), storage_offset()), "AliasBackward");
  }
  const int64_t a = wrap_dim(dim0, dim(), "transpose");
  const int64_t b = wrap_dim(dim1, dim(), "transpose");
  Shape new_sizes = sizes();
  Shape new_strides = strides();
  std::swap(new_sizes[a], new_sizes[b]);
  std::swap(new_strides[a], new_strides[b]);
  const Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  // grad_self = grad_out with the same two dims swapped back
  if (needs_grad(*this)) {
    record_op("TransposeBackward", out, {*this},
              [a, b](const Tensor& g) { return std::vector<Tensor>{g.transpose(a, b)}; });
  }
  return out;
}

Tensor Tensor::t() const {
  TDDP_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dimensions, but it has {} (shape {}); use transpose()", dim(),
             format_shape(sizes()));
  if (dim() < 2) return record_reshape(*this, make_view(*this, sizes(), strides(), storage_offset()), "AliasBackward");
  return transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  TDDP_CHECK(static_cast<int64_t>(dims.size()) == dim(),
             "permute: number of dims {} does not match the tensor's {} dimensions (shape {})", format_shape(dims),
             dim(), format_shape(sizes()));
  Shape new_sizes(dims.size());
  Shape new_strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    TDDP_CHECK(!seen[d], "permute: dimension {} appears more than once in {}", d, format_shape(dims));
    seen[d] = true;
    new_sizes[i] = sizes()[d];
    new_strides[i] = strides()[d];
  }
  const Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  // out dim i is self dim dims[i]: grad_self = grad_out permuted by the inverse permutation
  if (needs_grad(*this)) {
    Shape inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
    record_op("PermuteBackward", out, {*this},
              [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::expand(const Shape& sizes) const {
  TDDP_CHECK(sizes.size() >= this->sizes().size(),
             "expand: the number of sizes {} ({}) must be at least the tensor's number of dimensions ({}, shape {})",
             format_shape(sizes), sizes.size(), dim(), format_shape(this->sizes()));
  const size_t lead = sizes.size() - this->sizes().size();
  Shape new_sizes(sizes.size());
  Shape new_strides(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      TDDP_CHECK(sizes[i] >= 0, "expand: size -1 is not allowed in a new leading dimension (sizes {})",
                 format_shape(sizes));
      new_sizes[i] = sizes[i];
      new_strides[i] = 0;
      continue;
    }
    const int64_t old_size = this->sizes()[i - lead];
    const int64_t old_stride = strides()[i - lead];
    const int64_t want = sizes[i] == -1 ? old_size : sizes[i];
    TDDP_CHECK(want == old_size || old_size == 1,
               "expand: the expanded size {} must match the existing size {} at non-singleton dimension {} "
               "(target sizes {}, tensor shape {})",
               want, old_size, i, format_shape(sizes), format_shape(this->sizes()));
    new_sizes[i] = want;
    new_strides[i] = want == old_size ? old_stride : 0;
  }
  const Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  // grad_out: expanded shape -> grad_self: summed over the expanded dims
  if (needs_grad(*this)) {
    record_op("ExpandBackward", out, {*this},
              [shape = this->sizes()](const Tensor& g) { return std::vector<Tensor>{tensor::sum_to_size(g, shape)}; });
  }
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t start = wrap_dim(start_dim, dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, dim(), "flatten");
  TDDP_CHECK(start <= end, "flatten: start_dim ({}) must not come after end_dim ({})", start, end);
  Shape new_sizes(sizes().begin(), sizes().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= sizes()[d];
  new_sizes.push_back(merged);
  new_sizes.insert(new_sizes.end(), sizes().begin() + end + 1, sizes().end());
  return reshape(new_sizes);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const int64_t d = wrap_dim(dim, this->dim() + 1, "unsqueeze");
  Shape new_sizes = sizes();
  Shape new_strides = strides();
  // The new dim's stride is irrelevant (size 1); use the row-major value for readability.
  const int64_t stride = d < this->dim() ? sizes()[d] * strides()[d] : 1;
  new_sizes.insert(new_sizes.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride);
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()), "UnsqueezeBackward");
}

Tensor Tensor::squeeze() const {
  Shape new_sizes;
  Shape new_strides;
  for (int64_t d = 0; d < dim(); ++d) {
    if (sizes()[d] == 1) continue;
    new_sizes.push_back(sizes()[d]);
    new_strides.push_back(strides()[d]);
  }
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()), "SqueezeBackward");
}

Tensor Tensor::squeeze(int64_t dim) const {
  if (this->dim() == 0) {
    wrap_dim(dim, 0, "squeeze");
    return record_reshape(*this, make_view(*this, sizes(), strides(), storage_offset()), "SqueezeBackward");
  }
  const int64_t d = wrap_dim(dim, this->dim(), "squeeze");
  Shape new_sizes = sizes();
  Shape new_strides = strides();
  if (sizes()[d] == 1) {
    new_sizes.erase(new_sizes.begin() + d);
    new_strides.erase(new_strides.begin() + d);
  }
  return record_reshape(*this, make_view(*this, new_sizes, new_strides, storage_offset()), "SqueezeBackward");
}

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, std::optional<int64_t> storage_offset) const {
  const Tensor out = make(storage(), sizes, strides, storage_offset.value_or(this->storage_offset()), dtype());
  mark_view(*this, *out.impl());
  if (!needs_grad(*this)) return out;
  // grad_self: every output element's gradient added at its storage position, read back
  // through self's geometry. Needs self to be free of self-overlap (no stride-0 dims).
  for (int64_t d = 0; d < dim(); ++d) {
    TDDP_CHECK(this->sizes()[d] <= 1 || this->strides()[d] != 0,
               "as_strided: cannot compute the gradient through a tensor whose elements overlap (shape {}, strides "
               "{}); call contiguous() first",
               format_shape(this->sizes()), format_shape(this->strides()));
  }
  record_op("AsStridedBackward", out, {*this},
            [in = detail::Geometry{this->sizes(), this->strides(), this->storage_offset()},
             at = detail::Geometry{out.sizes(), out.strides(), out.storage_offset()},
             span = static_cast<int64_t>(storage().nbytes() / element_size())](const Tensor& g) {
              return std::vector<Tensor>{detail::restride(g, at, in, span)};
            });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(MemoryFormat::kContiguous); }

Tensor Tensor::clone(MemoryFormat format) const {
  Tensor out = empty(sizes(), TensorOptions().dtype(dtype()).device(device()), detail::resolve_format(*this, format));
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  // grad_self = grad_out
  if (needs_grad(*this))
    record_op("CloneBackward", out, {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

void Tensor::set_data(const Tensor& other) const {
  TDDP_CHECK(other.defined(), "set_data: the new data is an undefined tensor");
  TensorImpl* self = checked();
  self->storage = other.storage();
  self->sizes = other.sizes();
  self->strides = other.strides();
  self->storage_offset = other.storage_offset();
  self->dtype = other.dtype();
}

Tensor Tensor::detach() const { return make_view(*this, sizes(), strides(), storage_offset(), false); }

// ---- conversion and in-place ops (kernels live in native/ and backends/cpu/) --------------------------

namespace {
// A copy of `t` converted to another dtype or device; grad_t = grad_out converted back.
Tensor converted_copy(const Tensor& t, DType dtype, Device device, bool non_blocking = false) {
  // A non-blocking copy to the host lands in pinned memory, as PyTorch's does.
  const bool pinned_landing = non_blocking && device.type == DeviceType::kCPU && t.is_cuda();
  Tensor out = pinned_landing ? cuda::empty_pinned(t.sizes(), dtype, "to")
                              : empty(t.sizes(), TensorOptions().dtype(dtype).device(device),
                                      detail::resolve_format(t, MemoryFormat::kPreserve));
  {
    NoGradGuard no_grad;
    out.copy_(t, non_blocking);
  }
  if (needs_grad(t) && is_floating_point(dtype)) {
    record_op("ToCopyBackward", out, {t}, [from_dtype = t.dtype(), from_device = t.device()](const Tensor& g) {
      return std::vector<Tensor>{g.to(from_dtype).to(from_device)};
    });
  }
  return out;
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  return converted_copy(*this, dtype, device());
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  if (device == this->device()) return *this;
  return converted_copy(*this, dtype(), device, non_blocking);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tinyddp::tensor
