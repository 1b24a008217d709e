// The operators on tensors, as libtorch's, each one call of a function of ops.h: arithmetic
// (x + y, 2 * x, -x), comparisons giving bool masks (x == y, x > 0), the in-place arithmetic
// (x += y), and &, |, ^, ~ on bool masks. ops.h includes this header, so including ops.h (or
// tensor/all.h) is enough.
#pragma once

#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

// ---- operators ------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b);
inline Tensor operator-(const Tensor& x) { return neg(x); }
// Comparisons give bool masks, as torch's (x == y, x > 0); the in-place operators are add_,
// sub_, mul_ and div_ (x += y, x *= 2).
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
// On bool tensors, &, |, ^ and ~ are logical_and, logical_or, logical_xor and logical_not
// (mask = (x > 0) & (y < 1)); other dtypes are refused (no bitwise ops on integers here).
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& a);
inline const Tensor& operator+=(const Tensor& a, const Tensor& b) { return a.add_(b); }
inline const Tensor& operator-=(const Tensor& a, const Tensor& b) { return a.sub_(b); }
inline const Tensor& operator*=(const Tensor& a, const Tensor& b) { return a.mul_(b); }
inline const Tensor& operator/=(const Tensor& a, const Tensor& b) { return a.div_(b); }
inline const Tensor& operator+=(const Tensor& a, double b) { return a.add_(b); }
inline const Tensor& operator-=(const Tensor& a, double b) { return a.add_(-b); }
inline const Tensor& operator*=(const Tensor& a, double b) { return a.mul_(b); }
inline const Tensor& operator/=(const Tensor& a, double b) { return a.div_(b); }

}  // namespace tinyddp::tensor
