// Flash attention on tensor cores: the kernels behind attention.cuh's tc_forward and
// tc_backward (launched by attention_tc.cu), for float16 and bfloat16 with head widths of 64 or 128: the products run
// as 16 x 16 x 16 WMMA tiles with float accumulators; the softmax bookkeeping runs in float on CUDA cores. The blocking
// is the CPU twin's (64 keys at a time, a running maximum per row, lse = max + log sum per row).
// - A block has 4 warps; each warp owns 16 rows of a 64-row tile (query rows in the forward and
//   in dq, key rows in dk/dv). The other side's 64-row tiles are staged in shared memory, 16
//   bytes per load, rows padded by 8 elements against bank conflicts.
// - A warp's 16 x 64 scores go through shared memory (float) for the softmax: two lanes per
//   row, a shuffle between them. The probabilities meet v (and dS meets k or q) rounded to the
//   16-bit dtype, as flash attention does; the row sums stay in float and undropped.
// - The output's accumulators stay in registers across key blocks; rescaling row i of them
//   needs each fragment element's row, which WMMA does not name: an accumulator loaded from a
//   16 x 16 matrix whose element (r, c) is r gives it (`rows`), since loads place elements as
//   the products do.
// - backward: dk and dv, a block per 64 keys over the query tiles that see them; dq, a block
//   per 64 query rows over their key tiles (S and dP recomputed: 7 products where atomics
//   would need 5, for the same bits at every run).
// - operands in any layout of kernels.h's AttentionLayouts (a head's rows any whole number of 16
//   bytes apart), so that the heads of a [B, T, H, E] tensor are read and written where they lie,
//   as PyTorch's flash kernels do, with no transposing copies around the call.
// - attention dropout: the weights that meet v (and dP) are masked and scaled by the Philox
//   mask of Drop, element (head, i, j) at index (head m + i) n + j, as attention.cu.
// Device code only, in a header so that tests/tensor/attention_tc_emulation_test.cc can run
// these very kernels on the CPU: under TINYDDP_CUDA_EMULATION the test's emulation
// (tests/tensor/cuda_emulation.h) stands in for CUDA's headers, WMMA and the warp intrinsics.
#pragma once

#ifndef TINYDDP_CUDA_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#endif

#include <cstdint>

#include "tinyddp/tensor/backends/cuda/attention.cuh"

namespace tinyddp::tensor::cuda::kernels::attention::tc {

using namespace nvcuda;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = 16 * kWarps;  // rows of a staged tile; 16 per warp
constexpr int kPad = 8;             // 16-bit elements of padding per staged row (16 bytes)
constexpr int kLdS = kTile + 4;     // a warp's float scores [16][kLdS]
constexpr int kLdP = kTile + kPad;  // a warp's 16-bit probabilities [16][kLdP]
constexpr unsigned kFull = 0xffffffffu;

template <typename W>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major>;
template <typename W>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major>;
// Matrix b as the transpose of a row-major tile (element (k, j) at [j][k]).
template <typename W>
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <typename W>
__device__ W to_w(float v);
template <>
inline __device__ __nv_bfloat16 to_w<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
inline __device__ __half to_w<__half>(float v) {
  return __float2half_rn(v);
}

// Shared memory, in bytes (each piece a multiple of 32, as WMMA's pointers need): `tiles` staged
// tiles of 64 rows of width E, then per warp `floats` float [16][kLdS] score tiles, `halves`
// 16-bit [16][kLdP] tiles and 32 floats of row statistics, then `block_floats` floats for the
// whole block.
template <int E>
struct Layout {
  static constexpr int kLd = E + kPad;
  int tiles, floats, halves, block_floats;
  __host__ __device__ constexpr size_t tile_bytes() const { return size_t{2} * kTile * kLd; }
  __host__ __device__ constexpr size_t warp_bytes() const {
    return sizeof(float) * (16 * kLdS * floats + 32) + size_t{2} * 16 * kLdP * halves;
  }
  __host__ __device__ constexpr size_t warps_end() const { return tile_bytes() * tiles + warp_bytes() * kWarps; }
  __host__ __device__ constexpr size_t bytes() const { return warps_end() + sizeof(float) * block_floats; }
};
// Each kernel's, read by the kernel and by its launch (attention_tc.cu).
template <int E>
__host__ __device__ constexpr Layout<E> forward_layout() {
  return {2, 1, 1, 0};
}
template <int E>
__host__ __device__ constexpr Layout<E> dq_layout() {
  return {2, 2, 1, 0};
}
template <int E>
__host__ __device__ constexpr Layout<E> dkdv_layout() {
  return {2, 2, 2, 2 * kTile};  // the block: the query tile's lse and delta
}

// A warp's pieces of a Layout.
template <typename W, int E>
struct Pieces {
  W* tile[4];
  float* scores[2];
  W* halves[2];
  float* stats;  // [32]
  __device__ Pieces(unsigned char* shared, Layout<E> layout) {
    for (int i = 0; i < layout.tiles; ++i) tile[i] = reinterpret_cast<W*>(shared + i * layout.tile_bytes());
    unsigned char* mine = shared + layout.tiles * layout.tile_bytes() + (threadIdx.x / 32) * layout.warp_bytes();
    for (int i = 0; i < layout.floats; ++i) scores[i] = reinterpret_cast<float*>(mine) + i * 16 * kLdS;
    stats = reinterpret_cast<float*>(mine) + layout.floats * 16 * kLdS;
    for (int i = 0; i < layout.halves; ++i) halves[i] = reinterpret_cast<W*>(stats + 32) + i * 16 * kLdP;
  }
};

// Rows [first, first + kTile) of a head (rows `ld` elements apart) into dst [kTile][E + kPad],
// zeros from `limit` on; every thread of the block takes part.
template <typename W, int E>
__device__ void stage(W* dst, const W* src, int64_t ld, int64_t first, int64_t limit) {
  constexpr int chunks = E / 8;  // 16 bytes each
  for (int i = threadIdx.x; i < kTile * chunks; i += kThreads) {
    const int r = i / chunks, c = i % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + r < limit) value = *reinterpret_cast<const uint4*>(src + (first + r) * ld + c * 8);
    *reinterpret_cast<uint4*>(dst + r * (E + kPad) + c * 8) = value;
  }
}

// `rows`: an accumulator whose every element holds its own row (scratch: 256 floats of the warp).
inline __device__ void row_numbers(Acc& rows, float* scratch) {
  for (int i = threadIdx.x % 32; i < 256; i += 32) scratch[i] = static_cast<float>(i / 16);
  __syncwarp();
  wmma::load_matrix_sync(rows, scratch, 16, wmma::mem_row_major);
  __syncwarp();
}

// Each element of this warp's accumulators times factor[its row].
template <int N>
__device__ void scale_rows(Acc (&acc)[N], const Acc& rows, const float* factor) {
#pragma unroll
  for (int t = 0; t < N; ++t) {
#pragma unroll
    for (int i = 0; i < acc[t].num_elements; ++i) acc[t].x[i] *= factor[static_cast<int>(rows.x[i])];
  }
}

// scores [16][kTile] = a (16 x E, as fragments) times the transpose of the staged tile b.
template <typename W, int E>
__device__ void scores_of(float* scores, const FragA<W> (&a)[E / 16], const W* b) {
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    Acc s;
    wmma::fill_fragment(s, 0.0f);
#pragma unroll
    for (int kk = 0; kk < E / 16; ++kk) {
      FragBt<W> bt;
      wmma::load_matrix_sync(bt, b + j * 16 * (E + kPad) + kk * 16, E + kPad);
      wmma::mma_sync(s, a[kk], bt, s);
    }
    wmma::store_matrix_sync(scores + j * 16, s, kLdS, wmma::mem_row_major);
  }
}

// acc (16 x E) += p [16][kTile] (16-bit, this warp's) times the staged tile b [kTile][E].
template <typename W, int E>
__device__ void accumulate(Acc (&acc)[E / 16], const W* p, const W* b) {
  FragA<W> pa[kTile / 16];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) wmma::load_matrix_sync(pa[kk], p + kk * 16, kLdP);
#pragma unroll
  for (int t = 0; t < E / 16; ++t) {
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragB<W> bf;
      wmma::load_matrix_sync(bf, b + kk * 16 * (E + kPad) + t * 16, E + kPad);
      wmma::mma_sync(acc[t], pa[kk], bf, acc[t]);
    }
  }
}

// The warp's 16 rows of a staged tile as fragments.
template <typename W, int E>
__device__ void fragments_of(FragA<W> (&a)[E / 16], const W* tile) {
  const W* mine = tile + (threadIdx.x / 32) * 16 * (E + kPad);
#pragma unroll
  for (int kk = 0; kk < E / 16; ++kk) wmma::load_matrix_sync(a[kk], mine + kk * 16, E + kPad);
}

// Writes the warp's 16 x E accumulators to rows first.. of a head (rows `ld` elements apart),
// rounded to W (rows from `limit` on skipped), through scratch (256 floats of the warp).
template <typename W, int E>
__device__ void write_rows(W* dst, int64_t ld, Acc (&acc)[E / 16], int64_t first, int64_t limit, float* scratch) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < E / 16; ++t) {
    wmma::store_matrix_sync(scratch, acc[t], 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += 32) {
      const int64_t row = first + i / 16;
      if (row < limit) dst[row * ld + t * 16 + i % 16] = to_w<W>(scratch[i]);
    }
    __syncwarp();
  }
}

// The forward: a block per 64 query rows (the causal tiles with the most keys first).
template <typename W, int E>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const W* q, const W* k, const W* v, W* out, float* lse, Sizes z, AttentionLayouts layouts,
                   float scale, Drop<float> drop) {
  constexpr Layout<E> layout = forward_layout<E>();
  drop.resolve();
  const int64_t pb = layouts.per_batch;
  extern __shared__ __align__(128) unsigned char shared[];
  const Pieces<W, E> at(shared, layout);
  W *ks = at.tile[0], *vs = at.tile[1];
  W* qs = ks;  // the queries, until each warp holds its rows as fragments
  float* scores = at.scores[0];
  W* probs = at.halves[0];
  const int lane = threadIdx.x % 32, r = lane / 2, h = lane % 2;
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTile;
  const int64_t warp_row0 = row0 + (threadIdx.x / 32) * 16, row = warp_row0 + r;
  const int64_t keys = z.keys_for(smaller(z.m, row0 + kTile) - 1);
  const int64_t mine = z.keys_for(smaller(row, z.m - 1));  // rows past m: any finite stand-in
  Acc rows;
  row_numbers(rows, scores);
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    __syncthreads();
    stage<W, E>(qs, head_of(q, layouts.q, head, pb), layouts.q.row, row0, z.m);
    __syncthreads();
    FragA<W> qa[E / 16];
    fragments_of<W, E>(qa, qs);
    Acc acc[E / 16];
#pragma unroll
    for (int t = 0; t < E / 16; ++t) wmma::fill_fragment(acc[t], 0.0f);
    float top = -INFINITY, total = 0;
    const uint64_t weights = static_cast<uint64_t>((head * z.m + row) * z.n);
    for (int64_t col0 = 0; col0 < keys; col0 += kTile) {
      __syncthreads();
      stage<W, E>(ks, head_of(k, layouts.k, head, pb), layouts.k.row, col0, z.n);
      stage<W, E>(vs, head_of(v, layouts.v, head, pb), layouts.v.row, col0, z.n);
      __syncthreads();
      scores_of<W, E>(scores, qa, ks);
      __syncwarp();
      float grown = top;
      for (int c = h; c < kTile; c += 2) {
        const float s = col0 + c < mine ? scores[r * kLdS + c] * scale : -INFINITY;
        scores[r * kLdS + c] = s;
        grown = fmaxf(grown, s);
      }
      grown = fmaxf(grown, __shfl_xor_sync(kFull, grown, 1));
      const float shrink = expf(top - grown);  // 0 on the first block: every row sees key 0
      float sum = 0;
      for (int c = h; c < kTile; c += 2) {
        const float s = scores[r * kLdS + c];
        const float p = s == -INFINITY ? 0.0f : expf(s - grown);
        sum += p;
        probs[r * kLdP + c] = to_w<W>(drop.on ? p * drop.factor(weights + col0 + c) : p);
      }
      total = total * shrink + sum + __shfl_xor_sync(kFull, sum, 1);
      top = grown;
      if (h == 0) at.stats[r] = shrink;
      __syncwarp();
      scale_rows(acc, rows, at.stats);
      accumulate<W, E>(acc, probs, vs);
    }
    __syncwarp();
    if (h == 0) at.stats[r] = 1.0f / total;
    __syncwarp();
    scale_rows(acc, rows, at.stats);
    write_rows<W, E>(head_of(out, layouts.out, head, pb), layouts.out.row, acc, warp_row0, z.m, scores);
    if (h == 0 && row < z.m) lse[head * z.m + row] = top + logf(total);
  }
}

// dq: a block per 64 query rows, over the key tiles they see.
template <typename W, int E>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(const W* q, const W* k, const W* v, const W* dout, const float* lse, const float* delta, W* dq, Sizes z,
              AttentionLayouts layouts, float scale, Drop<float> drop) {
  constexpr Layout<E> layout = dq_layout<E>();
  drop.resolve();
  const int64_t pb = layouts.per_batch;
  extern __shared__ __align__(128) unsigned char shared[];
  const Pieces<W, E> at(shared, layout);
  W *ks = at.tile[0], *vs = at.tile[1];
  W *qs = ks, *dos = vs;  // the rows' queries and output gradients, until held as fragments
  W* ds = at.halves[0];
  const int lane = threadIdx.x % 32, r = lane / 2, h = lane % 2;
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTile;
  const int64_t warp_row0 = row0 + (threadIdx.x / 32) * 16, row = warp_row0 + r;
  const int64_t keys = z.keys_for(smaller(z.m, row0 + kTile) - 1);
  const int64_t mine = row < z.m ? z.keys_for(row) : 0;
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    __syncthreads();
    stage<W, E>(qs, head_of(q, layouts.q, head, pb), layouts.q.row, row0, z.m);
    stage<W, E>(dos, head_of(dout, layouts.dout, head, pb), layouts.dout.row, row0, z.m);
    __syncthreads();
    FragA<W> qa[E / 16], da[E / 16];
    fragments_of<W, E>(qa, qs);
    fragments_of<W, E>(da, dos);
    const float row_lse = mine > 0 ? lse[head * z.m + row] : 0.0f;
    const float row_delta = mine > 0 ? delta[head * z.m + row] : 0.0f;
    const uint64_t weights = static_cast<uint64_t>((head * z.m + row) * z.n);
    Acc acc[E / 16];
#pragma unroll
    for (int t = 0; t < E / 16; ++t) wmma::fill_fragment(acc[t], 0.0f);
    for (int64_t col0 = 0; col0 < keys; col0 += kTile) {
      __syncthreads();
      stage<W, E>(ks, head_of(k, layouts.k, head, pb), layouts.k.row, col0, z.n);
      stage<W, E>(vs, head_of(v, layouts.v, head, pb), layouts.v.row, col0, z.n);
      __syncthreads();
      scores_of<W, E>(at.scores[0], qa, ks);  // S
      scores_of<W, E>(at.scores[1], da, vs);  // dP = dout v^T
      __syncwarp();
      for (int c = h; c < kTile; c += 2) {
        const float p = col0 + c < mine ? expf(at.scores[0][r * kLdS + c] * scale - row_lse) : 0.0f;
        const float dp = at.scores[1][r * kLdS + c] * (drop.on ? drop.factor(weights + col0 + c) : 1.0f);
        ds[r * kLdP + c] = to_w<W>(p * (dp - row_delta) * scale);
      }
      __syncwarp();
      accumulate<W, E>(acc, ds, ks);
    }
    __syncwarp();
    write_rows<W, E>(head_of(dq, layouts.dq, head, pb), layouts.dq.row, acc, warp_row0, z.m, at.scores[0]);
  }
}

// dk and dv: a block per 64 keys, over the tiles of the query rows that see them.
template <typename W, int E>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(const W* q, const W* k, const W* v, const W* dout, const float* lse, const float* delta, W* dk, W* dv,
                Sizes z, AttentionLayouts layouts, float scale, Drop<float> drop) {
  constexpr Layout<E> layout = dkdv_layout<E>();
  drop.resolve();
  const int64_t pb = layouts.per_batch;
  extern __shared__ __align__(128) unsigned char shared[];
  const Pieces<W, E> at(shared, layout);
  W *qs = at.tile[0], *dos = at.tile[1];
  W *pt = at.halves[0], *dst = at.halves[1];
  float* row_stats = reinterpret_cast<float*>(shared + layout.warps_end());  // [kTile] lse, [kTile] delta
  const int lane = threadIdx.x % 32, r = lane / 2, h = lane % 2;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t warp_key0 = key0 + (threadIdx.x / 32) * 16, key = warp_key0 + r;
  const int64_t first = z.causal ? larger(key0 - (z.n - z.m), 0) : 0;  // the first row that sees key0
  for (int64_t head = blockIdx.y; head < z.heads; head += gridDim.y) {
    __syncthreads();
    // The block's own keys and values, into registers.
    stage<W, E>(qs, head_of(k, layouts.k, head, pb), layouts.k.row, key0, z.n);
    stage<W, E>(dos, head_of(v, layouts.v, head, pb), layouts.v.row, key0, z.n);
    __syncthreads();
    FragA<W> ka[E / 16], va[E / 16];
    fragments_of<W, E>(ka, qs);
    fragments_of<W, E>(va, dos);
    Acc dk_acc[E / 16], dv_acc[E / 16];
#pragma unroll
    for (int t = 0; t < E / 16; ++t) {
      wmma::fill_fragment(dk_acc[t], 0.0f);
      wmma::fill_fragment(dv_acc[t], 0.0f);
    }
    for (int64_t row0 = first; row0 < z.m; row0 += kTile) {
      __syncthreads();
      stage<W, E>(qs, head_of(q, layouts.q, head, pb), layouts.q.row, row0, z.m);
      stage<W, E>(dos, head_of(dout, layouts.dout, head, pb), layouts.dout.row, row0, z.m);
      for (int i = threadIdx.x; i < kTile; i += kThreads) {
        const bool real = row0 + i < z.m;
        row_stats[i] = real ? lse[head * z.m + row0 + i] : 0.0f;
        row_stats[kTile + i] = real ? delta[head * z.m + row0 + i] : 0.0f;
      }
      __syncthreads();
      scores_of<W, E>(at.scores[0], ka, qs);   // S^T: this warp's keys against the tile's rows
      scores_of<W, E>(at.scores[1], va, dos);  // dP^T
      __syncwarp();
      for (int c = h; c < kTile; c += 2) {
        const int64_t i = row0 + c;
        const bool seen = key < z.n && i < z.m && z.sees(i, key);
        const float p = seen ? expf(at.scores[0][r * kLdS + c] * scale - row_stats[c]) : 0.0f;
        const float f = drop.on && seen ? drop.factor(static_cast<uint64_t>((head * z.m + i) * z.n + key)) : 1.0f;
        pt[r * kLdP + c] = to_w<W>(f * p);
        dst[r * kLdP + c] = to_w<W>(p * (f * at.scores[1][r * kLdS + c] - row_stats[kTile + c]) * scale);
      }
      __syncwarp();
      accumulate<W, E>(dv_acc, pt, dos);
      accumulate<W, E>(dk_acc, dst, qs);
    }
    __syncwarp();
    write_rows<W, E>(head_of(dk, layouts.dk, head, pb), layouts.dk.row, dk_acc, warp_key0, z.n, at.scores[0]);
    write_rows<W, E>(head_of(dv, layouts.dv, head, pb), layouts.dv.row, dv_acc, warp_key0, z.n, at.scores[0]);
  }
}

}  // namespace tinyddp::tensor::cuda::kernels::attention::tc
