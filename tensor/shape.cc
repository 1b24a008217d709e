// Shape arithmetic (shape.h): formatting, contiguous strides, NumPy broadcasting, and the
// strides of a view when the data allows one.
#include "tinyddp/tensor/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

std::string format_shape(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape, const char* op) {
  int64_t numel = 1;
  for (int64_t size : shape) {
    TDDP_CHECK(size >= 0, "{}: negative dimension {} in shape {}", op, size, format_shape(shape));
    TDDP_CHECK(!__builtin_mul_overflow(numel, size, &numel), "{}: shape {} has more elements than int64 can count", op,
               format_shape(shape));
  }
  return numel;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t range = std::max<int64_t>(ndim, 1);
  TDDP_CHECK(dim >= -range && dim < range,
             "{}: dimension out of range (expected to be in range of [{}, {}], but got {})", op, -range, range - 1,
             dim);
  return dim < 0 ? dim + range : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    // Align from the right: missing leading dims count as 1.
    const int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    TDDP_CHECK(sa == sb || sa == 1 || sb == 1,
               "{}: shapes {} and {} cannot be broadcast together (size {} vs {} at dimension {} of the result)", op,
               format_shape(a), format_shape(b), sa, sb, i);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

bool is_expandable_to(const Shape& shape, const Shape& target) {
  if (shape.size() > target.size()) return false;
  const size_t lead = target.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && shape[i] != target[lead + i]) return false;
  }
  return true;
}

Shape infer_size(const Shape& requested, int64_t numel, const char* op) {
  Shape out = requested;
  int64_t known = 1;
  std::optional<size_t> infer_at;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TDDP_CHECK(!infer_at, "{}: only one dimension can be inferred (-1), got shape {}", op, format_shape(requested));
      infer_at = i;
    } else {
      TDDP_CHECK(out[i] >= 0, "{}: invalid size {} in shape {}", op, out[i], format_shape(requested));
      known *= out[i];
    }
  }
  if (infer_at) {
    TDDP_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for input of size {}", op,
               format_shape(requested), numel);
    out[*infer_at] = numel / known;
  }
  TDDP_CHECK(shape_numel(out, op) == numel, "{}: shape {} is invalid for input of size {}", op, format_shape(requested),
             numel);
  return out;
}

std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  const int64_t numel = shape_numel(sizes);
  if (numel == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  // Walk the old dims from the innermost outwards, grouping them into "chunks" that are
  // contiguous with each other (stride[d] == stride[d+1] * size[d+1]). Each chunk must be
  // covered exactly by a run of new dims; inside a run the new strides are row-major
  // relative to the chunk's innermost stride.
  Shape new_strides(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1;  // elements in the current old chunk
  int64_t view_numel = 1;    // elements in the new dims assigned to it so far
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    const bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace tinyddp::tensor
