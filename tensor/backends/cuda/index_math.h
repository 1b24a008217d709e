// 32-bit index arithmetic for the elementwise kernels' general path (elementwise.cu): a launch
// of fewer than 2^31 elements whose every offset fits in 31 bits turns each element's linear
// index into per-operand offsets with 32-bit integers, dividing by each dim's size through a
// multiply-high and a shift fixed on the host, instead of a 64-bit division and remainder per
// dim (which a GPU emulates in dozens of instructions: a transposing copy ran at 220 GB/s on an
// H200). Plain C++ usable by nvcc and by the host compiler alike, so that tests check the
// arithmetic on every CI machine (cuda_plan_test).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "tinyddp/tensor/backends/cuda/kernels.h"

#if defined(__CUDACC__)
#define TDDP_HOST_DEVICE __host__ __device__
#else
#define TDDP_HOST_DEVICE
#endif

namespace tinyddp::tensor::cuda::kernels {

// n / d for n < 2^31 and 1 <= d < 2^31 without a division: with s the least shift such that
// 2^s >= d and m = floor(2^32 (2^s - d) / d) + 1 (which fits 32 bits), n / d is
// (floor(n m / 2^32) + n) >> s (round-up multiplication by a reciprocal; the sum stays below
// 2^32 because the high product is at most n).
struct Divider32 {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;

  static Divider32 of(uint32_t d) {
    Divider32 out;
    out.divisor = d;
    while ((uint64_t{1} << out.shift) < d) ++out.shift;
    out.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << out.shift) - d)) / d + 1);
    return out;
  }

  TDDP_HOST_DEVICE uint32_t divide(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const auto high = static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

// A Geometry and its operands' strides in 32-bit form.
template <int N>
struct NarrowGeometry {
  int ndim = 0;
  uint32_t numel = 0;
  Divider32 sizes[kMaxDims];
  int32_t strides[N][kMaxDims] = {};
};

// `g` and `ops` in 32-bit form into `out`, or false where they do not fit: 2^31 elements or
// more, or an operand whose farthest element lies 2^31 or more elements from its first.
template <int N>
bool narrow_geometry(const Geometry& g, const Operand* const (&ops)[N], NarrowGeometry<N>& out) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (g.numel >= kLimit || g.ndim > kMaxDims) return false;
  out.ndim = g.ndim;
  out.numel = static_cast<uint32_t>(g.numel);
  for (int d = 0; d < g.ndim; ++d) {
    if (g.sizes[d] < 1) return false;
    out.sizes[d] = Divider32::of(static_cast<uint32_t>(g.sizes[d]));
  }
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < g.ndim; ++d) {
      reach += (g.sizes[d] - 1) * std::llabs(ops[k]->strides[d]);
      if (reach >= kLimit) return false;
      out.strides[k][d] = static_cast<int32_t>(ops[k]->strides[d]);
    }
  }
  return true;
}

// The offsets (in elements) of linear index i in each operand: row-major over g's dims, the
// last one fastest, as the 64-bit path's.
template <int N>
TDDP_HOST_DEVICE inline void narrow_offsets(const NarrowGeometry<N>& g, uint32_t i, int64_t (&off)[N]) {
  int32_t at[N];
  for (int k = 0; k < N; ++k) at[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const uint32_t rest = g.sizes[d].divide(i);
    const auto coord = static_cast<int32_t>(i - rest * g.sizes[d].divisor);
    i = rest;
    for (int k = 0; k < N; ++k) at[k] += coord * g.strides[k][d];
  }
  for (int k = 0; k < N; ++k) off[k] = at[k];
}

}  // namespace tinyddp::tensor::cuda::kernels
