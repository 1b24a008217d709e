// What the two flash attention files share: attention.cu (CUDA cores, every floating dtype and
// the entry points of kernels.h) and attention_tc.cu (tensor cores, 16-bit dtypes, the widths
// 64 and 128). Both walk the keys in blocks of 64 with a running maximum per query row, as the
// CPU twin (tensor/backends/cpu/flash_attention.cc) does, and keep lse = max + log(sum) per row
// so that either backward takes either forward's statistics.
#pragma once

#ifndef TINYDDP_CUDA_EMULATION  // tests/tensor/cuda_emulation.h supplies CUDA's names instead
#include <cuda_runtime.h>
#endif

#include <cstdint>

#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/internal/philox.h"

namespace tinyddp::tensor::cuda::kernels::attention {

__host__ __device__ inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }

// Where head `head` (of batch x per_batch) of an operand laid out as `s` starts, in elements.
__host__ __device__ inline int64_t head_offset(const HeadStrides& s, int64_t head, int64_t per_batch) {
  return head / per_batch * s.batch + head % per_batch * s.head;
}
template <typename T>
__host__ __device__ T* head_of(T* first, const HeadStrides& s, int64_t head, int64_t per_batch) {
  return first + head_offset(s, head, per_batch);
}

struct Sizes {
  int64_t heads, m, n, e, ev;
  bool causal;
  // How many keys (a prefix) query row `row` sees.
  __device__ int64_t keys_for(int64_t row) const { return causal ? smaller(n, row + n - m + 1) : n; }
  // Whether query row `row` sees key `key`.
  __device__ bool sees(int64_t row, int64_t key) const { return !causal || key <= row + n - m; }
};

// Attention dropout: the factor of weight index i (1 / keep where kept, else 0; 1 when off).
// Element (head, i, j) of the [heads, m, n] weights has index (head m + i) n + j, as dropout's
// own mask over the weights. The key is `seed`, or the word at `slot` (a CUDA graph's, filled
// before each replay), which each kernel reads first (resolve).
template <typename A>
struct Drop {
  bool on;
  uint64_t seed;
  const uint64_t* slot;
  float keep;
  A kept;
  __device__ void resolve() {
    if (on && slot != nullptr) seed = *slot;
  }
  __device__ A factor(uint64_t i) const { return !on || philox::dropout_keep(seed, i, keep) ? kept : A(0); }
  // The same for increasing indices (a row of the weights), a Philox block per four.
  __device__ A factor(philox::KeepStream& stream, uint64_t i) const { return !on || stream(i) ? kept : A(0); }
};

template <typename A>
Drop<A> drop_of(double p, uint64_t seed, const uint64_t* slot) {
  return Drop<A>{p > 0, seed, slot, static_cast<float>(1.0 - p), static_cast<A>(p > 0 ? 1.0 / (1.0 - p) : 1.0)};
}

#ifdef __CUDACC__
// Launches kernel over blocks of `tile` rows (of `rows`) by heads (past 65,535 heads each block
// loops over several), `threads` per block and `bytes` of dynamic shared memory, raising the
// kernel's limit past 48 KB where needed. Both files' kernels go through it.
template <typename Kernel, typename... Args>
cudaError_t launch_tiles(Kernel kernel, int64_t rows, int tile, int64_t heads, int threads, size_t bytes,
                         cudaStream_t stream, Args... args) {
  if (bytes > 48 * 1024) {
    const cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (status != cudaSuccess) return status;
  }
  const dim3 grid(static_cast<unsigned>((rows + tile - 1) / tile), static_cast<unsigned>(smaller(heads, 65535)));
  kernel<<<grid, threads, bytes, stream>>>(args...);
  return cudaGetLastError();
}
#endif

// attention_tc.cu. takes: whether the tensor-core kernels take this call (float16 or bfloat16,
// e == ev of 64 or 128, every pointer 16-byte aligned and every stride of the layouts a whole
// number of 16 bytes, for the vector loads). The operands may lie in any such layouts
// (kernels.h's AttentionLayouts); lse and delta are contiguous [heads, m]. The forward writes
// out and lse (float); the backward writes dq, dk, dv from the forward's lse and from delta =
// rowsum(dout * out), which the caller has computed.
bool tc_takes(int dtype, int64_t e, int64_t ev, const void* const* pointers, int count,
              const AttentionLayouts& layouts);
int tc_forward(const void* q, const void* k, const void* v, int dtype, void* out, float* lse, const Sizes& z,
               const AttentionLayouts& layouts, double scale, const Drop<float>& drop, cudaStream_t stream);
int tc_backward(const void* q, const void* k, const void* v, const void* dout, const float* lse, const float* delta,
                int dtype, void* dq, void* dk, void* dv, const Sizes& z, const AttentionLayouts& layouts, double scale,
                const Drop<float>& drop, cudaStream_t stream);

}  // namespace tinyddp::tensor::cuda::kernels::attention
