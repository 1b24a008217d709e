// The exact sum's inner loops (exact_sum.h), apart so that their vector forms can be tested
// against the scalar definitions: one pass over part of a chunk's gradient into the int64 sums,
// and one pass from the sums back to the means.
#pragma once

#include <cstdint>

namespace tinyddp::ddp::exact {

// What a fold does with `sums`: adds to what they hold, or writes the folded chunks over it
// (the step's first fold of a parameter: its sums need no pass to zero them first).
enum class Into { kAdd, kStore };

// Over values[0, n): `largest` becomes the largest of itself and every finite-or-infinite |x|
// (NaNs are skipped), `finite` false when some x is a NaN or an infinity; when `sums` is not
// null, sums[i] += x 2^scale rounded to the nearest integer (ties to even) for every x with
// |x 2^scale| < 2^62 (int64 wrapping; values beyond are left out). float32 runs 16 values at a
// time where the CPU kernels use AVX-512 (tensor/cpu_isa.h), else 8 (AVX2); float64 one by one;
// every form gives the scalar definition's bits.
void fold(const float* values, int64_t n, int64_t* sums, int scale, float& largest, bool& finite);
void fold(const double* values, int64_t n, int64_t* sums, int scale, double& largest, bool& finite);
// The same for `count` chunks' values of one parameter at once (chunks[c][0, n)), added in
// one pass: sums are read and written once, not once per chunk. The integers are the same.
// With Into::kStore the sums' old values are not read: sums[i] becomes the chunks' integers.
void fold(const float* const* chunks, int count, int64_t n, int64_t* sums, int scale, float& largest, bool& finite,
          Into into = Into::kAdd);
void fold(const double* const* chunks, int count, int64_t n, int64_t* sums, int scale, double& largest, bool& finite,
          Into into = Into::kAdd);

// One chunk's contribution to a weight's gradient, the product c = g^T x of its k rows: g
// [k, n] at g[p * g_row + i * g_col], x [k, m] at x[p * x_row + j] (the columns contiguous).
struct Product {
  const float* g;
  int64_t g_row, g_col;
  const float* x;
  int64_t x_row;
  int64_t k;
};

// Rows [row_begin, row_end) of the n x m sums (sums[i * m + j], row-major): for each of the
// `count` products in turn, its element (i, j), d = the float32 chain of fused multiply-adds
// d = fma(g[p, i], x[p, j], d) from d = 0 over p = 0 .. k - 1, folded as fold() folds a value
// (Into::kStore: the first product's integers replace the sums). The float32 gradient is
// never written: each product goes from registers into the integers, and the sums are read
// and written once for all the products (sums null: only `largest` and `finite`). 6 rows by
// 4 vectors of 16 columns at a time under AVX-512, 4 by 2 of 8 under AVX2; the same bits.
void fold_products(const Product* products, int count, int64_t m, int64_t row_begin, int64_t row_end, int64_t* sums,
                   int scale, float& largest, bool& finite, Into into = Into::kAdd);

// One product's values themselves, the same float32 chains (fold_products rounds them), into
// rows [row_begin, row_end) of values[i * m + j], with their bound and whether they are finite:
// at one chunk per rank the ranks send these and the receiver rounds them (exact_sum.h).
void product_values(const Product& product, int64_t m, int64_t row_begin, int64_t row_end, float* values,
                    float& largest, bool& finite);

// The means: out[i] = double(sums[i]) * 2^-scale / chunks, then rounded to the output's type,
// each step rounded as that C++ expression rounds it (the int64's conversion to double once,
// the division once, the float32 result once), 4 values at a time under AVX2, 8 under AVX-512;
// a power-of-two chunk count multiplies by its exact reciprocal (the same rounding).
void unfold(const int64_t* sums, int64_t n, int scale, double chunks, float* out);
void unfold(const int64_t* sums, int64_t n, int scale, double chunks, double* out);

}  // namespace tinyddp::ddp::exact
