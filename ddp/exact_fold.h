// The exact sum's inner loop (exact_sum.h), apart so that its vector form can be tested against
// the scalar definition: one pass over part of a chunk's gradient.
#pragma once

#include <cstdint>

namespace tinyddp::ddp::exact {

// Over values[0, n): `largest` becomes the largest of itself and every finite-or-infinite |x|
// (NaNs are skipped), `finite` false when some x is a NaN or an infinity; when `sums` is not
// null, sums[i] += x 2^scale rounded to the nearest integer (ties to even) for every x with
// |x 2^scale| < 2^62 (int64 wrapping; values beyond are left out). float32 runs 8 values at a
// time (AVX2), float64 one by one; both give the scalar definition's bits.
void fold(const float* values, int64_t n, int64_t* sums, int scale, float& largest, bool& finite);
void fold(const double* values, int64_t n, int64_t* sums, int scale, double& largest, bool& finite);
// The same for `count` chunks' values of one parameter at once (chunks[c][0, n)), added in
// one pass: sums are read and written once, not once per chunk. The integers are the same.
void fold(const float* const* chunks, int count, int64_t n, int64_t* sums, int scale, float& largest, bool& finite);
void fold(const double* const* chunks, int count, int64_t n, int64_t* sums, int scale, double& largest, bool& finite);

}  // namespace tinyddp::ddp::exact
