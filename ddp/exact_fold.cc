// exact_fold.h: the scalar definitions and their vector forms. A float32 x scaled by 2^scale is
// exact in double. The AVX2 fold rounds it to the nearest integer, ties to even (what the
// scalar conversion does under the default rounding mode), by adding 1.5 2^52, whose bits then
// hold the integer (round_to_int64). The AVX-512 fold converts it with vcvtpd2qq under the same
// rounding. The unfold, the means: exact_unfold.cc.
#include "tinyddp/ddp/exact_fold.h"

#include <emmintrin.h>
#include <immintrin.h>

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "tinyddp/tensor/cpu_isa.h"

namespace tinyddp::ddp::exact {

namespace {

constexpr double kLimit = 0x1p62;  // no chunk's rounded value reaches it (|q| < 2^B <= 2^62)

template <typename T>
void fold_scalar(const T* values, int64_t n, int64_t* sums, double factor, Into into, T& largest, bool& finite) {
  auto* wrapping = reinterpret_cast<uint64_t*>(sums);
  for (int64_t i = 0; i < n; ++i) {
    const T a = std::fabs(values[i]);
    finite = finite && std::isfinite(a);
    largest = a > largest ? a : largest;
    if (wrapping == nullptr) continue;
    if (into == Into::kStore) wrapping[i] = 0;
    const double scaled = static_cast<double>(values[i]) * factor;
    // Beyond the grid (the step will be refused): nothing is added, so no sum can overflow.
    if (std::fabs(scaled) < kLimit) wrapping[i] += static_cast<uint64_t>(_mm_cvtsd_si64(_mm_set_sd(scaled)));
  }
}

// Four doubles v = x 2^scale (x a float32, |v| < 2^62) rounded to the nearest int64, ties to
// even. Below 2^51, v + 1.5 2^52 lies in [2^52, 2^53), where the spacing is 1: the addition
// rounds v to an integer as the scalar conversion does, and the sum's bits less the constant's
// are that integer. From 2^51 on, v (24 significant bits) is a multiple of 2^28: v 2^-11 is
// an integer below 2^51, converted the same way and shifted back. (Products by powers of two
// are exact, so the compiler's fusing a multiply with the addition changes nothing.)
__m256i round_to_int64(__m256d v) {
  const __m256d magic = _mm256_set1_pd(0x1.8p52);
  const auto convert = [&](__m256d w) {
    return _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(w, magic)), _mm256_castpd_si256(magic));
  };
  const __m256d small = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v), _mm256_set1_pd(0x1p51), _CMP_LT_OQ);
  const __m256i large = _mm256_slli_epi64(convert(_mm256_mul_pd(v, _mm256_set1_pd(0x1p-11))), 11);
  return _mm256_blendv_epi8(large, convert(v), _mm256_castpd_si256(small));
}

// The float32 fold, 8 values at a time, over the first n - n % 8 values; returns where it stopped.
int64_t fold_avx2(const float* const* chunks, int count, int64_t n, int64_t* sums, double factor, Into into,
                  float& largest, bool& finite) {
  const __m256 sign = _mm256_set1_ps(-0.0f), infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256d factors = _mm256_set1_pd(factor), limit = _mm256_set1_pd(kLimit), dsign = _mm256_set1_pd(-0.0);
  __m256 most = _mm256_setzero_ps();
  __m256 all_finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    if (sums != nullptr && into == Into::kAdd) {
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
        const __m256i q = round_to_int64(scaled);
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
  return i;
}

// The same 16 values at a time (x86-64-v4: the CPU kernels' AVX-512 level), the conversion one
// instruction (vcvtpd2qq, round to nearest even) and the grid's edge a mask on the add.
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))) int64_t fold_avx512(const float* const* chunks, int count,
                                                                                  int64_t n, int64_t* sums,
                                                                                  double factor, Into into,
                                                                                  float& largest, bool& finite) {
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512d factors = _mm512_set1_pd(factor), limit = _mm512_set1_pd(kLimit);
  __m512 most = _mm512_setzero_ps();
  __mmask16 all_finite = 0xFFFF;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    if (sums != nullptr && into == Into::kAdd) {
      sum[0] = _mm512_loadu_si512(sums + i);
      sum[1] = _mm512_loadu_si512(sums + i + 8);
    }
    for (int c = 0; c < count; ++c) {
      const __m512 x = _mm512_loadu_ps(chunks[c] + i);
      const __m512 a = _mm512_abs_ps(x);
      all_finite &= _mm512_cmp_ps_mask(a, infinity, _CMP_LT_OQ);  // false for NaN and inf
      most = _mm512_max_ps(a, most);                              // a NaN in `a` leaves `most`
      if (sums == nullptr) continue;
      for (int half = 0; half < 2; ++half) {
        const __m512d scaled = _mm512_mul_pd(
            _mm512_cvtps_pd(half == 0 ? _mm512_castps512_ps256(x) : _mm512_extractf32x8_ps(x, 1)), factors);
        const __mmask8 inside = _mm512_cmp_pd_mask(_mm512_abs_pd(scaled), limit, _CMP_LT_OQ);
        const __m512i q = _mm512_cvt_roundpd_epi64(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        sum[half] = _mm512_mask_add_epi64(sum[half], inside, sum[half], q);
      }
    }
    if (sums != nullptr) {
      _mm512_storeu_si512(sums + i, sum[0]);
      _mm512_storeu_si512(sums + i + 8, sum[1]);
    }
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, most);
  for (float lane : lanes) largest = lane > largest ? lane : largest;
  finite = finite && all_finite == 0xFFFF;
  return i;
}

// ---- products folded from registers (fold_products) -------------------------------------------
// A block of R rows by V vectors of c for every product in turn: the product's chain of fused
// multiply-adds in registers, then its values folded into the block's sums, which stay in L1
// from one product to the next. Each product's g holds the block's R rows (i0 .. i0 + R - 1 of
// the sums) contiguous, k x R (product_blocks' copy); x at its full width, read from column j0.
// Each term's V vectors of x come from L2 (a block's strip is used once per product): the more
// rows, the fewer bytes per multiply-add. AVX-512 takes 6 rows by 4 vectors (24 accumulators of
// its 32 registers; 8 by 2, 8 by 3 and 12 by 2 ran the products as fast and the folds slower,
// 4 by 4 both slower: bench/README.md), AVX2 4 by 2 (8 of its 16).

constexpr int kRowsAvx512 = 6, kRowsAvx2 = 4;

// The grid in float32 (kFloatGrid, where 1 <= 2^scale <= 2^127): acc 2^scale is then exact in
// float32 as in double (a product by a power of two that is not below 1 loses no bit; one
// beyond float32's range is an infinity, beyond the grid's edge either way), |acc| < 2^(62 -
// scale) is the same test as |acc 2^scale| < 2^62, and vcvtps2qq rounds it to the int64
// vcvtpd2qq gives for the double: the same integers from fewer instructions (the block's
// products run at k = 16 terms, where the fold costs as much as the multiply-adds).
template <int R, int V, bool kFloatGrid>
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))) void product_block_avx512(
    const Product* products, int count, int64_t m, int64_t i0, int64_t j0, int64_t* sums, float* values, double factor,
    Into into, __m512& most_so_far, __mmask16& finite_so_far) {
  // Kept in registers: through the references, every store to the sums (which may alias a
  // vector) would write them back and read them again.
  __m512 most = most_so_far;
  __mmask16 all_finite = finite_so_far;
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512d factors = _mm512_set1_pd(factor), limit = _mm512_set1_pd(kLimit);
  const __m512 float_factors = _mm512_set1_ps(kFloatGrid ? static_cast<float>(factor) : 0.0f);
  const __m512 float_limit = _mm512_set1_ps(kFloatGrid ? static_cast<float>(kLimit / factor) : 0.0f);
  for (int t = 0; t < count; ++t) {
    const Product& pr = products[t];
    __m512 acc[R][V];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    const float* g = pr.g;  // the block's R rows, term after term (product_blocks' copy)
    const float* x = pr.x + j0;
    for (int64_t p = 0; p < pr.k; ++p, g += R, x += pr.x_row) {
      __m512 b[V];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(x + 16 * v);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(g[r]);
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
      }
    }
    const bool store = t == 0 && into == Into::kStore;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        const __m512 a = _mm512_abs_ps(acc[r][v]);
        all_finite &= _mm512_cmp_ps_mask(a, infinity, _CMP_LT_OQ);
        most = _mm512_max_ps(a, most);
        if (values != nullptr) _mm512_storeu_ps(values + (i0 + r) * m + j0 + 16 * v, acc[r][v]);
        if (sums == nullptr) continue;
        int64_t* s = sums + (i0 + r) * m + j0 + 16 * v;
        if constexpr (kFloatGrid) {
          const __mmask16 inside = _mm512_cmp_ps_mask(a, float_limit, _CMP_LT_OQ);
          const __m512 scaled = _mm512_mul_ps(acc[r][v], float_factors);
          for (int half = 0; half < 2; ++half) {
            const __m512i q =
                _mm512_cvt_roundps_epi64(half == 0 ? _mm512_castps512_ps256(scaled) : _mm512_extractf32x8_ps(scaled, 1),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m512i old = store ? _mm512_setzero_si512() : _mm512_loadu_si512(s + 8 * half);
            const auto lanes = static_cast<__mmask8>(half == 0 ? inside : inside >> 8);
            _mm512_storeu_si512(s + 8 * half, _mm512_mask_add_epi64(old, lanes, old, q));
          }
          continue;
        }
        for (int half = 0; half < 2; ++half) {
          const __m512d scaled = _mm512_mul_pd(
              _mm512_cvtps_pd(half == 0 ? _mm512_castps512_ps256(acc[r][v]) : _mm512_extractf32x8_ps(acc[r][v], 1)),
              factors);
          const __mmask8 inside = _mm512_cmp_pd_mask(_mm512_abs_pd(scaled), limit, _CMP_LT_OQ);
          const __m512i q = _mm512_cvt_roundpd_epi64(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          const __m512i old = store ? _mm512_setzero_si512() : _mm512_loadu_si512(s + 8 * half);
          _mm512_storeu_si512(s + 8 * half, _mm512_mask_add_epi64(old, inside, old, q));
        }
      }
    }
  }
  most_so_far = most;
  finite_so_far = all_finite;
}

template <int R, int V>
void product_block_avx2(const Product* products, int count, int64_t m, int64_t i0, int64_t j0, int64_t* sums,
                        float* values, double factor, Into into, __m256& most_so_far, __m256& finite_so_far) {
  __m256 most = most_so_far, all_finite = finite_so_far;  // in registers, as the AVX-512 block's
  const __m256 sign = _mm256_set1_ps(-0.0f), infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256d factors = _mm256_set1_pd(factor), limit = _mm256_set1_pd(kLimit), dsign = _mm256_set1_pd(-0.0);
  for (int t = 0; t < count; ++t) {
    const Product& pr = products[t];
    __m256 acc[R][V];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    const float* g = pr.g;  // the block's R rows, term after term (product_blocks' copy)
    const float* x = pr.x + j0;
    for (int64_t p = 0; p < pr.k; ++p, g += R, x += pr.x_row) {
      __m256 b[V];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) b[v] = _mm256_loadu_ps(x + 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(g + r);
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
      }
    }
    const bool store = t == 0 && into == Into::kStore;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        const __m256 a = _mm256_andnot_ps(sign, acc[r][v]);
        all_finite = _mm256_and_ps(all_finite, _mm256_cmp_ps(a, infinity, _CMP_LT_OQ));
        most = _mm256_max_ps(a, most);
        if (values != nullptr) _mm256_storeu_ps(values + (i0 + r) * m + j0 + 8 * v, acc[r][v]);
        if (sums == nullptr) continue;
        int64_t* s = sums + (i0 + r) * m + j0 + 8 * v;
        for (int half = 0; half < 2; ++half) {
          const __m256d scaled = _mm256_mul_pd(
              _mm256_cvtps_pd(half == 0 ? _mm256_castps256_ps128(acc[r][v]) : _mm256_extractf128_ps(acc[r][v], 1)),
              factors);
          const __m256d inside = _mm256_cmp_pd(_mm256_andnot_pd(dsign, scaled), limit, _CMP_LT_OQ);
          const __m256i q = _mm256_and_si256(round_to_int64(scaled), _mm256_castpd_si256(inside));
          auto* at = reinterpret_cast<__m256i*>(s + 4 * half);
          _mm256_storeu_si256(at, store ? q : _mm256_add_epi64(_mm256_loadu_si256(at), q));
        }
      }
    }
  }
  most_so_far = most;
  finite_so_far = all_finite;
}

// Rows [row_begin, row_end) by the columns [0, full_end) (a multiple of the vector width): blocks
// of kRows rows (fewer at the end) by kV vectors (single vectors at the end). Rows outermost:
// the sums are written row after row, which the memory's prefetch follows (one chunk's fold is
// bound by writing them). Each product's g for the block's rows is first copied contiguous (k x
// kRows floats): read in place, its k terms lie a row of g apart, in the same few L1 sets, and
// came from L2 again for every block along the row (5-10% of the fold's time). Column strips
// outermost (x's strip in L1 while the blocks go down the rows) ran 1.1-1.7x slower, and so did
// strips over groups of rows whose sums stay in L2, each strip of x first copied contiguous
// (bench/README.md).
template <int kRows, int kV, int kLanes, typename Most, typename Finite, typename Block>
void product_blocks(const Product* products, int count, int64_t m, int64_t full_end, int64_t row_begin, int64_t row_end,
                    int64_t* sums, float* values, double factor, Into into, Most& most, Finite& all_finite,
                    const std::array<Block, kRows>& wide, const std::array<Block, kRows>& narrow) {
  thread_local std::vector<float> rows_of_g;
  int64_t terms = 0;
  for (int t = 0; t < count; ++t) terms += products[t].k;
  if (rows_of_g.size() < static_cast<size_t>(terms * kRows)) rows_of_g.resize(terms * kRows);
  std::vector<Product> packed(products, products + count);
  for (int64_t i0 = row_begin; i0 < row_end; i0 += kRows) {
    const int64_t rows = row_end - i0 < kRows ? row_end - i0 : kRows;
    float* at = rows_of_g.data();
    for (int t = 0; t < count; ++t) {
      const Product& pr = products[t];
      for (int64_t p = 0; p < pr.k; ++p) {
        for (int64_t r = 0; r < rows; ++r) at[p * rows + r] = pr.g[p * pr.g_row + (i0 + r) * pr.g_col];
      }
      packed[t].g = at;
      packed[t].g_row = rows;
      packed[t].g_col = 1;
      at += pr.k * rows;
    }
    int64_t j0 = 0;
    for (; j0 + kV * kLanes <= full_end; j0 += kV * kLanes) {
      wide[rows - 1](packed.data(), count, m, i0, j0, sums, values, factor, into, most, all_finite);
    }
    for (; j0 < full_end; j0 += kLanes)
      narrow[rows - 1](packed.data(), count, m, i0, j0, sums, values, factor, into, most, all_finite);
  }
}

using BlockAvx512 = void (*)(const Product*, int, int64_t, int64_t, int64_t, int64_t*, float*, double, Into, __m512&,
                             __mmask16&);
using BlockAvx2 = void (*)(const Product*, int, int64_t, int64_t, int64_t, int64_t*, float*, double, Into, __m256&,
                           __m256&);

__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))) int64_t products_avx512(
    const Product* products, int count, int64_t m, int64_t row_begin, int64_t row_end, int64_t* sums, float* values,
    double factor, Into into, float& largest, bool& finite) {
  const int64_t full_end = m / 16 * 16;
  __m512 most = _mm512_setzero_ps();
  __mmask16 all_finite = 0xFFFF;
  const auto blocks = [&](auto float_grid) {
    constexpr bool kFloat = decltype(float_grid)::value;
    // The block for R = 1 .. kRowsAvx512 rows, V vectors wide.
    const auto table = []<int... kR>(auto v, std::integer_sequence<int, kR...>) {
      return std::array<BlockAvx512, sizeof...(kR)>{product_block_avx512<kR + 1, decltype(v)::value, kFloat>...};
    };
    static constexpr auto kWide =
        table(std::integral_constant<int, 4>{}, std::make_integer_sequence<int, kRowsAvx512>{});
    static constexpr auto kNarrow =
        table(std::integral_constant<int, 1>{}, std::make_integer_sequence<int, kRowsAvx512>{});
    product_blocks<kRowsAvx512, 4, 16>(products, count, m, full_end, row_begin, row_end, sums, values, factor, into,
                                       most, all_finite, kWide, kNarrow);
  };
  if (factor >= 1 && factor <= 0x1p127) {
    blocks(std::true_type{});
  } else {
    blocks(std::false_type{});
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, most);
  for (float lane : lanes) largest = lane > largest ? lane : largest;
  finite = finite && all_finite == 0xFFFF;
  return full_end;
}

int64_t products_avx2(const Product* products, int count, int64_t m, int64_t row_begin, int64_t row_end, int64_t* sums,
                      float* values, double factor, Into into, float& largest, bool& finite) {
  static constexpr std::array<BlockAvx2, kRowsAvx2> kWide = {product_block_avx2<1, 2>, product_block_avx2<2, 2>,
                                                             product_block_avx2<3, 2>, product_block_avx2<4, 2>};
  static constexpr std::array<BlockAvx2, kRowsAvx2> kNarrow = {product_block_avx2<1, 1>, product_block_avx2<2, 1>,
                                                               product_block_avx2<3, 1>, product_block_avx2<4, 1>};
  const int64_t full_end = m / 8 * 8;
  __m256 most = _mm256_setzero_ps();
  __m256 all_finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  product_blocks<kRowsAvx2, 2, 8>(products, count, m, full_end, row_begin, row_end, sums, values, factor, into, most,
                                  all_finite, kWide, kNarrow);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, most);
  for (float lane : lanes) largest = lane > largest ? lane : largest;
  finite = finite && _mm256_movemask_ps(all_finite) == 0xFF;
  return full_end;
}

}  // namespace

void fold(const double* values, int64_t n, int64_t* sums, int scale, double& largest, bool& finite) {
  fold(&values, 1, n, sums, scale, largest, finite);
}

void fold(const float* values, int64_t n, int64_t* sums, int scale, float& largest, bool& finite) {
  fold(&values, 1, n, sums, scale, largest, finite);
}

void fold(const double* const* chunks, int count, int64_t n, int64_t* sums, int scale, double& largest, bool& finite,
          Into into) {
  for (int c = 0; c < count; ++c) {
    fold_scalar(chunks[c], n, sums, std::ldexp(1.0, scale), c == 0 ? into : Into::kAdd, largest, finite);
  }
}

void fold(const float* const* chunks, int count, int64_t n, int64_t* sums, int scale, float& largest, bool& finite,
          Into into) {
  const double factor = std::ldexp(1.0, scale);
  const int64_t i = tensor::cpu_isa() == tensor::CpuIsa::kAvx512
                        ? fold_avx512(chunks, count, n, sums, factor, into, largest, finite)
                        : fold_avx2(chunks, count, n, sums, factor, into, largest, finite);
  for (int c = 0; c < count; ++c) {
    fold_scalar(chunks[c] + i, n - i, sums == nullptr ? nullptr : sums + i, factor, c == 0 ? into : Into::kAdd, largest,
                finite);
  }
}

namespace {
// fold_products and product_values: the vector blocks, then the columns past them.
void products(const Product* products, int count, int64_t m, int64_t row_begin, int64_t row_end, int64_t* sums,
              float* values, int scale, float& largest, bool& finite, Into into) {
  const double factor = std::ldexp(1.0, scale);
  const int64_t full_end =
      tensor::cpu_isa() == tensor::CpuIsa::kAvx512
          ? products_avx512(products, count, m, row_begin, row_end, sums, values, factor, into, largest, finite)
          : products_avx2(products, count, m, row_begin, row_end, sums, values, factor, into, largest, finite);
  // The columns past the last full vector, one element at a time.
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t j = full_end; j < m; ++j) {
      for (int t = 0; t < count; ++t) {
        const Product& pr = products[t];
        float d = 0;
        for (int64_t p = 0; p < pr.k; ++p) d = std::fma(pr.g[p * pr.g_row + i * pr.g_col], pr.x[p * pr.x_row + j], d);
        if (values != nullptr) values[i * m + j] = d;
        fold_scalar(&d, 1, sums == nullptr ? nullptr : sums + i * m + j, factor, t == 0 ? into : Into::kAdd, largest,
                    finite);
      }
    }
  }
}
}  // namespace

void fold_products(const Product* products_in, int count, int64_t m, int64_t row_begin, int64_t row_end, int64_t* sums,
                   int scale, float& largest, bool& finite, Into into) {
  products(products_in, count, m, row_begin, row_end, sums, nullptr, scale, largest, finite, into);
}

void product_values(const Product& product, int64_t m, int64_t row_begin, int64_t row_end, float* values,
                    float& largest, bool& finite) {
  products(&product, 1, m, row_begin, row_end, nullptr, values, 0, largest, finite, Into::kStore);
}

}  // namespace tinyddp::ddp::exact
