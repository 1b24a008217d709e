// torch.nn.utils' helpers beyond gradient clipping (clip_grad.h): parameters flattened into
// one vector and back, and rnn.pad_sequence.
#pragma once

#include <string_view>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

// As torch.nn.utils.parameters_to_vector: the parameters flattened and joined, in order, into
// one 1-D tensor (differentiable); all on one device.
tensor::Tensor parameters_to_vector(const std::vector<tensor::Tensor>& parameters);
// As torch.nn.utils.vector_to_parameters: each parameter's values replaced by its slice of
// `vec` (not recorded by autograd); vec's size must be the parameters' total.
void vector_to_parameters(const tensor::Tensor& vec, const std::vector<tensor::Tensor>& parameters);

// As torch.nn.utils.rnn.pad_sequence: tensors [L_i, *] padded with `padding_value` to the
// longest length (on the right, or the left) and stacked: [max_L, B, *], or [B, max_L, *]
// with batch_first. Differentiable.
tensor::Tensor pad_sequence(const std::vector<tensor::Tensor>& sequences, bool batch_first = false,
                            double padding_value = 0.0, std::string_view padding_side = "right");

}  // namespace tinyddp::nn
