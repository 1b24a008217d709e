// The elementwise kernels' entry points that the op files of tensor/native/ share (internal):
// elementwise.cc defines them beside the binary ops, unary.cc uses binary in relu's backward.
#pragma once

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::detail {

// kind(a, b) broadcast into a new tensor of a's dtype, not recorded for autograd (a and b of
// one dtype and device; bool refused).
Tensor binary(BinaryOp kind, const Tensor& a, const Tensor& b, double alpha, const char* op);

// masked_fill with the result laid out as the input (channels last when it is), for the ops
// built on it whose PyTorch kernels keep the layout (clamp, where, dropout, nan_to_num); the
// public masked_fill is row-major, as PyTorch's.
Tensor masked_fill_keeping_layout(const Tensor& input, const Tensor& mask, double value);

}  // namespace tinyddp::tensor::detail
