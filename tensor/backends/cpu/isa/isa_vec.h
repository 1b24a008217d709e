// One vector register of floats and the few operations the per-instruction-set loops need
// (gemm_kernels.cc, conv_kernels.cc): 16 lanes in 32 registers under AVX-512, 8 lanes in 16
// registers under AVX2. The functions are defined in the build's own namespace (isa_avx2 or
// isa_avx512), so that no symbol is shared between the two builds (isa_symbols_test).
// FMA intrinsics: GCC contracts no a * b + c in these files (-ffp-contract=off).
#pragma once

#include <immintrin.h>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline __mmask16 lane_mask(int count) { return static_cast<__mmask16>((1u << count) - 1); }
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vload_part(const float* p, int count) { return _mm512_maskz_loadu_ps(lane_mask(count), p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline void vstore_part(float* p, Vec v, int count) { _mm512_mask_storeu_ps(p, lane_mask(count), v); }
inline Vec vbroadcast(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(Vec v) { return _mm512_reduce_add_ps(v); }
#else
using Vec = __m256;
constexpr int kLanes = 8;
inline __m256i lane_mask(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vload_part(const float* p, int count) { return _mm256_maskload_ps(p, lane_mask(count)); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline void vstore_part(float* p, Vec v, int count) { _mm256_maskstore_ps(p, lane_mask(count), v); }
inline Vec vbroadcast(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(Vec v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
#endif

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
