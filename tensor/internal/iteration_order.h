// The order in which an elementwise loop walks its dims, shared by the CPU loops and the CUDA
// launch geometry: by the operands' strides, as PyTorch's TensorIterator orders them, so that
// the written operand (the first) is walked in memory order. A channels-last tensor then
// becomes one flat row, as a row-major one does; row-major operands keep the logical order.
// Also the one test of "dense in this order" behind is_contiguous() in either memory format.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "tinyddp/tensor/shape.h"

namespace tinyddp::tensor {

// Whether dim d0 belongs inside dim d1 (-1: d0 inside, 1: d1 inside, 0: no operand says):
// the first operand with nonzero strides along both decides by the smaller stride, or, for
// equal strides, puts the smaller dim inside.
template <size_t N>
int compare_dims(const Shape& shape, const std::array<Shape, N>& strides, size_t d0, size_t d1) {
  for (size_t k = 0; k < N; ++k) {
    const int64_t s0 = strides[k][d0], s1 = strides[k][d1];
    if (s0 == 0 || s1 == 0) continue;  // broadcast along one of them: ask the next operand
    if (s0 != s1) return s0 < s1 ? -1 : 1;
    if (shape[d0] > shape[d1]) return 1;
  }
  return 0;
}

// Whether the first operand is row-major (strides falling, none 0, outside size-1 dims): then
// it decides every pair of dims, in the logical order, and there is nothing to sort.
template <size_t N>
bool logical_order_holds(const Shape& shape, const std::array<Shape, N>& strides) {
  int64_t previous = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (strides[0][d] <= previous) return false;
    previous = strides[0][d];
  }
  return true;
}

// Whether the dims, innermost first as dim_at(0), ..., dim_at(n - 1) name them, are stored
// without gaps in that order (size-1 dims ignored; an empty tensor is dense): row-major with
// the dims reversed, channels last with C, W, H, N.
template <typename DimAt>
bool dense_in_order(const Shape& sizes, const Shape& strides, size_t n, DimAt dim_at) {
  int64_t expected = 1;
  for (size_t k = 0; k < n; ++k) {
    const size_t d = dim_at(k);
    if (sizes[d] == 0) return true;
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// dense_in_order with the dims reversed, written out: the hot path of is_contiguous().
inline bool row_major(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (auto d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    const int64_t size = sizes[static_cast<size_t>(d)];
    if (size == 0) return true;
    if (size == 1) continue;
    if (strides[static_cast<size_t>(d)] != expected) return false;
    expected *= size;
  }
  return true;
}

// Every dim of `shape`, innermost first, sorted: TensorIterator's insertion sort, in which an
// undecided comparison moves on to the next outer dim without moving the one being placed
// (so dims no operand orders keep their logical order). Size-1 dims are sorted too; loops
// skip them. iteration_order (below) first tries the logical order.
template <size_t N>
Shape sorted_iteration_order(const Shape& shape, const std::array<Shape, N>& strides) {
  Shape order;
  for (size_t d = shape.size(); d-- > 0;) order.push_back(static_cast<int64_t>(d));
  for (size_t i = 1; i < order.size(); ++i) {
    size_t placed = i;
    for (size_t j = i; j-- > 0;) {
      const int c = compare_dims<N>(shape, strides, static_cast<size_t>(order[j]), static_cast<size_t>(order[placed]));
      if (c < 0) break;
      if (c > 0) {
        std::swap(order[j], order[placed]);
        placed = j;
      }
    }
  }
  return order;
}

// The dims innermost first: the logical order when the first operand is row-major, else sorted.
template <size_t N>
Shape iteration_order(const Shape& shape, const std::array<Shape, N>& strides) {
  if (!logical_order_holds<N>(shape, strides)) return sorted_iteration_order<N>(shape, strides);
  Shape order;
  for (size_t d = shape.size(); d-- > 0;) order.push_back(static_cast<int64_t>(d));
  return order;
}

}  // namespace tinyddp::tensor
