// What the per-instruction-set convolution kernels share (conv_kernels.cc, the forward and
// the input's gradient; conv_grad_kernels.cc, the weight's gradient): the padded frame of an
// image's planes, and for same-size maps the load masks of the position-vector kernels.
// Defined inline in the build's own namespace (isa_avx2 or isa_avx512), as isa_vec.h.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_vec.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {

// Copies n floats (few: a feature map's row).
inline void copy_row(float* dst, const float* src, int64_t n) {
  if (n == 4) {
    _mm_storeu_ps(dst, _mm_loadu_ps(src));  // small maps' usual width, one move
  } else {
    for (int64_t x = 0; x < n; ++x) dst[x] = src[x];
  }
}

// Image n's planes into the padded frame (its border stays zero).
inline void fill_frame(const DirectConvArgs& a, int64_t n, float* frame) {
  const int64_t ph = a.h + 2 * a.pad_h, pw = a.w + 2 * a.pad_w;
  const float* in = a.in + n * a.c * a.h * a.w;
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t y = 0; y < a.h; ++y) {
      float* row = frame + (c * ph + y + a.pad_h) * pw + a.pad_w;
      copy_row(row, in + (c * a.h + y) * a.w, a.w);
    }
  }
}

// ---- Same-size maps: output positions in vectors ------------------------------------------
// Where the output is the input's size (stride 1, padding (k - 1) / 2) and an image's
// positions fill whole vectors, the kernels vectorize over positions instead of channels.
// Output position p = y * w + x reads input position p + (i - pad_h) * w + (j - pad_w) at tap
// (i, j), so a tap's values at positions [p, p + kLanes) are one vector load from the input
// plane, shifted, with the lanes that fall into the padding (rows above or below, columns that
// wrap around a row's end) masked out. No scatter of channel vectors into NCHW rows, and no
// block of positions left over.

constexpr int64_t kMaxTapMasks = kDirectConvTapMasks;  // kh * kw * (positions / kLanes), on the stack

inline bool same_size(const DirectConvArgs& a) {
  const int64_t positions = a.h * a.w;
  return a.oh == a.h && a.ow == a.w && positions % kLanes == 0 && a.kh * a.kw * (positions / kLanes) <= kMaxTapMasks;
}

// The lanes of positions [p, p + kLanes) whose tap (i, j) lies inside the plane, as bits.
inline uint32_t tap_bits(const DirectConvArgs& a, int64_t i, int64_t j, int64_t p) {
  uint32_t bits = 0;
  for (int64_t l = 0; l < kLanes; ++l) {
    const int64_t y = (p + l) / a.w + i - a.pad_h, x = (p + l) % a.w + j - a.pad_w;
    bits |= static_cast<uint32_t>(y >= 0 && y < a.h && x >= 0 && x < a.w) << l;
  }
  return bits;
}

// A load mask, and the masked load: the lanes of src set in the mask, the others zero and not
// read (they may lie outside the input).
#if defined(__AVX512F__)
using Mask = __mmask16;
inline Mask make_mask(uint32_t bits) { return static_cast<Mask>(bits); }
inline Vec load_lanes(const float* src, Mask m) { return _mm512_maskz_loadu_ps(m, src); }
#else
using Mask = __m256i;
inline Mask make_mask(uint32_t bits) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), lane_bit), lane_bit);
}
inline Vec load_lanes(const float* src, Mask m) { return _mm256_maskload_ps(src, m); }
#endif

// Every tap's mask at every vector of positions: masks[(i * kw + j) * vectors + v].
struct TapMasks {
  Mask m[kMaxTapMasks];
  int64_t vectors;
  explicit TapMasks(const DirectConvArgs& a) : vectors(a.h * a.w / kLanes) {
    for (int64_t i = 0; i < a.kh; ++i) {
      for (int64_t j = 0; j < a.kw; ++j) {
        for (int64_t v = 0; v < vectors; ++v)
          m[(i * a.kw + j) * vectors + v] = make_mask(tap_bits(a, i, j, v * kLanes));
      }
    }
  }
};

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
