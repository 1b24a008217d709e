// Transposed blocks of 4-byte elements (isa/kernels.h: transpose_32 and transpose_rows_32) and
// 16-bit matrices in AMX's pair-interleaved blocks (pack_pairs_16), built twice beside
// kernels.cc, in the same namespace isa_<name>: 8 x 8 blocks transposed in AVX registers, or
// rows gathered 8 elements to a register, or two rows interleaved 16 columns at a time (the bits
// moved, never computed on), the edges element by element.
#include <immintrin.h>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
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

// Elements 0, ld, ..., 7 ld of src in one register.
inline __m256 gather_8(const float* src, int64_t ld) {
  return _mm256_setr_ps(src[0], src[ld], src[2 * ld], src[3 * ld], src[4 * ld], src[5 * ld], src[6 * ld], src[7 * ld]);
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

// Row by row, two rows at a time: each row's next 8 elements gathered from 8 lines of src (the
// second row's from the same lines) and stored as one vector. For the copies tiles do not pay
// for (loops.h: tiles_pay), where src's lines stay in the caches from one row to the next.
void transpose_rows_32(int64_t rows, int64_t cols, float* dst, int64_t ld_dst, const float* src, int64_t ld_src) {
  const int64_t full_cols = cols / 8 * 8;
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    float* out = dst + r * ld_dst;
    const float* in = src + r;
    for (int64_t c = 0; c < full_cols; c += 8) {
      const float* column = in + c * ld_src;
      _mm256_storeu_ps(out + c, gather_8(column, ld_src));
      _mm256_storeu_ps(out + ld_dst + c, gather_8(column + 1, ld_src));
    }
    for (int64_t c = full_cols; c < cols; ++c) {
      out[c] = in[c * ld_src];
      out[ld_dst + c] = in[c * ld_src + 1];
    }
  }
  if (r < rows) {  // an odd last row
    float* out = dst + r * ld_dst;
    const float* in = src + r;
    for (int64_t c = 0; c < full_cols; c += 8) _mm256_storeu_ps(out + c, gather_8(in + c * ld_src, ld_src));
    for (int64_t c = full_cols; c < cols; ++c) out[c] = in[c * ld_src];
  }
}

// Rows 2q and 2q + 1 of a row-major b interleaved into the block's line q: 16 columns at a time
// in registers (unpacking works within 128-bit lanes, so the lanes are put back in order after).
void interleave_rows(const uint16_t* top, const uint16_t* bottom, int64_t width, uint16_t* line) {
  int64_t c = 0;
  for (; c + 16 <= width; c += 16) {
    const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(top + c));
    const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bottom + c));
    const __m256i lo = _mm256_unpacklo_epi16(r0, r1);  // columns 0-3 and 8-11, in pairs
    const __m256i hi = _mm256_unpackhi_epi16(r0, r1);  // columns 4-7 and 12-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(line + 2 * c), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(line + 2 * c + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
  for (; c < width; ++c) {
    line[2 * c] = top[c];
    line[2 * c + 1] = bottom[c];
  }
}

void pack_pairs_16(const PairPackArgs& p) {
  const int64_t pairs = p.k / 2, block_elements = p.k * p.width;
  if (p.row_stride == 1) {  // column-major: each column's pairs are 4-byte words, transposed as such
    for (int64_t block = p.block_from; block < p.block_to; ++block) {
      transpose_32(pairs, p.width, reinterpret_cast<float*>(p.dst + block * block_elements), p.width,
                   reinterpret_cast<const float*>(p.b + block * p.width * p.column_stride), p.column_stride / 2);
    }
    return;
  }
  // Row-major: rows 2q and 2q + 1 interleaved, read once from end to end (a line of each block in
  // turn), not once per block.
  const int64_t first = p.block_from * p.width, width = (p.block_to - p.block_from) * p.width;
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t* top = p.b + 2 * q * p.row_stride;
    for (int64_t c = 0; c < width; c += p.width) {
      interleave_rows(top + first + c, top + p.row_stride + first + c, p.width,
                      p.dst + (first + c) * p.k + q * 2 * p.width);
    }
  }
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
