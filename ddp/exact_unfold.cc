// exact_fold.h's unfold, the means: the int64 sums converted to double with one rounding each,
// as the scalar conversion does (4 at a time under AVX2, 8 with vcvtqq2pd under AVX-512), then
// scaled and divided as the scalar expression does.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/tensor/cpu_isa.h"

namespace tinyddp::ddp::exact {

namespace {

// Four int64 as doubles, each rounded once as the scalar conversion rounds it: v = h 2^32 + l
// (h the signed upper half, l the unsigned lower one); h 2^32 + 2^31 and l - 2^31 are exact
// doubles, and their sum, v, is rounded once.
__m256d int64_to_double(__m256i v) {
  const __m256i halves = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  const __m128i low = _mm_xor_si128(_mm256_castsi256_si128(halves), _mm_set1_epi32(std::numeric_limits<int>::min()));
  const __m128i high = _mm256_extracti128_si256(halves, 1);
  const __m256d upper = _mm256_fmadd_pd(_mm256_cvtepi32_pd(high), _mm256_set1_pd(0x1p32), _mm256_set1_pd(0x1p31));
  return _mm256_add_pd(upper, _mm256_cvtepi32_pd(low));
}

void store_means(float* out, __m256d means) { _mm_storeu_ps(out, _mm256_cvtpd_ps(means)); }
void store_means(double* out, __m256d means) { _mm256_storeu_pd(out, means); }
__attribute__((target("avx512f,avx512dq,avx512vl"))) void store_means(float* out, __m512d means) {
  _mm256_storeu_ps(out, _mm512_cvtpd_ps(means));
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) void store_means(double* out, __m512d means) {
  _mm512_storeu_pd(out, means);
}

// The division by the chunk count, or where that count is a power of two the product by its
// reciprocal, which is exact: the exact quotient rounded once either way (the same bits), at
// a fraction of a division's cost (vdivpd takes about 2 cycles a value).
bool power_of_two(double v) {
  int exponent = 0;
  return std::frexp(v, &exponent) == 0.5;
}

// The first n - n % 4 means (AVX2; the conversion as int64_to_double); returns where it stopped.
template <bool kReciprocal, typename T>
int64_t unfold_avx2(const int64_t* sums, int64_t n, double factor, double chunks, T* out) {
  const __m256d factors = _mm256_set1_pd(factor), divisor = _mm256_set1_pd(chunks),
                reciprocal = _mm256_set1_pd(1 / chunks);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d sum =
        _mm256_mul_pd(int64_to_double(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + i))), factors);
    store_means(out + i, kReciprocal ? _mm256_mul_pd(sum, reciprocal) : _mm256_div_pd(sum, divisor));
  }
  return i;
}

// The same 8 at a time, the conversion one instruction (vcvtqq2pd: one rounding, to nearest
// even, as the scalar conversion).
template <bool kReciprocal, typename T>
__attribute__((target("avx512f,avx512dq,avx512vl"))) int64_t unfold_avx512(const int64_t* sums, int64_t n,
                                                                           double factor, double chunks, T* out) {
  const __m512d factors = _mm512_set1_pd(factor), divisor = _mm512_set1_pd(chunks),
                reciprocal = _mm512_set1_pd(1 / chunks);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d sum = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_loadu_si512(sums + i)), factors);
    store_means(out + i, kReciprocal ? _mm512_mul_pd(sum, reciprocal) : _mm512_div_pd(sum, divisor));
  }
  return i;
}

template <typename T>
void unfold_values(const int64_t* sums, int64_t n, int scale, double chunks, T* out) {
  const double factor = std::ldexp(1.0, -scale);
  const bool by_reciprocal = power_of_two(chunks);
  int64_t i = 0;
  if (tensor::cpu_isa() == tensor::CpuIsa::kAvx512) {
    i = by_reciprocal ? unfold_avx512<true>(sums, n, factor, chunks, out)
                      : unfold_avx512<false>(sums, n, factor, chunks, out);
  } else {
    i = by_reciprocal ? unfold_avx2<true>(sums, n, factor, chunks, out)
                      : unfold_avx2<false>(sums, n, factor, chunks, out);
  }
  for (; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(sums[i]) * factor / chunks);
}

}  // namespace

void unfold(const int64_t* sums, int64_t n, int scale, double chunks, float* out) {
  unfold_values(sums, n, scale, chunks, out);
}

void unfold(const int64_t* sums, int64_t n, int scale, double chunks, double* out) {
  unfold_values(sums, n, scale, chunks, out);
}

}  // namespace tinyddp::ddp::exact
