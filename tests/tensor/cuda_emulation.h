// A host emulation of the CUDA that tensor/backends/cuda/attention_tc.cuh's kernels use, so
// that attention_tc_emulation_test.cc runs those very kernels on the CPU in every CI run: a
// block is 128 std::threads (blocks one after another, over one shared-memory buffer),
// __syncthreads and __syncwarp are barriers, a shuffle goes through a per-warp slot array, and
// WMMA's fragments hold a whole 16 x 16 tile in every lane (element i at row i / 16, column
// i % 16; a store writes each lane's share). The 16-bit types round to nearest-even as the
// GPU's conversions do; products add in float. What it cannot check is the GPU's own fragment
// layout (that loads place elements as products do): the GPU cases of attention_test.cc do.
// Include it before the kernels' header, with TINYDDP_CUDA_EMULATION defined.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

using cudaStream_t = void*;
using cudaError_t = int;

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 gridDim, blockDim;

// float16 and bfloat16 as bits, rounded to nearest-even from float.
struct __half {
  _Float16 value;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __half __float2half_rn(float v) { return {static_cast<_Float16>(v)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
inline float emulated_float(__half v) { return static_cast<float>(v.value); }
inline float emulated_float(__nv_bfloat16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float emulated_float(float v) { return v; }

namespace cuda_emulation {

// The barriers and shuffle slots of the block that runs now.
struct Block {
  std::barrier<> all{128};
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  float slots[4][32] = {};
  Block() {
    for (int w = 0; w < 4; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  }
};
inline Block*& current() {
  static Block* block = nullptr;
  return block;
}

// Runs kernel(args...) over `grid` blocks of 128 threads, one block at a time.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, Args... args) {
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block block;
      current() = &block;
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < 128; ++t) {
        threads.emplace_back([&, t] {
          threadIdx = {t, 0, 0};
          blockIdx = {bx, by, 0};
          gridDim = grid;
          blockDim = {128, 1, 1};
          kernel(args...);
        });
      }
      for (std::thread& thread : threads) thread.join();
      current() = nullptr;
    }
  }
}

}  // namespace cuda_emulation

inline void __syncthreads() { cuda_emulation::current()->all.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  cuda_emulation::current()->warps[threadIdx.x / 32]->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  cuda_emulation::Block& block = *cuda_emulation::current();
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  block.slots[warp][lane] = v;
  __syncwarp();
  const float other = block.slots[warp][lane ^ static_cast<unsigned>(lane_mask)];
  __syncwarp();
  return other;
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int num_elements = 256;
  T x[256];
};

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  constexpr bool column = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = column ? p[c * ldm + r] : p[r * ldm + c];
  }
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
  }
}
// Each lane writes its share of the tile (elements lane, lane + 32, ...), as the GPU's lanes do.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  for (int i = static_cast<int>(threadIdx.x % 32); i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    (l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[i];
  }
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (float& e : f.x) e = v;
}
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float total = c.x[r * 16 + col];
      for (int k = 0; k < 16; ++k) total += emulated_float(a.x[r * 16 + k]) * emulated_float(b.x[k * 16 + col]);
      out[r * 16 + col] = total;
    }
  }
  std::memcpy(d.x, out, sizeof(out));
}

}  // namespace nvcuda::wmma
