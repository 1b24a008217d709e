// How a reduction over `dims` is laid out for a kernel, shared by the CPU and CUDA backends:
// either the reduced dims moved last (rows of a contiguous [outer, inner] matrix, one output
// per row) or, when the reduced dims lead a contiguous tensor, columns summed in place.
#pragma once

#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

struct RowPlan {
  Tensor rows;  // contiguous; logically [outer, inner]
  int64_t outer = 1;
  int64_t inner = 1;
  Shape out_shape;
};

// `dims` wrapped and unique (empty: every dim). `x` may be undefined when only the shapes are
// wanted (the leading-rows path): `sizes` is x's shape either way. The rows are copied by
// `backend`, x's own.
RowPlan plan_rows(Backend& backend, const Tensor& x, const Shape& dims, bool keepdim, const Shape& sizes);

// When `dims` are exactly the leading dims of a contiguous tensor (a bias gradient's sum over
// the batch), returns the number of reduced rows: each row of the remaining `*inner` elements
// is then added element-wise into an accumulator, with no transposing copy. Else 0.
int64_t leading_rows(const Tensor& x, const Shape& dims, int64_t* inner);

}  // namespace tinyddp::tensor
