// Embedding lookups on the GPU (backends/cuda/kernels.h): the forward one thread per output element (a
// gather of weight rows); the backward adds each gradient element onto its id's row with an
// atomic add into a float (double for float64) accumulator, so repeated ids sum in any order.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/kernels.h"

namespace tinyddp::tensor::cuda::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const T* weight, const int64_t* ids, T* out, int64_t n, int64_t c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c; i += stride) {
    out[i] = weight[ids[i / c] * c + i % c];
  }
}

template <typename T, typename A>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* ids, A* acc, int64_t n, int64_t c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c; i += stride) {
    atomicAdd(acc + ids[i / c] * c + i % c, static_cast<A>(load(grad[i])));
  }
}

}  // namespace

int embedding_rows(const void* weight, const int64_t* ids, int dtype, void* out, int64_t n, int64_t c, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0 || c == 0) return cudaSuccess;
    embedding_kernel<T><<<grid_stride_blocks(n * c, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(weight), ids, static_cast<T*>(out), n, c);
    return cudaGetLastError();
  });
}

int embedding_backward_rows(const void* grad, const int64_t* ids, int dtype, void* acc, int64_t n, int64_t c,
                            void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      return cudaErrorInvalidValue;  // tensor/native/embedding.cc refuses non-floating weights
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      if (n == 0 || c == 0) return cudaSuccess;
      embedding_backward_kernel<T, A>
          <<<grid_stride_blocks(n * c, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<const T*>(grad), ids, static_cast<A*>(acc), n, c);
      return cudaGetLastError();
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
