// Cross-entropy's rows on the GPU (tensor/fused.h's cross_entropy_rows; the CPU twin:
// backends/cpu/loss.cc), one block per row (grid-striding over rows), every floating dtype
// computed in float (double for float64):
// - forward: one read of the row. Each thread keeps a running maximum and the sum of
//   exp(x - maximum) over its strided share (rescaled when the maximum grows, as flash
//   attention's online softmax), the pairs are merged across the warp by shuffles and across
//   warps in shared memory, giving the row's maximum and log-sum; with label smoothing a second
//   read sums w[c] (-log_softmax[c]). The row's loss, maximum and log-sum are written; no [N, C]
//   buffer.
// - backward: one read and one write of the row: grad[c] = scale exp((x[c] - max) - log-sum)
//   - spread w[c], less g (1 - s) w[t] at the target.
// 16-bit logits: the log-probabilities (x - max) - log-sum rounded to their dtype first, as the
// CPU's (PyTorch's log_softmax output).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/kernels.h"

namespace tinyddp::tensor::cuda::kernels {

namespace {

constexpr int kWarp = 32;

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A>
__device__ A minus_infinity() {
  return -static_cast<A>(INFINITY);
}

// The running (maximum, sum of exp(x - maximum)) of two shares merged.
template <typename A>
struct MaxSum {
  A max, sum;
  __device__ void add(A v) {
    if (v > max) {
      sum = sum * exp(max - v) + A(1);  // exp(-inf) = 0 on the first finite value
      max = v;
    } else if (v != minus_infinity<A>()) {
      sum += exp(v - max);  // NaN passes here and spreads
    }
  }
  __device__ void merge(MaxSum other) {
    const A m = other.max > max ? other.max : max;
    if (m == minus_infinity<A>()) return;  // both empty so far
    sum = sum * exp(max - m) + other.sum * exp(other.max - m);
    max = m;
  }
};

// The block's merged pair, for every thread. `shared` holds one pair per warp.
template <typename A>
__device__ MaxSum<A> block_max_sum(MaxSum<A> v, MaxSum<A>* shared) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v.merge({__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  }
  const int warps = blockDim.x / kWarp, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  MaxSum<A> all = shared[0];
  for (int w = 1; w < warps; ++w) all.merge(shared[w]);
  __syncthreads();  // shared is reused by the next row
  return all;
}

// The block's sum of v, for every thread. `shared` holds one value per warp.
template <typename A>
__device__ A block_sum(A v, A* shared) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warps = blockDim.x / kWarp, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A all = shared[0];
  for (int w = 1; w < warps; ++w) all += shared[w];
  __syncthreads();
  return all;
}

// What every row shares: the weight (null: 1 for every class) and its sum (on the device; null
// without a weight or smoothing), the smoothing and its share per class.
template <typename T, typename A>
struct RowTerms {
  const T* weight;
  const A* weight_sum;
  int64_t ignore_index;
  A smoothing, share;
  __device__ A weight_of(int64_t c) const { return weight != nullptr ? static_cast<A>(load(weight[c])) : A(1); }
};

// log_softmax at logit v of a row with maximum m and log-sum ls (16-bit: rounded to T).
template <typename T, typename A>
__device__ A log_prob(A v, A m, A ls) {
  const A lp = (v - m) - ls;
  if constexpr (std::is_same_v<T, F16> || std::is_same_v<T, BF16>) return static_cast<A>(load(store<T>(lp)));
  return lp;
}

template <typename T>
__global__ void cross_entropy_kernel(const T* x, const int64_t* targets, T* loss, acc_t<T>* stats, int64_t rows,
                                     int64_t n, RowTerms<T, acc_t<T>> terms) {
  using A = acc_t<T>;
  __shared__ MaxSum<A> pairs[kWarp];
  __shared__ A sums[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = targets[r];
    if (t == terms.ignore_index) {  // the same for the whole block
      if (threadIdx.x == 0) loss[r] = store<T>(A(0)), stats[2 * r] = stats[2 * r + 1] = A(0);
      continue;
    }
    const T* row = x + r * n;
    MaxSum<A> mine{minus_infinity<A>(), A(0)};
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mine.add(static_cast<A>(load(row[i])));
    const MaxSum<A> all = block_max_sum(mine, pairs);
    const A m = all.max, ls = log(all.sum);
    A spread = 0;
    if (terms.smoothing > A(0)) {
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
        spread -= terms.weight_of(c) * log_prob<T>(static_cast<A>(load(row[c])), m, ls);
      }
      spread = block_sum(spread, sums);
    }
    if (threadIdx.x == 0) {
      // A target out of range (checked by the op, but not while a CUDA graph is captured) is NaN.
      const A target_logit = t >= 0 && t < n ? static_cast<A>(load(row[t])) : static_cast<A>(NAN);
      const A wt = t >= 0 && t < n ? terms.weight_of(t) : A(1);
      loss[r] = store<T>(-(A(1) - terms.smoothing) * wt * log_prob<T>(target_logit, m, ls) + terms.share * spread);
      stats[2 * r] = m;
      stats[2 * r + 1] = ls;
    }
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* x, const T* grad_loss, const int64_t* targets,
                                              const acc_t<T>* stats, T* grad, int64_t rows, int64_t n,
                                              RowTerms<T, acc_t<T>> terms) {
  using A = acc_t<T>;
  const A weight_sum = terms.weight_sum != nullptr ? *terms.weight_sum : static_cast<A>(n);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = targets[r];
    T* out = grad + r * n;
    if (t == terms.ignore_index) {
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) out[c] = store<T>(A(0));
      continue;
    }
    const T* row = x + r * n;
    const A g = static_cast<A>(load(grad_loss[r])), m = stats[2 * r], ls = stats[2 * r + 1];
    const A wt = t >= 0 && t < n ? terms.weight_of(t) : static_cast<A>(NAN);
    const A scale = g * ((A(1) - terms.smoothing) * wt + terms.share * weight_sum);
    const A spread = g * terms.share, at_target = g * (A(1) - terms.smoothing) * wt;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      A v = scale * exp(log_prob<T>(static_cast<A>(load(row[c])), m, ls)) - spread * terms.weight_of(c);
      if (c == t) v -= at_target;
      out[c] = store<T>(v);
    }
  }
}

int grid_for(int64_t rows) { return static_cast<int>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535); }

// Threads per row: a warp's multiple, fewer for short rows.
int threads_for(int64_t n) { return n <= 1024 ? 64 : 512; }

template <typename T>
RowTerms<T, acc_t<T>> row_terms(const void* weight, const void* weight_sum, int64_t n, int64_t ignore_index,
                                double smoothing) {
  using A = acc_t<T>;
  return {static_cast<const T*>(weight), static_cast<const A*>(weight_sum), ignore_index, static_cast<A>(smoothing),
          static_cast<A>(smoothing / static_cast<double>(n))};
}

}  // namespace

int cross_entropy_rows(const void* x, const int64_t* targets, const void* weight, int dtype, void* loss, void* stats,
                       int64_t rows, int64_t n, int64_t ignore_index, double smoothing, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;  // tensor/native/loss.cc refuses non-floating dtypes
    } else {
      if (rows == 0 || n == 0) return cudaSuccess;
      cross_entropy_kernel<T><<<grid_for(rows), threads_for(n), 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), targets, static_cast<T*>(loss), static_cast<acc_t<T>*>(stats), rows, n,
          row_terms<T>(weight, nullptr, n, ignore_index, smoothing));
      return cudaGetLastError();
    }
  });
}

int cross_entropy_backward_rows(const void* x, const void* grad_loss, const int64_t* targets, const void* stats,
                                const void* weight, const void* weight_sum, int dtype, void* grad, int64_t rows,
                                int64_t n, int64_t ignore_index, double smoothing, void* stream) {
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!is_floating<T>) {
      return cudaErrorInvalidValue;
    } else {
      if (rows == 0 || n == 0) return cudaSuccess;
      cross_entropy_backward_kernel<T><<<grid_for(rows), threads_for(n), 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<const T*>(grad_loss), targets, static_cast<const acc_t<T>*>(stats),
          static_cast<T*>(grad), rows, n, row_terms<T>(weight, weight_sum, n, ignore_index, smoothing));
      return cudaGetLastError();
    }
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
