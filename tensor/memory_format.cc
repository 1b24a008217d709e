// Memory formats (tensor.h's MemoryFormat): whether a tensor is stored channels last, and the
// differentiable copy that stores it so, as PyTorch's torch.channels_last.
#include "tinyddp/tensor/tensor.h"

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/shape.h"

namespace tinyddp::tensor {

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format != MemoryFormat::kChannelsLast) return format == MemoryFormat::kPreserve || is_contiguous();
  if (dim() != 4) return false;
  // N, H, W, C from the innermost out: C, then W, then H, then N.
  int64_t expected = 1;
  for (const int64_t d : {1, 3, 2, 0}) {
    const int64_t size = sizes()[static_cast<size_t>(d)];
    if (size == 0) return true;
    if (size == 1) continue;
    if (strides()[static_cast<size_t>(d)] != expected) return false;
    expected *= size;
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  return is_contiguous(MemoryFormat::kChannelsLast) && !is_contiguous() ? MemoryFormat::kChannelsLast
                                                                        : MemoryFormat::kContiguous;
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format != MemoryFormat::kChannelsLast) return format == MemoryFormat::kPreserve ? *this : contiguous();
  TDDP_CHECK(dim() == 4, "contiguous: channels_last needs a 4-D [N, C, H, W] tensor, got shape {}",
             format_shape(sizes()));
  if (is_contiguous(MemoryFormat::kChannelsLast)) return *this;
  // Stored as [N, H, W, C], seen as [N, C, H, W]; permute and contiguous carry the gradient.
  return permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

}  // namespace tinyddp::tensor
