// Grad mode for autograd users: the thread-local switch and its guards (defined in the
// tensor layer, whose ops consult it).
#pragma once

#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::autograd {
using tensor::AutoGradMode;
using tensor::EnableGradGuard;
using tensor::GradMode;
using tensor::InferenceMode;
using tensor::is_grad_enabled;
using tensor::NoGradGuard;
using tensor::set_grad_enabled;
}  // namespace tinyddp::autograd
