// The window helpers conv.cc defines and pool.cc shares (internal to tensor/native/): a
// window's output size from its kernel, stride, padding and dilation, 3-D inputs as one-image
// batches, and im2col as a differentiable op.
#pragma once

#include <string>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/ops.h"  // Size2d
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::detail {

std::string pair_str(int64_t a, int64_t b);  // "(a, b)"

// The window of `kernel` etc. over an input of shape `in` [N, C, H, W], its output size filled
// in; errors (naming `op`) for non-positive sizes or a kernel larger than the padded input.
Window2d make_window(const Shape& in, Size2d kernel, Size2d stride, Size2d padding, Size2d dilation, const char* op);

// A 3-D [C, H, W] input as [1, C, H, W] (checked: 3-D or 4-D, floating point, a device with
// kernels), and an output back without that batch dim when the input had none.
Tensor as_batch(const Tensor& input, const char* op);
Tensor unbatch_like(const Tensor& out, const Tensor& input);

// im2col as a differentiable op: [N, C, kh, kw, OH, OW] patches of x (contiguous), padding
// reading as pad_value.
Tensor patches(const Tensor& x, const Window2d& win, double pad_value);

}  // namespace tinyddp::tensor::detail
