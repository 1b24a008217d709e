// torch.nn.utils' helpers beyond gradient clipping (clip_grad.h): parameters flattened into
// one vector and back (rnn's padding and packing: packed_sequence.h); torch.utils.checkpoint's
// activation checkpointing.
#pragma once

#include <functional>
#include <vector>

#include "tinyddp/nn/packed_sequence.h"  // pad_sequence, once declared here
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

// As torch.nn.utils.parameters_to_vector: the parameters flattened and joined, in order, into
// one 1-D tensor (differentiable); all on one device.
tensor::Tensor parameters_to_vector(const std::vector<tensor::Tensor>& parameters);
// As torch.nn.utils.vector_to_parameters: each parameter's values replaced by its slice of
// `vec` (not recorded by autograd); vec's size must be the parameters' total.
void vector_to_parameters(const tensor::Tensor& vec, const std::vector<tensor::Tensor>& parameters);

// As torch.utils.checkpoint.checkpoint(function, *inputs, use_reentrant=True): runs
// `function` on `inputs` without recording its graph, keeping only the inputs; backward runs
// it again, recording this time, with the default generator put back as it was for the first
// run (preserve_rng_state, so dropout draws the same mask), and backpropagates through that
// graph from inside the backward (the engine is reentrant). The activations inside `function`
// live only during their own backward. Gradients reach the inputs that require grad and the
// parameters `function` uses (their accumulators fire from the nested pass: under DDP use
// static_graph, as in PyTorch). As PyTorch's reentrant variant: when no input requires grad
// the output does not either (a warning says so), and autograd::grad cannot see inside (use
// backward). An input modified in place before the backward is an error naming the node.
tensor::Tensor checkpoint(const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& function,
                          const std::vector<tensor::Tensor>& inputs, bool preserve_rng_state = true);
tensor::Tensor checkpoint(const std::function<tensor::Tensor(const tensor::Tensor&)>& function,
                          const tensor::Tensor& input, bool preserve_rng_state = true);
// A function with several outputs, as checkpoint(function, ...) returning a tuple: the
// floating-point outputs (of one dtype and device) come back as parts of one recorded tensor,
// so a loss that uses any of them backpropagates through one recomputation (outputs it does not
// use get zero gradients); integer and bool outputs come back without a graph, undefined ones
// undefined.
std::vector<tensor::Tensor> checkpoint(
    const std::function<std::vector<tensor::Tensor>(const std::vector<tensor::Tensor>&)>& function,
    const std::vector<tensor::Tensor>& inputs, bool preserve_rng_state = true);

}  // namespace tinyddp::nn
