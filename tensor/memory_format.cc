// Memory formats (tensor.h's MemoryFormat): whether a tensor is stored channels last, the
// differentiable copy that stores it so, as PyTorch's torch.channels_last, and the rules by
// which results keep it (PyTorch's suggest_memory_format and TensorIterator's output layout).
#include "tinyddp/tensor/tensor.h"

#include <array>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/iteration_order.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/shape.h"

namespace tinyddp::tensor {

namespace {
// N, H, W, C from the innermost out: C, then W, then H, then N.
constexpr std::array<size_t, 4> kChannelsLastOrder = {1, 3, 2, 0};

bool channels_last_contiguous(const Shape& sizes, const Shape& strides) {
  return sizes.size() == 4 && dense_in_order(sizes, strides, 4, [](size_t k) { return kChannelsLastOrder[k]; });
}

// PyTorch's test of channels-last strides: the strides grow in C, W, H, N order (not
// necessarily without gaps), with its tie-breaks for size-1 dims, where plain row-major wins.
bool channels_last_strides(const Shape& sizes, const Shape& strides) {
  if (sizes.size() != 4 || strides[1] == 0) return false;
  int64_t min = 0;
  for (const size_t d : kChannelsLastOrder) {
    if (sizes[d] == 0 || strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;  // N111-like: row-major
    min = sizes[d] > 1 ? strides[d] * sizes[d] : strides[d];
  }
  return true;
}
}  // namespace

Shape detail::memory_format_strides(const Shape& sizes, MemoryFormat format) {
  if (format != MemoryFormat::kChannelsLast) return contiguous_strides(sizes);
  TDDP_CHECK(sizes.size() == 4, "channels_last needs a 4-D [N, C, H, W] shape, got {}", format_shape(sizes));
  Shape strides(4, 0);
  int64_t stride = 1;
  for (const size_t d : kChannelsLastOrder) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format != MemoryFormat::kChannelsLast) return format == MemoryFormat::kPreserve || is_contiguous();
  return channels_last_contiguous(sizes(), strides());
}

MemoryFormat Tensor::suggest_memory_format() const {
  return channels_last_strides(sizes(), strides()) ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous;
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format != MemoryFormat::kChannelsLast) return format == MemoryFormat::kPreserve ? *this : contiguous();
  TDDP_CHECK(dim() == 4, "contiguous: channels_last needs a 4-D [N, C, H, W] tensor, got shape {}",
             format_shape(sizes()));
  return is_contiguous(MemoryFormat::kChannelsLast) ? *this : clone(MemoryFormat::kChannelsLast);
}

MemoryFormat detail::resolve_format(const Tensor& like, MemoryFormat format) {
  return format == MemoryFormat::kPreserve ? like.suggest_memory_format() : format;
}

MemoryFormat detail::result_format(const Shape& shape, std::initializer_list<const Tensor*> inputs) {
  if (shape.size() != 4) return MemoryFormat::kContiguous;
  // Inputs all of the result's shape and all in one layout: that layout (row-major first).
  bool same_shape = true, all_row_major = true, all_channels_last = true;
  std::array<Shape, 3> strides;  // per input, broadcast to `shape` (0 along broadcast dims)
  TDDP_CHECK(inputs.size() <= strides.size(), "result_format: at most {} inputs", strides.size());
  size_t n = 0;
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    same_shape &= t->sizes() == shape;
    all_row_major &= t->is_contiguous();
    all_channels_last &= t->is_contiguous(MemoryFormat::kChannelsLast);
    const int64_t lead = 4 - t->dim();
    strides[n] = Shape(4, 0);
    for (int64_t d = std::max<int64_t>(lead, 0); d < 4; ++d) {
      const int64_t size = t->size(d - lead);
      strides[n][static_cast<size_t>(d)] = size == 1 && shape[static_cast<size_t>(d)] != 1 ? 0 : t->stride(d - lead);
    }
    ++n;
  }
  if (n == 0 || (same_shape && all_row_major)) return MemoryFormat::kContiguous;
  if (same_shape && all_channels_last) return MemoryFormat::kChannelsLast;
  // Else the dims ordered by the inputs' strides, as TensorIterator orders them, and the result
  // laid out in that order: kept when that is channels last.
  for (size_t k = n; k < strides.size(); ++k) strides[k] = Shape(4, 0);
  const Shape order = iteration_order<3>(shape, strides);
  Shape out_strides(4, 0);
  int64_t stride = 1;
  for (const int64_t d : order) {
    out_strides[static_cast<size_t>(d)] = stride;
    stride *= shape[static_cast<size_t>(d)];
  }
  return !row_major(shape, out_strides) && channels_last_contiguous(shape, out_strides) ? MemoryFormat::kChannelsLast
                                                                                        : MemoryFormat::kContiguous;
}

Tensor detail::keep_layout(const Tensor& out, const Tensor& input) {
  const bool channels_last = out.dim() == 4 && input.suggest_memory_format() == MemoryFormat::kChannelsLast;
  return channels_last ? out.contiguous(MemoryFormat::kChannelsLast) : out;
}

Tensor detail::new_output(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  return format == MemoryFormat::kContiguous ? new_output(shape, dtype, device)
                                             : empty(shape, TensorOptions().dtype(dtype).device(device), format);
}

}  // namespace tinyddp::tensor
