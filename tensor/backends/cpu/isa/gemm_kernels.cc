// The narrow float32 products of one instruction set (isa/kernels.h: narrow_gemm_f32), built
// twice beside kernels.cc, in the same namespace isa_<name>. A product with one dimension of
// 16 or less (a classifier's 10 outputs: the MLP's h @ W3^T, g @ W3 and g^T @ h) gives a
// general GEMM little to block: Eigen's packed kernel ran them at 41-68% of the FMA peak on
// the Zen 4 machine (bench/README.md). Two register-blocked loops do them instead:
//  - dots: c [n, m] = a (row-major) x b (column-major) with m <= 16 or n <= 16 (a chunk's
//    x @ W^T, 16 rows): each output is the dot product of a row of a and a column of b, both
//    contiguous; R x C of them at once, k in vectors.
//  - rows: c = a x b (row-major) with n <= 16 or k <= 16: R rows x V vectors of c in
//    registers, each step adds a(i, p) (broadcast) times V vectors of b's row p.
// Other layouts and sizes (narrow_gemm, at the end, says which) take the general GEMM.
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "tinyddp/tensor/backends/cpu/isa/isa_macros.h"
#include "tinyddp/tensor/backends/cpu/isa/isa_vec.h"
#include "tinyddp/tensor/backends/cpu/isa/kernel_parts.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"

namespace tinyddp::tensor::cpu {
namespace TINYDDP_ISA_NAMESPACE {
namespace {

// Register blocks (isa_vec.h's registers): rows takes up to kFewRowsR x kFewRowsV or
// kFewTermsR x kFewTermsV accumulators, dots kDotRows x kDotCols.
#if defined(__AVX512F__)
constexpr int kFewRowsR = 12, kFewRowsV = 2, kFewTermsR = 6, kFewTermsV = 4, kDotRows = 4, kDotCols = 5;
constexpr int64_t kFewTermsMostOutputs = INT64_MAX;  // narrow_gemm says why
constexpr int64_t kFewRowsMost = 32;
#else
constexpr int64_t kFewTermsMostOutputs = int64_t(256) << 10;
constexpr int64_t kFewRowsMost = 16;
constexpr int kFewRowsR = 6, kFewRowsV = 2, kFewTermsR = 3, kFewTermsV = 4, kDotRows = 3, kDotCols = 4;
#endif
constexpr int kNarrow = 16;                    // the widest dimension that counts as narrow
constexpr int64_t kDotsMostRows = 32;          // dots: rows (when the outputs are not few)
constexpr int64_t kDotsMinTerms = 8 * kLanes;  // dots: at least 8 vectors' worth of k per output

// The size of the blocks of at most `most` that cover `total` most evenly (the last may be
// smaller).
int64_t even_block(int64_t total, int64_t most) {
  const int64_t blocks = (total + most - 1) / most;
  return (total + blocks - 1) / blocks;
}

// ---- dots: c[i0 + r, j0 + c] for r < R, c < C --------------------------------------------------
// The loops over r and c are unrolled so that the R x C accumulators stay in registers.

template <int R, int C>
void dots_block(const GemmArgs<float>& g, int64_t i0, int64_t j0) {
  Vec acc[R][C];
  const float* arow[R];
  const float* bcol[C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) arow[r] = g.a + (i0 + r) * g.lda;
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) bcol[c] = g.b + (j0 + c) * g.ldb;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = vzero();
  }
  const auto step = [&](auto load) {
    Vec av[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) av[r] = load(arow[r]);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const Vec bv = load(bcol[c]);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][c] = vfma(av[r], bv, acc[r][c]);
    }
  };
  int64_t p = 0;
  for (; p + kLanes <= g.k; p += kLanes) step([p](const float* x) { return vload(x + p); });
  if (p < g.k) {
    const int count = static_cast<int>(g.k - p);
    step([p, count](const float* x) { return vload_part(x + p, count); });
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) g.c[(i0 + r) * (g.ldc > 0 ? g.ldc : g.m) + j0 + c] = vsum(acc[r][c]);
  }
}

// The blocks' instantiations as tables of plain arrays (no std::array: this file defines no
// inline function another translation unit could share; tests/tensor:isa_symbols_test).
using DotsBlock = void (*)(const GemmArgs<float>&, int64_t, int64_t);
struct DotsRow {
  DotsBlock cols[kDotCols];  // [C - 1]
};
struct DotsTable {
  DotsRow rows[kDotRows];  // [R - 1]
};
template <int R, int... Cs>
constexpr DotsRow dots_row(std::integer_sequence<int, Cs...>) {
  return DotsRow{{dots_block<R, Cs + 1>...}};
}
template <int... Rs>
constexpr DotsTable dots_table(std::integer_sequence<int, Rs...>) {
  return DotsTable{{dots_row<Rs + 1>(std::make_integer_sequence<int, kDotCols>())...}};
}
constexpr DotsTable kDots = dots_table(std::make_integer_sequence<int, kDotRows>());

// The block at (i0, j0), R and C cut to what is left of c.
void dots_at(const GemmArgs<float>& g, int64_t i0, int64_t j0, int64_t cols) {
  const int64_t r = g.n - i0 < kDotRows ? g.n - i0 : kDotRows;
  const int64_t c = g.m - j0 < cols ? g.m - j0 : cols;
  kDots.rows[r - 1].cols[c - 1](g, i0, j0);
}

// The longer side's loop outside: each block of it is read from memory once while the short
// side's rows (16 or fewer, k terms each) stay in the cache, be the long side a's rows (h @ W3^T,
// 10 outputs) or b's columns (one chunk's x @ W^T: 16 rows of x, W's 1024 rows).
void dots(const GemmArgs<float>& g) {
  const int64_t cols = even_block(g.m, kDotCols);
  if (g.n >= g.m) {
    for (int64_t i0 = 0; i0 < g.n; i0 += kDotRows) {
      for (int64_t j0 = 0; j0 < g.m; j0 += cols) dots_at(g, i0, j0, cols);
    }
  } else {
    for (int64_t j0 = 0; j0 < g.m; j0 += cols) {
      for (int64_t i0 = 0; i0 < g.n; i0 += kDotRows) dots_at(g, i0, j0, cols);
    }
  }
}

// ---- rows: c[i0 + r, j0 .. j0 + V vectors) for r < R -------------------------------------------
// The last vector holds `last` columns when kPartial (masked loads and stores), else kLanes.
// Each step prefetches b's row `ahead` rows on (0: the row it loads, nothing to fetch).

template <int R, int V, bool kPartial>
void rows_block(const GemmArgs<float>& g, int64_t i0, int64_t j0, int last, int64_t ahead) {
  const int64_t a_row = g.a_row_major ? g.lda : 1, a_col = g.a_row_major ? 1 : g.lda;
  const float* a = g.a + i0 * a_row;
  const float* b = g.b + j0;
  Vec acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = vzero();
  }
  for (int64_t p = 0; p < g.k; ++p, b += g.ldb, a += a_col) {
    Vec bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      bv[v] = kPartial && v == V - 1 ? vload_part(b + v * kLanes, last) : vload(b + v * kLanes);
      _mm_prefetch(reinterpret_cast<const char*>(b + ahead * g.ldb + v * kLanes), _MM_HINT_T0);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec x = vbroadcast(a[r * a_row]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = vfma(x, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* c = g.c + (i0 + r) * (g.ldc > 0 ? g.ldc : g.m) + j0;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if (kPartial && v == V - 1) {
        vstore_part(c + v * kLanes, acc[r][v], last);
      } else {
        vstore(c + v * kLanes, acc[r][v]);
      }
    }
  }
}

using RowsBlock = void (*)(const GemmArgs<float>&, int64_t, int64_t, int, int64_t);

// The instantiations for up to kR rows and kV vectors: [R - 1][vectors - 1], with all
// vectors full or the last one partial.
template <int kR, int kV>
struct RowsTable {
  RowsBlock full[kR][kV], part[kR][kV];
};
template <int R, int... Vs>
constexpr void fill_rows(RowsBlock (&full)[sizeof...(Vs)], RowsBlock (&part)[sizeof...(Vs)],
                         std::integer_sequence<int, Vs...>) {
  ((full[Vs] = rows_block<R, Vs + 1, false>), ...);
  ((part[Vs] = rows_block<R, Vs + 1, true>), ...);
}
template <int kR, int kV, int... Rs>
constexpr RowsTable<kR, kV> rows_table(std::integer_sequence<int, Rs...>) {
  RowsTable<kR, kV> t{};
  (fill_rows<Rs + 1>(t.full[Rs], t.part[Rs], std::make_integer_sequence<int, kV>()), ...);
  return t;
}

// c in blocks of R rows or fewer by strips of kV vectors (the last strip what is left). With
// few rows, strip by strip, each down all row blocks: a strip of b (k rows of kV vectors) is read
// from memory once and from the cache for the other row blocks (16 x 1024 x 1024: 0.55 -> 0.36
// ms). With few terms, row block by row block: c, the most memory, is written in order.
// A long strip's rows are a row of b apart (4 KB at 1024 columns: a page, past the hardware's
// stride prefetcher), so they are prefetched 16 rows ahead: in the MLP's training step at chunks
// of 16 rows (2 processes), g @ W2 took 0.51 ms a call without, 0.29 with (bench/README.md).
template <int kR, int kV>
void rows(const RowsTable<kR, kV>& t, const GemmArgs<float>& g, bool strips_outside) {
  constexpr int64_t kChunk = int64_t(kV) * kLanes;
  const int64_t ahead = strips_outside && g.k >= 4 * kNarrow ? kNarrow : 0;
  const int64_t block = even_block(g.n, kR);
  const int64_t full_end = g.m / kChunk * kChunk, left = g.m - full_end;
  const int vectors = static_cast<int>((left + kLanes - 1) / kLanes);
  const int last = static_cast<int>(left - int64_t(vectors - 1) * kLanes);
  const auto one = [&](int64_t i0, int64_t j0) {
    const int r = static_cast<int>(g.n - i0 < block ? g.n - i0 : block);
    if (j0 < full_end) return t.full[r - 1][kV - 1](g, i0, j0, kLanes, ahead);
    (last == kLanes ? t.full : t.part)[r - 1][vectors - 1](g, i0, j0, last, ahead);
  };
  if (strips_outside) {
    for (int64_t j0 = 0; j0 < g.m; j0 += kChunk) {
      for (int64_t i0 = 0; i0 < g.n; i0 += block) one(i0, j0);
    }
  } else {
    for (int64_t i0 = 0; i0 < g.n; i0 += block) {
      for (int64_t j0 = 0; j0 < g.m; j0 += kChunk) one(i0, j0);
    }
  }
}

// Few rows (n <= 16, k long): all of them at once, two vectors wide. Few terms (k <= 16, n
// long): fewer rows, four vectors wide, for fewer loads per multiply-add (a's values are
// broadcast one by one).
constexpr auto kFewRows = rows_table<kFewRowsR, kFewRowsV>(std::make_integer_sequence<int, kFewRowsR>());
constexpr auto kFewTerms = rows_table<kFewTermsR, kFewTermsV>(std::make_integer_sequence<int, kFewTermsR>());

}  // namespace

// Where each loop beat Eigen's GEMM (Zen 4, AVX-512; bench/README.md, "Narrow products"):
//  - dots: every shape measured with k >= 128 (m = 10 and 16, n = 64-4096, k = 128-4096).
//    Each output ends in a horizontal sum of its vector, which a short k does not pay for:
//    24 x 64 x 16 took 1.22 us against Eigen's 1.13, 48 x 16 x 13 1.19 against 1.00. With
//    n = 2-16 rows (m = 64-4096, k = 128-4096) 1.15-10x Eigen's speed, and up to 32 rows (a
//    chunk of 32: 32 x 784-1024 x 1024 at 89-96 GFLOP/s against Eigen's 62-70 under AVX-512,
//    69-89 against 58-65 under AVX2, which packs all of W for every call); with n = 1 (Eigen's
//    matrix-vector product) 0.91-1.35x, so n = 1 keeps Eigen unless m is narrow.
//  - rows, few rows: 2 <= n <= 16 (32 under AVX-512: 32 x 1024 x 1024 at 82-94 GFLOP/s against
//    Eigen's 57-68; under AVX2, 6-row blocks, 37-41 against 59-71) while b has at most 2 M
//    elements (8 MiB); with n = 1 (a matrix-vector product) or a larger b, each pass down a
//    column strip waits on memory.
//  - rows, few terms: k <= 8, or k <= 16 while c has at most 256 K elements (1 MiB) under
//    AVX2: with a larger c and k of 12-16, Eigen's packed kernel was 6-20% faster. Under
//    AVX-512 (6 x 4 blocks, Eigen's product zeroes c before it adds to it) any c: a chunk's
//    weight gradients, 1024 x 12-16 x 784-4096, 1.2-2.2x Eigen's speed.
bool narrow_gemm(const GemmArgs<float>& g) {
  if (g.n == 0 || g.m == 0 || g.k == 0) return false;
  const bool few_outputs = g.m <= kNarrow || (g.n >= 2 && g.n <= kDotsMostRows);
  if (few_outputs && g.k >= kDotsMinTerms && g.a_row_major && !g.b_row_major) {
    dots(g);
    return true;
  }
  if (!g.b_row_major) return false;
  if (g.n >= 2 && g.n <= kFewRowsMost && g.k * g.m <= (int64_t(2) << 20)) {
    rows(kFewRows, g, true);
    return true;
  }
  if (g.k <= 8 || (g.k <= kNarrow && g.n * g.m <= kFewTermsMostOutputs)) {
    rows(kFewTerms, g, false);
    return true;
  }
  return false;
}

}  // namespace TINYDDP_ISA_NAMESPACE
}  // namespace tinyddp::tensor::cpu
