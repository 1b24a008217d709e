// Flash attention on the GPU (kernels.h's flash_attention), the twin of the CPU's
// tensor/backends/cpu/flash_attention.cc: blocks of kTile = 64 keys, a running maximum per query
// row, out = acc / l and lse = max + log l; the backward recomputes each block's
// probabilities from lse. No [M, N] matrix is ever in memory.
// - forward: a thread per query row (kRows rows per block, a head per grid row); each block of
//   keys and values is staged in shared memory and read by every thread of the block (the same
//   address: a broadcast). A thread keeps its query row and its accumulator in registers and
//   the block's scores in a column of shared memory.
// - backward, three launches: delta = rowsum(dout * out) per row; dq, a thread per query row
//   over the key blocks as the forward; dk and dv, a thread per key row over the blocks of the
//   query rows that see it (its own k and v rows in shared memory, padded against bank
//   conflicts). No atomics: every gradient element is summed by one thread in key (query) order,
//   so the bits do not depend on scheduling.
// - attention dropout: the probabilities that multiply v are masked and scaled (Drop, from the
//   Philox key: element (head, i, j) at index (head m + i) n + j, as dropout's own mask over the
//   weights); the row sums stay undropped. The backward: dv from the dropped P, and
//   dS = P (mask dP - delta), as the CPU twin.
// float, double, and the 16-bit floats (computed in float, rounded once on the way out); head
// widths up to 128 (float) or 64 (double), as a template bound so that the rows stay in
// registers; contiguous heads only (attention_route.cc makes them). 16-bit calls of width 64 or
// 128 with 16-byte aligned pointers and strides go to the tensor-core kernels of
// attention_tc.cuh instead, in any such layout (the entry points below choose); the delta
// kernel takes any layout too.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tinyddp/tensor/backends/cuda/attention.cuh"
#include "tinyddp/tensor/backends/cuda/dtypes.cuh"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/internal/philox.h"

namespace tinyddp::tensor::cuda::kernels {

namespace {

constexpr int kRows = 64;  // threads per block: query (or key) rows
constexpr int kTile = 64;  // keys (or query rows) staged in shared memory at a time

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

using attention::Drop;
using attention::drop_of;
using attention::larger;
using attention::Sizes;
using attention::smaller;

// Copies rows [first, first + count) of a [rows, width] head into shared memory as A.
template <typename T, typename A>
__device__ void stage(A* dst, const T* src, int64_t first, int count, int64_t width) {
  for (int64_t i = threadIdx.x; i < count * width; i += blockDim.x)
    dst[i] = static_cast<A>(load(src[first * width + i]));
}

// The block of keys and values [col0, col0 + cols) of `head` into ks and vs, between two
// barriers (the previous block's readers done first; every thread sees the whole block after).
template <typename T, typename A>
__device__ void stage_keys(A* ks, A* vs, const T* k, const T* v, const Sizes& z, int64_t head, int64_t col0, int cols) {
  __syncthreads();
  stage(ks, k + head * z.n * z.e, col0, cols, z.e);
  stage(vs, v + head * z.n * z.ev, col0, cols, z.ev);
  __syncthreads();
}

template <typename A, int D>
__device__ A dot(const A (&row)[D], const A* other, int64_t width) {
  A total = 0;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    if (d < width) total += row[d] * other[d];
  }
  return total;
}

template <typename T, typename A, int D>
__device__ void load_row(A (&row)[D], const T* src, int64_t width) {
#pragma unroll
  for (int d = 0; d < D; ++d) row[d] = d < width ? static_cast<A>(load(src[d])) : A(0);
}

template <typename T, int D>
__global__ void forward_kernel(const T* q, const T* k, const T* v, T* out, acc_t<T>* lse, Sizes z, acc_t<T> scale,
                               Drop<acc_t<T>> drop) {
  using A = acc_t<T>;
  drop.resolve();
  extern __shared__ unsigned char shared[];
  A* ks = reinterpret_cast<A*>(shared);
  A* vs = ks + kTile * z.e;
  A* scores = vs + kTile * z.ev;  // [kTile][kRows]: a thread's scores in a column, no bank conflicts
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x;
  const int64_t keys = z.keys_for(smaller(z.m, (blockIdx.x + 1) * static_cast<int64_t>(kRows)) - 1);
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    const bool active = row < z.m;
    const int64_t mine = active ? z.keys_for(row) : 0;
    A qr[D], acc[D];
    if (active) load_row<T, A, D>(qr, q + (head * z.m + row) * z.e, z.e);
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = 0;
    A top = -INFINITY, total = 0;
    philox::KeepStream stream(drop.seed, drop.keep);
    const uint64_t weights = static_cast<uint64_t>((head * z.m + row) * z.n);  // this row's first weight index
    for (int64_t col0 = 0; col0 < keys; col0 += kTile) {
      const int cols = static_cast<int>(smaller(kTile, keys - col0));
      stage_keys(ks, vs, k, v, z, head, col0, cols);
      if (!active) continue;
      A grown = top;
      for (int c = 0; c < cols; ++c) {
        const A sc = col0 + c < mine ? dot<A, D>(qr, ks + c * z.e, z.e) * scale : A(-INFINITY);
        scores[c * kRows + threadIdx.x] = sc;
        grown = sc > grown ? sc : grown;
      }
      const A shrink = exp(top - grown);  // 0 on the first block
      total *= shrink;
#pragma unroll
      for (int d = 0; d < D; ++d) acc[d] *= shrink;
      for (int c = 0; c < cols; ++c) {
        const A sc = scores[c * kRows + threadIdx.x];
        const A p = sc == A(-INFINITY) ? A(0) : exp(sc - grown);
        total += p;
        const A pv = drop.on ? p * drop.factor(stream, weights + static_cast<uint64_t>(col0 + c)) : p;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          if (d < z.ev) acc[d] += pv * vs[c * z.ev + d];
        }
      }
      top = grown;
    }
    if (active) {
#pragma unroll
      for (int d = 0; d < D; ++d) {  // unrolled: a register array is indexed by constants only
        if (d < z.ev) out[(head * z.m + row) * z.ev + d] = store<T>(acc[d] / total);
      }
      lse[head * z.m + row] = top + log(total);
    }
  }
}

// delta[r] = sum over d of dout[r, d] * out[r, d], in order, one thread per row r (row r % m of
// head r / m, wherever the layouts place it).
template <typename T>
__global__ void delta_kernel(const T* dout, const T* out, acc_t<T>* delta, int64_t rows, int64_t m, int64_t ev,
                             AttentionLayouts layouts) {
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t head = r / m, i = r % m;
    const T* g = attention::head_of(dout, layouts.dout, head, layouts.per_batch) + i * layouts.dout.row;
    const T* o = attention::head_of(out, layouts.out, head, layouts.per_batch) + i * layouts.out.row;
    A total = 0;
    for (int64_t d = 0; d < ev; ++d) total += static_cast<A>(load(g[d])) * static_cast<A>(load(o[d]));
    delta[r] = total;
  }
}

// dq: a thread per query row, over the key blocks it sees.
template <typename T, int D>
__global__ void dq_kernel(const T* q, const T* k, const T* v, const T* dout, const acc_t<T>* lse, const acc_t<T>* delta,
                          T* dq, Sizes z, acc_t<T> scale, Drop<acc_t<T>> drop) {
  using A = acc_t<T>;
  drop.resolve();
  extern __shared__ unsigned char shared[];
  A* ks = reinterpret_cast<A*>(shared);
  A* vs = ks + kTile * z.e;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRows) + threadIdx.x;
  const int64_t keys = z.keys_for(smaller(z.m, (blockIdx.x + 1) * static_cast<int64_t>(kRows)) - 1);
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    const bool active = row < z.m;
    const int64_t at = head * z.m + row, mine = active ? z.keys_for(row) : 0;
    A qr[D], dor[D], dqr[D];
    A row_lse = 0, row_delta = 0;
    if (active) {
      load_row<T, A, D>(qr, q + at * z.e, z.e);
      load_row<T, A, D>(dor, dout + at * z.ev, z.ev);
      row_lse = lse[at];
      row_delta = delta[at];
    }
#pragma unroll
    for (int d = 0; d < D; ++d) dqr[d] = 0;
    philox::KeepStream stream(drop.seed, drop.keep);
    for (int64_t col0 = 0; col0 < keys; col0 += kTile) {
      const int cols = static_cast<int>(smaller(kTile, keys - col0));
      stage_keys(ks, vs, k, v, z, head, col0, cols);
      if (!active) continue;
      for (int c = 0; c < cols && col0 + c < mine; ++c) {
        const A p = exp(dot<A, D>(qr, ks + c * z.e, z.e) * scale - row_lse);
        A dp = dot<A, D>(dor, vs + c * z.ev, z.ev);
        if (drop.on) dp *= drop.factor(stream, static_cast<uint64_t>(at * z.n + col0 + c));
        const A ds = p * (dp - row_delta) * scale;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          if (d < z.e) dqr[d] += ds * ks[c * z.e + d];
        }
      }
    }
    if (active) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        if (d < z.e) dq[at * z.e + d] = store<T>(dqr[d]);
      }
    }
  }
}

// dk, dv: a thread per key row, over the blocks of query rows that see it.
template <typename T, int D>
__global__ void dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const acc_t<T>* lse,
                            const acc_t<T>* delta, T* dk, T* dv, Sizes z, acc_t<T> scale, Drop<acc_t<T>> drop) {
  using A = acc_t<T>;
  drop.resolve();
  extern __shared__ unsigned char shared[];
  A* own_k = reinterpret_cast<A*>(shared);  // [kRows][e + 1]: a thread's row, padded
  A* own_v = own_k + kRows * (z.e + 1);     // [kRows][ev + 1]
  A* qs = own_v + kRows * (z.ev + 1);       // [kTile][e]
  A* dos = qs + kTile * z.e;                // [kTile][ev]
  A* stats = dos + kTile * z.ev;            // [kTile] lse, then [kTile] delta
  const int64_t key0 = blockIdx.x * static_cast<int64_t>(kRows), key = key0 + threadIdx.x;
  const int own = static_cast<int>(smaller(kRows, z.n - key0));
  // The first query row that sees key0 (every later row sees some key of the block).
  const int64_t first = z.causal ? larger(key0 - (z.n - z.m), 0) : 0;
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    __syncthreads();
    for (int64_t i = threadIdx.x; i < own * z.e; i += blockDim.x) {
      own_k[i / z.e * (z.e + 1) + i % z.e] = static_cast<A>(load(k[(head * z.n + key0) * z.e + i]));
    }
    for (int64_t i = threadIdx.x; i < own * z.ev; i += blockDim.x) {
      own_v[i / z.ev * (z.ev + 1) + i % z.ev] = static_cast<A>(load(v[(head * z.n + key0) * z.ev + i]));
    }
    const bool active = key < z.n;
    const A* kr = own_k + threadIdx.x * (z.e + 1);
    const A* vr = own_v + threadIdx.x * (z.ev + 1);
    A dkr[D], dvr[D];
#pragma unroll
    for (int d = 0; d < D; ++d) dkr[d] = dvr[d] = 0;
    for (int64_t row0 = first; row0 < z.m; row0 += kTile) {
      const int rows = static_cast<int>(smaller(kTile, z.m - row0));
      __syncthreads();
      stage(qs, q + head * z.m * z.e, row0, rows, z.e);
      stage(dos, dout + head * z.m * z.ev, row0, rows, z.ev);
      for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        stats[i] = lse[head * z.m + row0 + i];
        stats[kTile + i] = delta[head * z.m + row0 + i];
      }
      __syncthreads();
      if (!active) continue;
      for (int c = 0; c < rows; ++c) {
        if (z.causal && key > row0 + c + z.n - z.m) continue;  // row row0 + c does not see this key
        A s = 0, dp = 0;
        for (int d = 0; d < z.e; ++d) s += qs[c * z.e + d] * kr[d];
        for (int d = 0; d < z.ev; ++d) dp += dos[c * z.ev + d] * vr[d];
        const A p = exp(s * scale - stats[c]);
        const A f = drop.on ? drop.factor(static_cast<uint64_t>(((head * z.m + row0 + c) * z.n) + key)) : A(1);
        const A ds = p * (f * dp - stats[kTile + c]) * scale, pv = f * p;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          if (d < z.ev) dvr[d] += pv * dos[c * z.ev + d];
          if (d < z.e) dkr[d] += ds * qs[c * z.e + d];
        }
      }
    }
    if (active) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        if (d < z.e) dk[(head * z.n + key) * z.e + d] = store<T>(dkr[d]);
        if (d < z.ev) dv[(head * z.n + key) * z.ev + d] = store<T>(dvr[d]);
      }
    }
  }
}

// The register bound for a head of width `width` (0: none, declined).
int bound_for(int64_t width, bool is_double) {
  if (width <= 64) return 64;
  return width <= 128 && !is_double ? 128 : 0;
}

// A kernel over blocks of kRows query (or key) rows by heads (attention.cuh's launch_tiles).
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, int64_t rows, int64_t heads, size_t bytes, void* stream, Args... args) {
  return attention::launch_tiles(kernel, rows, kRows, heads, kRows, bytes, static_cast<cudaStream_t>(stream), args...);
}

// Whether the operands are contiguous heads, all the CUDA-core kernels take (the forward's q,
// k, v, out; the backward's every one).
bool dense_operands(const AttentionLayouts& l, const Sizes& z, bool backward) {
  const auto dense = [&](const HeadStrides& s, int64_t rows, int64_t width) {
    const HeadStrides d = dense_heads(l.per_batch, rows, width);
    return s.batch == d.batch && s.head == d.head && s.row == d.row;
  };
  const bool forward = dense(l.q, z.m, z.e) && dense(l.k, z.n, z.e) && dense(l.v, z.n, z.ev) && dense(l.out, z.m, z.ev);
  return forward && (!backward || (dense(l.dout, z.m, z.ev) && dense(l.dq, z.m, z.e) && dense(l.dk, z.n, z.e) &&
                                   dense(l.dv, z.n, z.ev)));
}

// f(T{}, std::integral_constant<int, D>{}) for a floating dtype and a supported width.
template <typename F>
cudaError_t with_bound(int dtype, int64_t e, int64_t ev, F&& f) {
  return dispatch(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, F16> ||
                  std::is_same_v<T, BF16>) {
      switch (bound_for(std::max(e, ev), std::is_same_v<T, double>)) {
        case 64: return f(tag, std::integral_constant<int, 64>{});
        case 128:
          if constexpr (!std::is_same_v<T, double>) return f(tag, std::integral_constant<int, 128>{});
          break;
        default: break;
      }
    }
    return cudaErrorNotSupported;
  });
}

}  // namespace

bool flash_attention_supported(int dtype, int64_t e, int64_t ev) {
  const bool floating = dtype >= 0 && dtype <= 3;  // float32, float64, float16, bfloat16
  return floating && bound_for(std::max(e, ev), dtype == 1) != 0;
}

bool flash_attention_on_tensor_cores(int dtype, int64_t e, int64_t ev, const void* const* pointers, int count,
                                     const AttentionLayouts& layouts) {
  return attention::tc_takes(dtype, e, ev, pointers, count, layouts);
}

int flash_attention(const void* q, const void* k, const void* v, int dtype, void* out, void* lse, int64_t heads,
                    int64_t m, int64_t n, int64_t e, int64_t ev, const AttentionLayouts& layouts, bool causal,
                    double scale, double dropout_p, uint64_t seed, const uint64_t* seed_slot, void* stream) {
  const Sizes z{heads, m, n, e, ev, causal};
  const void* const pointers[] = {q, k, v, out};
  if (heads > 0 && m > 0 && n > 0 && attention::tc_takes(dtype, e, ev, pointers, 4, layouts)) {
    return attention::tc_forward(q, k, v, dtype, out, static_cast<float*>(lse), z, layouts, scale,
                                 drop_of<float>(dropout_p, seed, seed_slot), static_cast<cudaStream_t>(stream));
  }
  if (!dense_operands(layouts, z, false)) return cudaErrorInvalidValue;
  return with_bound(dtype, e, ev, [&](auto tag, auto bound) -> cudaError_t {
    using T = decltype(tag);
    using A = acc_t<T>;
    const size_t bytes = sizeof(A) * kTile * (e + ev + kRows);
    return launch(forward_kernel<T, decltype(bound)::value>, m, heads, bytes, stream, static_cast<const T*>(q),
                  static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out), static_cast<A*>(lse), z,
                  static_cast<A>(scale), drop_of<A>(dropout_p, seed, seed_slot));
  });
}

int flash_attention_backward(const void* q, const void* k, const void* v, const void* out, const void* dout,
                             const void* lse, void* delta, int dtype, void* dq, void* dk, void* dv, int64_t heads,
                             int64_t m, int64_t n, int64_t e, int64_t ev, const AttentionLayouts& layouts, bool causal,
                             double scale, double dropout_p, uint64_t seed, const uint64_t* seed_slot, void* stream) {
  const Sizes z{heads, m, n, e, ev, causal};
  const void* const pointers[] = {q, k, v, out, dout, dq, dk, dv};
  const bool tensor_cores = heads > 0 && m > 0 && n > 0 && attention::tc_takes(dtype, e, ev, pointers, 8, layouts);
  if (!tensor_cores && !dense_operands(layouts, z, true)) return cudaErrorInvalidValue;
  return with_bound(dtype, e, ev, [&](auto tag, auto bound) {
    using T = decltype(tag);
    using A = acc_t<T>;
    constexpr int D = decltype(bound)::value;
    const auto s = static_cast<cudaStream_t>(stream);
    const int64_t rows = heads * m;
    delta_kernel<T><<<static_cast<unsigned>(smaller((rows + 255) / 256, 65535)), 256, 0, s>>>(
        static_cast<const T*>(dout), static_cast<const T*>(out), static_cast<A*>(delta), rows, m, ev, layouts);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    if constexpr (std::is_same_v<A, float>) {
      if (tensor_cores) {
        return static_cast<cudaError_t>(attention::tc_backward(
            q, k, v, dout, static_cast<const float*>(lse), static_cast<const float*>(delta), dtype, dq, dk, dv, z,
            layouts, scale, drop_of<float>(dropout_p, seed, seed_slot), s));
      }
    }
    status = launch(dq_kernel<T, D>, m, heads, sizeof(A) * kTile * (e + ev), stream, static_cast<const T*>(q),
                    static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(dout),
                    static_cast<const A*>(lse), static_cast<const A*>(delta), static_cast<T*>(dq), z,
                    static_cast<A>(scale), drop_of<A>(dropout_p, seed, seed_slot));
    if (status != cudaSuccess) return status;
    const size_t bytes = sizeof(A) * (kRows * (e + 1 + ev + 1) + kTile * (e + ev + 2));
    return launch(dkdv_kernel<T, D>, n, heads, bytes, stream, static_cast<const T*>(q), static_cast<const T*>(k),
                  static_cast<const T*>(v), static_cast<const T*>(dout), static_cast<const A*>(lse),
                  static_cast<const A*>(delta), static_cast<T*>(dk), static_cast<T*>(dv), z, static_cast<A>(scale),
                  drop_of<A>(dropout_p, seed, seed_slot));
  });
}

}  // namespace tinyddp::tensor::cuda::kernels
