// Gradient clipping, as torch.nn.utils.clip_grad: clip_grad_norm_, clip_grad_value_.
#pragma once

#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

// Scales the gradients of `params` in place so that their total norm (the norm of the vector
// of every gradient's norm) is at most max_norm, as torch.nn.utils.clip_grad_norm_: each .grad
// is multiplied by clamp(max_norm / (total + 1e-6), max = 1), computed in the gradients'
// dtype with PyTorch's operations (also when it is 1; a 16-bit gradient's norm is summed in
// float32 and rounded once). Returns the total norm before
// clipping as a 0-d tensor in the gradients' dtype, on the first gradient's device (a
// float32 zero on the CPU when no parameter has a gradient). Nothing is read back to the
// host, so on a GPU the step does not wait and can be captured in a CUDA graph; read the norm
// with .item<double>() when it is wanted. norm_type is p >= 1 or INFINITY. Parameters without
// a gradient are skipped. Under DDP call it after backward (the gradients are then the
// averaged ones), so every rank clips by the same factor. With error_if_nonfinite a NaN or
// infinite total norm throws instead of scaling (this one reads the norm back).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient of `params` into [-clip_value, clip_value] in place, as
// torch.nn.utils.clip_grad_value_ (NaN stays NaN). Parameters without a gradient are skipped.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace tinyddp::nn
