// CPU embedding lookups (backends/cpu/backend.h): the forward copies one weight row per id; the backward
// adds each gradient row onto its id's row, so repeated ids sum. On the intra-op threads: the
// forward by rows, the backward by ranges of columns (each column summed over the ids in order,
// so repeated ids never race and the bits do not depend on the thread count).
#include <algorithm>
#include <cstring>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/loops.h"

namespace tinyddp::tensor::cpu {

void CpuBackend::embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  dispatch_floating(weight.dtype(), "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = ids.numel(), c = weight.size(1);
    const int64_t* id = ids.data_ptr<int64_t>();
    const T* w = weight.data_ptr<T>();
    T* o = out.data_ptr<T>();
    parallel_rows(n, c, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) std::memcpy(o + i * c, w + id[i] * c, static_cast<size_t>(c) * sizeof(T));
    });
  });
}

void CpuBackend::embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) {
  fill(grad_weight, 0.0);
  dispatch_floating(grad_weight.dtype(), "embedding backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t n = ids.numel(), c = grad_weight.size(1);
    const int64_t* id = ids.data_ptr<int64_t>();
    const T* g = grad_out.data_ptr<T>();
    T* gw = grad_weight.data_ptr<T>();
    parallel_for(0, c, std::max<int64_t>(16, kElementwiseGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t from, int64_t to) {
                   for (int64_t i = 0; i < n; ++i) {
                     T* row = gw + id[i] * c;
                     const T* src = g + i * c;
                     for (int64_t k = from; k < to; ++k)
                       row[k] = static_cast<T>(static_cast<C>(row[k]) + static_cast<C>(src[k]));
                   }
                 });
  });
}

}  // namespace tinyddp::tensor::cpu
