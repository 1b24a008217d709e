// Flat buffers: the one layout rule (flat_views), and flattening a list of tensors into one
// buffer and back, as the coalesced collectives do (PyTorch: _flatten_dense_tensors /
// _unflatten_dense_tensors): the Gloo backend's list allreduce and DDP's coalesced broadcast
// of the module's state.
#pragma once

#include <vector>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::comm {

using tensor::Tensor;

// The layout of every flat buffer in tinyddp (DDP's buckets, ZeRO's parameter shards,
// PowerSGD's P and Q memories, the coalesced collectives): tensors of the given shapes end to
// end, in order, each row-major. Returns those slots as views of `flat` (PyTorch's
// initialize_bucket_views).
inline std::vector<Tensor> flat_views(const Tensor& flat, const std::vector<tensor::Shape>& shapes) {
  std::vector<Tensor> views;
  views.reserve(shapes.size());
  int64_t offset = 0;
  for (const tensor::Shape& shape : shapes) {
    const int64_t numel = tensor::shape_numel(shape);
    views.push_back(flat.narrow(0, offset, numel).view(shape));
    offset += numel;
  }
  return views;
}

// The slots of `like`'s tensors (their shapes) in `flat`.
inline std::vector<Tensor> flat_views(const Tensor& flat, const std::vector<Tensor>& like) {
  std::vector<tensor::Shape> shapes;
  shapes.reserve(like.size());
  for (const Tensor& t : like) shapes.push_back(t.sizes());
  return flat_views(flat, shapes);
}

// Copies the tensors of `list` end to end into `flat` (which holds at least their elements).
inline void flatten_into(const std::vector<Tensor>& list, const Tensor& flat) {
  const std::vector<Tensor> slots = flat_views(flat, list);
  for (size_t k = 0; k < list.size(); ++k) slots[k].copy_(list[k]);
}

// Copies consecutive slices of `flat` back into the tensors of `list`.
inline void unflatten_into(const Tensor& flat, const std::vector<Tensor>& list) {
  const std::vector<Tensor> slots = flat_views(flat, list);
  for (size_t k = 0; k < list.size(); ++k) list[k].copy_(slots[k]);
}

// When the CPU tensors of `list` lie end to end in one storage, each contiguous (the rows of one
// contiguous tensor: fully_shard's gathered buffer), a flat view over all of them, which a
// collective can fill in place; else an undefined tensor.
inline Tensor end_to_end_view(const std::vector<Tensor>& list) {
  if (list.empty() || !list.front().is_cpu()) return Tensor();
  int64_t next = list.front().storage_offset(), total = 0;
  for (const Tensor& t : list) {
    if (!t.is_cpu() || !t.is_contiguous() || t.dtype() != list.front().dtype() ||
        !t.storage().is_same(list.front().storage()) || t.storage_offset() != next)
      return Tensor();
    next += t.numel();
    total += t.numel();
  }
  return Tensor::make(list.front().storage(), {total}, {1}, list.front().storage_offset(), list.front().dtype());
}

// Whether a and b are the same contiguous CPU elements (one storage, one offset, one count):
// a collective's output that is its own input (the in-place forms).
inline bool same_elements(const Tensor& a, const Tensor& b) {
  return a.is_cpu() && b.is_cpu() && a.is_contiguous() && b.is_contiguous() && a.dtype() == b.dtype() &&
         a.numel() == b.numel() && a.storage().is_same(b.storage()) && a.storage_offset() == b.storage_offset();
}

// A new flat tensor of `list`'s dtype on `list`'s device, holding the tensors end to end.
inline Tensor flatten(const std::vector<Tensor>& list) {
  int64_t total = 0;
  for (const Tensor& t : list) total += t.numel();
  const Tensor flat = tensor::empty({total}, tensor::TensorOptions(list.front().dtype()).device(list.front().device()));
  flatten_into(list, flat);
  return flat;
}

}  // namespace tinyddp::comm
