// exact_fold.h: the scalar definition, and its AVX2 form for float32 gradients. A float32 x
// scaled by 2^scale is exact in double; _mm256_round_pd rounds it to the nearest integer, ties
// to even (what the scalar conversion does under the default rounding mode); the integral
// double becomes an int64 from its bits: the 53-bit significand shifted by the exponent.
#include "tinyddp/ddp/exact_fold.h"

#include <emmintrin.h>
#include <immintrin.h>

#include <cmath>
#include <limits>

namespace tinyddp::ddp::exact {

namespace {

constexpr double kLimit = 0x1p62;  // no chunk's rounded value reaches it (|q| < 2^B <= 2^62)

template <typename T>
void fold_scalar(const T* values, int64_t n, int64_t* sums, double factor, T& largest, bool& finite) {
  auto* wrapping = reinterpret_cast<uint64_t*>(sums);
  for (int64_t i = 0; i < n; ++i) {
    const T a = std::fabs(values[i]);
    finite = finite && std::isfinite(a);
    largest = a > largest ? a : largest;
    if (wrapping != nullptr) {
      const double scaled = static_cast<double>(values[i]) * factor;
      // Beyond the grid (the step will be refused): nothing is added, so no sum can overflow.
      if (std::fabs(scaled) < kLimit) wrapping[i] += static_cast<uint64_t>(_mm_cvtsd_si64(_mm_set_sd(scaled)));
    }
  }
}

// Four integral doubles (|r| < 2^62) as int64: the significand with its hidden bit, shifted
// left by e - 52 or right by 52 - e (e the unbiased exponent; zero shifts out entirely).
__m256i integral_to_int64(__m256d r) {
  const __m256i bits = _mm256_castpd_si256(r);
  const __m256i exponent = _mm256_sub_epi64(_mm256_and_si256(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(0x7FF)),
                                            _mm256_set1_epi64x(1023));
  const __m256i significand = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x((int64_t{1} << 52) - 1)),
                                              _mm256_set1_epi64x(int64_t{1} << 52));
  const __m256i k52 = _mm256_set1_epi64x(52);
  // Counts beyond 63 (zero's exponent; the unused direction) give 0.
  const __m256i right = _mm256_srlv_epi64(significand, _mm256_sub_epi64(k52, exponent));
  const __m256i left = _mm256_sllv_epi64(significand, _mm256_sub_epi64(exponent, k52));
  const __m256i magnitude = _mm256_blendv_epi8(right, left, _mm256_cmpgt_epi64(exponent, k52));
  const __m256i negative = _mm256_cmpgt_epi64(_mm256_setzero_si256(), bits);  // the sign bit
  return _mm256_sub_epi64(_mm256_xor_si256(magnitude, negative), negative);
}

}  // namespace

void fold(const double* values, int64_t n, int64_t* sums, int scale, double& largest, bool& finite) {
  fold(&values, 1, n, sums, scale, largest, finite);
}

void fold(const float* values, int64_t n, int64_t* sums, int scale, float& largest, bool& finite) {
  fold(&values, 1, n, sums, scale, largest, finite);
}

void fold(const double* const* chunks, int count, int64_t n, int64_t* sums, int scale, double& largest, bool& finite) {
  for (int c = 0; c < count; ++c) fold_scalar(chunks[c], n, sums, std::ldexp(1.0, scale), largest, finite);
}

void fold(const float* const* chunks, int count, int64_t n, int64_t* sums, int scale, float& largest, bool& finite) {
  const double factor = std::ldexp(1.0, scale);
  const __m256 sign = _mm256_set1_ps(-0.0f), infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256d factors = _mm256_set1_pd(factor), limit = _mm256_set1_pd(kLimit), dsign = _mm256_set1_pd(-0.0);
  __m256 most = _mm256_setzero_ps();
  __m256 all_finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    if (sums != nullptr) {
      sum[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + i));
      sum[1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + i + 4));
    }
    for (int c = 0; c < count; ++c) {
      const __m256 x = _mm256_loadu_ps(chunks[c] + i);
      const __m256 a = _mm256_andnot_ps(sign, x);
      all_finite = _mm256_and_ps(all_finite, _mm256_cmp_ps(a, infinity, _CMP_LT_OQ));  // false for NaN and inf
      most = _mm256_max_ps(a, most);                                                   // a NaN in `a` leaves `most`
      if (sums == nullptr) continue;
      for (int half = 0; half < 2; ++half) {
        const __m256d scaled = _mm256_mul_pd(
            _mm256_cvtps_pd(half == 0 ? _mm256_castps256_ps128(x) : _mm256_extractf128_ps(x, 1)), factors);
        const __m256d inside = _mm256_cmp_pd(_mm256_andnot_pd(dsign, scaled), limit, _CMP_LT_OQ);
        const __m256i q = integral_to_int64(_mm256_round_pd(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum[half] = _mm256_add_epi64(sum[half], _mm256_and_si256(q, _mm256_castpd_si256(inside)));
      }
    }
    if (sums != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + i), sum[0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + i + 4), sum[1]);
    }
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, most);
  for (float lane : lanes) largest = lane > largest ? lane : largest;
  finite = finite && _mm256_movemask_ps(all_finite) == 0xFF;
  for (int c = 0; c < count; ++c) {
    fold_scalar(chunks[c] + i, n - i, sums == nullptr ? nullptr : sums + i, factor, largest, finite);
  }
}

}  // namespace tinyddp::ddp::exact
