// Gradient utilities, as torch.nn.utils: clip_grad_norm_.
#pragma once

#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

// Scales the gradients of `params` in place so that their total norm (the norm of the vector
// of every gradient's norm) is at most max_norm: each .grad is multiplied by
// min(1, max_norm / (total + 1e-6)), computed in the gradients' dtype as PyTorch does (also
// when it is 1). Returns the total norm before clipping. norm_type is p >= 1 or INFINITY.
// Parameters without a gradient are skipped. Under DDP call it after backward (the gradients
// are then the averaged ones), so every rank clips by the same factor. With
// error_if_nonfinite a NaN or infinite total norm throws instead of scaling.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace tinyddp::nn
