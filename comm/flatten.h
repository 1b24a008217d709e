// Flattening a list of tensors into one buffer and back, as the coalesced collectives do
// (PyTorch: _flatten_dense_tensors / _unflatten_dense_tensors): the Gloo backend's list
// allreduce and DDP's coalesced broadcast of the module's state.
#pragma once

#include <vector>

#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::comm {

using tensor::Tensor;

// Copies the tensors of `list` end to end into `flat` (which holds at least their elements).
inline void flatten_into(const std::vector<Tensor>& list, const Tensor& flat) {
  int64_t offset = 0;
  for (const Tensor& t : list) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
}

// Copies consecutive slices of `flat` back into the tensors of `list`.
inline void unflatten_into(const Tensor& flat, const std::vector<Tensor>& list) {
  int64_t offset = 0;
  for (const Tensor& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
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
