// Embedding lookups on the GPU (backends/cuda/kernels.h): the forward one thread per output element (a
// gather of weight rows). The backward sorts the ids (CUB's radix sort, which is stable, so each
// id's rows stay in the order they came) and gives each column of each id's row to one thread,
// which sums that id's gradient rows in that order in float (double for float64) and stores the
// sum: no atomics, so the same bits at every run, and in float32 and float64 the CPU's bits (it
// adds in the same order, embedding.cc).
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

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

__global__ void iota_kernel(int32_t* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<int32_t>(i);
  }
}

// sorted [n]: the ids in ascending order; position [n]: the row of grad each came from. The
// thread of element (i, k) works only when i starts its id's run.
template <typename T, typename A>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* sorted, const int32_t* position, T* out,
                                          int64_t n, int64_t c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * c; e += stride) {
    const int64_t i = e / c, k = e % c, id = sorted[i];
    if (i > 0 && sorted[i - 1] == id) continue;
    A sum = 0;
    for (int64_t j = i; j < n && sorted[j] == id; ++j) sum += static_cast<A>(load(grad[position[j] * c + k]));
    out[id * c + k] = store<T>(sum);
  }
}

// The scratch's parts, each on a 256-byte boundary: sorted ids, positions in and out, CUB's own.
struct Scratch {
  size_t sorted = 0, positions = 0, positions_out = 0, cub = 0, cub_bytes = 0, total = 0;
};
size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
int id_bits(int64_t rows) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < rows) ++bits;
  return bits;
}
cudaError_t plan_scratch(int64_t n, int64_t rows, Scratch* s) {
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, s->cub_bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, id_bits(rows));
  s->positions = round_up(static_cast<size_t>(n) * sizeof(int64_t));
  s->positions_out = s->positions + round_up(static_cast<size_t>(n) * sizeof(int32_t));
  s->cub = s->positions_out + round_up(static_cast<size_t>(n) * sizeof(int32_t));
  s->total = s->cub + round_up(s->cub_bytes);
  return status;
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

size_t embedding_backward_scratch_bytes(int64_t n, int64_t rows) {
  Scratch s;
  return plan_scratch(n, rows, &s) == cudaSuccess ? s.total : 0;
}

int embedding_backward_rows(const void* grad, const int64_t* ids, int dtype, void* out, int64_t n, int64_t c,
                            int64_t rows, void* scratch, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      return cudaErrorInvalidValue;  // tensor/native/embedding.cc refuses non-floating weights
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      if (n == 0 || c == 0) return cudaSuccess;
      const auto s = static_cast<cudaStream_t>(stream);
      Scratch plan;
      cudaError_t status = plan_scratch(n, rows, &plan);
      if (status != cudaSuccess) return status;
      auto* base = static_cast<char*>(scratch);
      auto* sorted = reinterpret_cast<int64_t*>(base + plan.sorted);
      auto* positions = reinterpret_cast<int32_t*>(base + plan.positions);
      auto* positions_out = reinterpret_cast<int32_t*>(base + plan.positions_out);
      iota_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, s>>>(positions, n);
      status = cub::DeviceRadixSort::SortPairs(base + plan.cub, plan.cub_bytes, ids, sorted, positions, positions_out,
                                               static_cast<int>(n), 0, id_bits(rows), s);
      if (status != cudaSuccess) return status;
      embedding_backward_kernel<T, A><<<grid_stride_blocks(n * c, kThreads), kThreads, 0, s>>>(
          static_cast<const T*>(grad), sorted, positions_out, static_cast<T*>(out), n, c);
      return cudaGetLastError();
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
