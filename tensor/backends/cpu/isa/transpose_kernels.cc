// Transposed blocks of 4-byte elements (isa/kernels.h: transpose_32), built twice beside
// kernels.cc, in the same namespace isa_<name>: 8 x 8 blocks transposed in AVX registers (the
// bits moved, never computed on), the block's edges element by element.
#include <immintrin.h>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace {

// dst rows 0..7 (row stride ld_dst), 8 elements each = src rows 0..7 (row stride ld_src),
// transposed.
inline void transpose_8x8(float* dst, int64_t ld_dst, const float* src, int64_t ld_src) {
  __m256 r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * ld_src);
  // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves: column k of the
  // block ends in register k.
  __m256 u[8];
  for (int k = 0; k < 8; k += 2) {
    u[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    u[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  __m256 v[8];
  for (int k = 0; k < 8; k += 4) {
    v[k] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    v[k + 1] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    v[k + 2] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    v[k + 3] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(dst + k * ld_dst, _mm256_permute2f128_ps(v[k], v[k + 4], 0x20));
    _mm256_storeu_ps(dst + (k + 4) * ld_dst, _mm256_permute2f128_ps(v[k], v[k + 4], 0x31));
  }
}

}  // namespace

void transpose_32(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src) {
  const int64_t full_rows = rows / 8 * 8, full_cols = cols / 8 * 8;
  for (int64_t c = 0; c < full_cols; c += 8) {
    for (int64_t r = 0; r < full_rows; r += 8)
      transpose_8x8(dst + r * ld_dst + c, ld_dst, src + c * ld_src + r, ld_src);
  }
  // The edges: the last rows under 8 (every column), then the last columns under 8.
  for (int64_t r = full_rows; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * ld_dst + c] = src[c * ld_src + r];
  }
  for (int64_t r = 0; r < full_rows; ++r) {
    for (int64_t c = full_cols; c < cols; ++c) dst[r * ld_dst + c] = src[c * ld_src + r];
  }
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
