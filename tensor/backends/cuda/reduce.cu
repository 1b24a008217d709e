// Reductions, softmax and layer norm on the GPU, over the contiguous layouts that backend.cc prepares
// (the same plans as the CPU's tensor/backends/cpu/reduce.cc):
// - rows: [outer, inner] with the reduced elements of one output adjacent. One block of
//   kThreads threads per row (grid-striding over rows): each thread accumulates a strided
//   share of the row, then the block combines the partial results in shared memory.
// - columns: [rows, inner], reducing over the leading rows (a bias gradient's sum over the
//   batch). Blocks of 32 columns x 8 row lanes, each over a chunk of the rows, then the
//   chunks' partial sums added by a second launch (sum_columns_kernel): neighbouring threads
//   read neighbouring addresses, so every load is coalesced and no transposing copy is
//   needed, and a few columns over many rows still fill the GPU.
// Sums accumulate in float for the floating types (double for float64) and in int64 for
// integers and bools, as PyTorch's CUDA reductions do.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/kernels.h"

namespace tinyddp::tensor::cuda::kernels {

namespace {

constexpr int kThreads = 256;  // a power of two: block_reduce halves it

template <typename T>
using acc_t =
    std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, double>, double, float>>;

int grid_for(int64_t items) { return static_cast<int>(items < 65535 ? (items > 0 ? items : 1) : 65535); }

// Combines every thread's `v` with `op`; all threads get the result. `buf` holds kThreads.
template <typename A, typename Op>
__device__ A block_reduce(A v, A* buf, Op op) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const A result = buf[0];
  __syncthreads();  // buf is reused by the next call
  return result;
}

struct Plus {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

template <typename T, typename O>
__global__ void sum_rows_kernel(const T* x, O* out, int64_t outer, int64_t inner, acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const T* row = x + r * inner;
    A acc = 0;
    for (int64_t i = threadIdx.x; i < inner; i += kThreads) acc += static_cast<A>(load(row[i]));
    acc = block_reduce(acc, buf, Plus{});
    if (threadIdx.x == 0) out[r] = store<O>(acc * scale);
  }
}

// A block sums a tile of kTileColumns adjacent columns over one chunk of the rows: lane
// (tx, ty) adds rows ty, ty + kTileRows, ... of column tx (each warp reads 32 adjacent
// addresses), then lane ty = 0 adds the kTileRows partial sums in order. Written to
// out[chunk * inner + column], times scale: the result itself when there is one chunk, else a
// chunk's partial sums, which a second launch of the same kernel adds up over the chunks (a
// fixed order either way, so the bits do not depend on timing).
constexpr int kTileColumns = 32, kTileRows = 8;

template <typename T, typename O>
__global__ void sum_columns_kernel(const T* x, O* out, int64_t rows, int64_t inner, int64_t chunk_rows,
                                   acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A buf[kTileRows][kTileColumns + 1];
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  const int64_t tiles = (inner + kTileColumns - 1) / kTileColumns;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t j = tile * kTileColumns + threadIdx.x;
    A acc = 0;
    if (j < inner) {
      for (int64_t i = first + threadIdx.y; i < last; i += kTileRows) acc += static_cast<A>(load(x[i * inner + j]));
    }
    buf[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
      A total = 0;
      for (int r = 0; r < kTileRows; ++r) total += buf[r][threadIdx.x];
      out[static_cast<int64_t>(blockIdx.y) * inner + j] = store<O>(total * scale);
    }
    __syncthreads();  // buf is reused by the next tile
  }
}

// A candidate maximum and its position in the row. NaN wins over everything (the first NaN
// over later ones), a larger value wins, and ties go to the smaller index: the CPU's answer.
template <typename C>
struct Best {
  C value;
  int64_t index;
};

struct KeepBetter {
  template <typename C>
  __device__ Best<C> operator()(Best<C> a, Best<C> b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index) ? a : b;
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

template <typename T>
__global__ void max_rows_kernel(const T* x, T* values, int64_t* indices, int64_t outer, int64_t inner) {
  using C = compute_t<T>;
  __shared__ Best<C> buf[kThreads];
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const T* row = x + r * inner;
    Best<C> best{C(0), -1};
    for (int64_t i = threadIdx.x; i < inner; i += kThreads) best = KeepBetter{}(best, Best<C>{load(row[i]), i});
    best = block_reduce(best, buf, KeepBetter{});
    if (threadIdx.x == 0) {
      values[r] = row[best.index];
      indices[r] = best.index;
    }
  }
}

struct Larger {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  }
};

// One block per row of n elements: the row's maximum, the sum of exp(x - max), then the
// outputs, all in the accumulation type.
template <typename T>
__global__ void softmax_rows_kernel(const T* x, T* out, int64_t outer, int64_t n, bool log_softmax) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < outer; r += gridDim.x) {
    const T* row = x + r * n;
    T* out_row = out + r * n;
    A m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) m = Larger{}(m, static_cast<A>(load(row[i])));
    m = block_reduce(m, buf, Larger{});
    A total = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) total += exp(static_cast<A>(load(row[i])) - m);
    total = block_reduce(total, buf, Plus{});
    const A log_total = log(total);
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const A shifted = static_cast<A>(load(row[i])) - m;
      out_row[i] = store<T>(log_softmax ? shifted - log_total : exp(shifted) / total);
    }
  }
}

// Causal softmax, one block per row r of a [M, N] matrix (rows of all matrices in turn): the
// first kept = r % M + N - M + 1 columns get softmax(scale * x), the rest 0. The backward:
// scale * y * (g - sum(g * y)) over the kept columns, 0 beyond.
template <typename T>
__global__ void causal_softmax_kernel(const T* x, T* out, int64_t rows, int64_t m, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    T* out_row = out + r * n;
    const int64_t kept = r % m + n - m + 1;
    A top = -INFINITY;
    for (int64_t i = threadIdx.x; i < kept; i += kThreads) top = Larger{}(top, static_cast<A>(load(row[i])) * scale);
    top = block_reduce(top, buf, Larger{});
    A total = 0;
    for (int64_t i = threadIdx.x; i < kept; i += kThreads) total += exp(static_cast<A>(load(row[i])) * scale - top);
    total = block_reduce(total, buf, Plus{});
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      out_row[i] = store<T>(i < kept ? exp(static_cast<A>(load(row[i])) * scale - top) / total : A(0));
    }
  }
}

template <typename T>
__global__ void causal_softmax_backward_kernel(const T* g, const T* y, T* dx, int64_t rows, int64_t m, int64_t n,
                                               acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t kept = r % m + n - m + 1;
    A dot = 0;
    for (int64_t i = threadIdx.x; i < kept; i += kThreads) {
      dot += static_cast<A>(load(g[r * n + i])) * static_cast<A>(load(y[r * n + i]));
    }
    dot = block_reduce(dot, buf, Plus{});
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const A yi = static_cast<A>(load(y[r * n + i]));
      dx[r * n + i] = store<T>(i < kept ? yi * (static_cast<A>(load(g[r * n + i])) - dot) * scale : A(0));
    }
  }
}

// Layer norm, one block per row of n elements: the mean, then the biased variance from the
// squared deviations (two passes in the accumulation type), then the normalised row times
// weight plus bias. S: the statistics' type (float, or double for float64).
template <typename T, typename S>
__global__ void layer_norm_kernel(const T* x, const T* weight, const T* bias, T* out, S* mean, S* rstd, int64_t rows,
                                  int64_t n, double eps) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    A total = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) total += static_cast<A>(load(row[i]));
    const A m = block_reduce(total, buf, Plus{}) / static_cast<A>(n);
    A squares = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const A d = static_cast<A>(load(row[i])) - m;
      squares += d * d;
    }
    const A inv = A(1) / sqrt(block_reduce(squares, buf, Plus{}) / static_cast<A>(n) + static_cast<A>(eps));
    if (threadIdx.x == 0) {
      mean[r] = static_cast<S>(m);
      rstd[r] = static_cast<S>(inv);
    }
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      A y = (static_cast<A>(load(row[i])) - m) * inv;
      if (weight != nullptr) y *= static_cast<A>(load(weight[i]));
      if (bias != nullptr) y += static_cast<A>(load(bias[i]));
      out[r * n + i] = store<T>(y);
    }
  }
}

// With g = dy * weight and xhat = (x - mean) * rstd, per row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T, typename S>
__global__ void layer_norm_backward_kernel(const T* dy, const T* x, const S* mean, const S* rstd, const T* weight,
                                           T* dx, int64_t rows, int64_t n) {
  using A = acc_t<T>;
  __shared__ A buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const A m = static_cast<A>(mean[r]), inv = static_cast<A>(rstd[r]);
    const auto g = [&](int64_t i) {
      const A d = static_cast<A>(load(dy[r * n + i]));
      return weight != nullptr ? d * static_cast<A>(load(weight[i])) : d;
    };
    const auto xhat = [&](int64_t i) { return (static_cast<A>(load(x[r * n + i])) - m) * inv; };
    A sum_g = 0, sum_gx = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      sum_g += g(i);
      sum_gx += g(i) * xhat(i);
    }
    const A mean_g = block_reduce(sum_g, buf, Plus{}) / static_cast<A>(n);
    const A mean_gx = block_reduce(sum_gx, buf, Plus{}) / static_cast<A>(n);
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      dx[r * n + i] = store<T>(inv * (g(i) - mean_g - xhat(i) * mean_gx));
  }
}

// The output type of a sum: integers and bools sum into int64 (as torch.sum), floats keep
// their type.
template <typename F>
cudaError_t dispatch_sum(int dtype, F&& f) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    using O = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
    return f(tag, O{});
  });
}

}  // namespace

int sum_rows(const void* x, int dtype, void* out, int64_t outer, int64_t inner, double scale, void* stream) {
  return dispatch_sum(dtype, [&](auto tag, auto out_tag) {
    using T = decltype(tag);
    using O = decltype(out_tag);
    if (outer == 0) return cudaSuccess;
    sum_rows_kernel<T, O><<<grid_for(outer), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(x), static_cast<O*>(out), outer, inner, static_cast<acc_t<T>>(scale));
    return cudaGetLastError();
  });
}

int64_t sum_columns_chunks(int64_t rows, int64_t inner) {
  // Enough blocks to fill the GPU several times over, each with at least 64 rows to add.
  const int64_t tiles = (inner + kTileColumns - 1) / kTileColumns;
  const int64_t wanted = (1024 + tiles - 1) / tiles, most = (rows + 63) / 64;
  return std::max<int64_t>(1, std::min<int64_t>(std::min<int64_t>(wanted, most), 1024));
}

int sum_columns(const void* x, int dtype, void* out, void* partial, int64_t rows, int64_t inner, double scale,
                void* stream) {
  return dispatch_sum(dtype, [&](auto tag, auto out_tag) {
    using T = decltype(tag);
    using O = decltype(out_tag);
    using A = acc_t<T>;
    if (inner == 0) return cudaSuccess;
    const auto s = static_cast<cudaStream_t>(stream);
    const int64_t chunks = sum_columns_chunks(rows, inner);
    const dim3 block(kTileColumns, kTileRows);
    const int tiles = grid_for((inner + kTileColumns - 1) / kTileColumns);
    if (chunks == 1) {
      sum_columns_kernel<T, O><<<dim3(tiles, 1), block, 0, s>>>(static_cast<const T*>(x), static_cast<O*>(out), rows,
                                                                inner, rows, static_cast<A>(scale));
      return cudaGetLastError();
    }
    if (partial == nullptr) return cudaErrorInvalidValue;  // backend.cc allocates [chunks, inner] of A
    const int64_t chunk_rows = (rows + chunks - 1) / chunks;
    sum_columns_kernel<T, A><<<dim3(tiles, static_cast<unsigned>(chunks)), block, 0, s>>>(
        static_cast<const T*>(x), static_cast<A*>(partial), rows, inner, chunk_rows, A(1));
    sum_columns_kernel<A, O><<<dim3(tiles, 1), block, 0, s>>>(static_cast<const A*>(partial), static_cast<O*>(out),
                                                              chunks, inner, chunks, static_cast<A>(scale));
    return cudaGetLastError();
  });
}

int max_rows(const void* x, int dtype, void* values, int64_t* indices, int64_t outer, int64_t inner, void* stream) {
  if (inner == 0) return cudaErrorInvalidValue;  // tensor/native/reduce.cc refuses reducing an empty dim
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (outer == 0) return cudaSuccess;
    max_rows_kernel<T><<<grid_for(outer), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(values), indices, outer, inner);
    return cudaGetLastError();
  });
}

int softmax_rows(const void* x, int dtype, void* out, int64_t outer, int64_t n, bool log_softmax, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;  // tensor/native/reduce.cc refuses non-floating dtypes
    } else {
      if (outer == 0 || n == 0) return cudaSuccess;
      softmax_rows_kernel<T><<<grid_for(outer), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<T*>(out), outer, n, log_softmax);
      return cudaGetLastError();
    }
  });
}

int causal_softmax_rows(const void* x, const void* y, int dtype, void* out, int64_t rows, int64_t m, int64_t n,
                        double scale, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;  // tensor/native/attention.cc refuses non-floating dtypes
    } else {
      if (rows == 0 || n == 0) return cudaSuccess;
      const auto s = static_cast<acc_t<T>>(scale);
      if (y == nullptr) {
        causal_softmax_kernel<T><<<grid_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const T*>(x), static_cast<T*>(out), rows, m, n, s);
      } else {
        causal_softmax_backward_kernel<T><<<grid_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const T*>(x), static_cast<const T*>(y), static_cast<T*>(out), rows, m, n, s);
      }
      return cudaGetLastError();
    }
  });
}

int layer_norm_rows(const void* x, const void* weight, const void* bias, int dtype, void* out, void* mean, void* rstd,
                    int64_t rows, int64_t n, double eps, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;  // tensor/native/layer_norm.cc refuses non-floating dtypes
    } else {
      using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
      if (rows == 0 || n == 0) return cudaSuccess;
      layer_norm_kernel<T, S><<<grid_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(out),
          static_cast<S*>(mean), static_cast<S*>(rstd), rows, n, eps);
      return cudaGetLastError();
    }
  });
}

int layer_norm_backward_rows(const void* dy, const void* x, const void* mean, const void* rstd, const void* weight,
                             int dtype, void* dx, int64_t rows, int64_t n, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;
    } else {
      using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
      if (rows == 0 || n == 0) return cudaSuccess;
      layer_norm_backward_kernel<T, S><<<grid_for(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const S*>(mean), static_cast<const S*>(rstd),
          static_cast<const T*>(weight), static_cast<T*>(dx), rows, n);
      return cudaGetLastError();
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
