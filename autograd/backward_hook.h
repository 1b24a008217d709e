// One graph node for several tensors at once, as PyTorch's BackwardHookFunction: what
// nn::Module's full backward hooks stand on. through_backward_hook(tensors, on_grads) returns
// the tensors again (aliases of the same data); in backward, once the gradients of all of them
// have arrived (or can no longer arrive), on_grads sees them together and what it returns flows
// on to the original tensors. The node has one input per tensor (Edge::input_nr), and each
// returned tensor is the output of an ordinary one-input node in front of it, so hooks and
// retain_grad on the returned tensors work as on any other.
#pragma once

#include <functional>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

using tensor::Tensor;

// grads -> the gradients to pass on (the same count; undefined: none). grads[k] belongs to
// tensors[k], undefined where that tensor does not require grad or got no gradient.
using GradsHook = std::function<std::vector<Tensor>(std::vector<Tensor> grads)>;

// Tensors that do not require grad come back as they are; with none that does (or grad mode
// off) nothing is recorded and on_grads never runs.
std::vector<Tensor> through_backward_hook(const std::vector<Tensor>& tensors, GradsHook on_grads);

}  // namespace tinyddp::autograd
