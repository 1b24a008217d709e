// Host buffers for ProcessGroupGloo's collectives (internal): Gloo reduces and moves host
// memory, so each collective stages its tensors through contiguous CPU buffers (a CUDA tensor
// is copied to the host after the work queued before the collective, and the result is queued
// back on its device's compute stream), and Gloo's reductions call reduce_function.
#pragma once

#include <gloo/allreduce.h>

#include <vector>

#include "tinyddp/comm/gloo/element_types.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::comm::detail {

using tensor::Tensor;

// c = a op b elementwise, for Gloo's reduction callback (compiled with optimisation: comm/BUILD).
template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  return with_reduce_op(op, [](auto tag) -> gloo::AllreduceOptions::Func {
    constexpr ReduceOp kOp = decltype(tag)::value;
    return [](void* c, const void* a, const void* b, size_t n) {
      T* out = static_cast<T*>(c);
      const T* x = static_cast<const T*>(a);
      const T* y = static_cast<const T*>(b);
      for (size_t i = 0; i < n; ++i) out[i] = combine<kOp>(x[i], y[i]);
    };
  });
}

// The marks of the collective this thread runs now (recorded when it was issued), for
// host_dense; null when it runs none.
void set_running_marks(const std::vector<tensor::cuda::StreamMark>* marks);

// `t`'s elements in a contiguous CPU tensor: t itself when it is one, else a copy. A CUDA
// tensor is copied on a side stream once its device's work queued before the collective has
// run (the running mark), never waiting for the caller's later kernels; without a mark
// (point-to-point), after everything queued on its device so far.
Tensor host_dense(const Tensor& t);

// A contiguous CPU buffer for `t`: t itself when contiguous, else a copy written back later.
struct Staged {
  Tensor original;
  Tensor buffer;
  explicit Staged(const Tensor& t) : original(t), buffer(host_dense(t)) {}
  // To a GPU: queued on its compute stream without waiting (the pinned buffer is kept until
  // the copy ran), so later kernels there see the result.
  void write_back() const;
};

// The tensors of `list` copied end to end into one new flat host buffer.
Tensor flatten_all(const std::vector<Tensor>& list);

}  // namespace tinyddp::comm::detail
