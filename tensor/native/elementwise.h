// The elementwise kernels' entry point that the op files of tensor/native/ share (internal):
// elementwise.cc defines it beside the binary ops, unary.cc uses it in relu's backward.
#pragma once

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::detail {

// kind(a, b) broadcast into a new tensor of a's dtype, not recorded for autograd (a and b of
// one dtype and device; bool refused).
Tensor binary(BinaryOp kind, const Tensor& a, const Tensor& b, double alpha, const char* op);

}  // namespace tinyddp::tensor::detail
