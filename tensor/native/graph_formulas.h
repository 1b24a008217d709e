// Backward formulas from recorded ops, for a backward that builds a graph of the gradients
// (create_graph, double backward), internal to tensor/. The ops whose first-order backward is
// a fused kernel (layer and batch normalisation, gelu) switch to these when grad mode is on
// during backward, the kernels staying the fast path otherwise; the views' gradients (narrow,
// select, as_strided) are recorded ops of their own here.
#pragma once

#include <functional>

#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::detail {

// The input gradient of normalising x over `dims` (mean 0, variance 1, eps in the variance)
// and then scaling by `scale` (broadcasting against x; undefined: 1):
//   xhat = (x - mean) rstd,  dxhat = g scale,
//   grad_x = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
// the means over `dims`. Also returns xhat (for the scale's gradient, sum(g xhat)).
struct NormalizedGrad {
  Tensor grad_input, xhat;
};
NormalizedGrad normalized_backward(const Tensor& g, const Tensor& x, const Tensor& scale, const Shape& dims,
                                   double eps);

// The gradient of a narrow or select: `g` written into zeros of the input's `shape` at the
// part `slice` picks out. With a graph (create_graph) it is recorded: its own gradient is the
// same part of the incoming one.
Tensor embed_slice(const Tensor& g, const Shape& shape, std::function<Tensor(const Tensor&)> slice);

// Sizes, strides and offset of a view into a storage.
struct Geometry {
  Shape sizes, strides;
  int64_t offset;
};
// t's elements added at the positions `write` gives in a zero buffer of `span` elements, read
// back through `read`: as_strided's gradient (write: the output's geometry, read: the input's).
// Recorded with a graph: the gradient of that is the same with the two geometries swapped.
Tensor restride(const Tensor& t, const Geometry& write, const Geometry& read, int64_t span);

// gelu''(x), exact or tanh form, from differentiable ops.
Tensor gelu_second_derivative(const Tensor& x, bool tanh_form);

}  // namespace tinyddp::tensor::detail
