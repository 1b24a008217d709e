#include "tinyddp/nn/utils.h"

#include <algorithm>

#include "tinyddp/tensor/all.h"

namespace tinyddp::nn {

using tensor::Tensor;

tensor::Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  TDDP_CHECK(!parameters.empty(), "parameters_to_vector: expected at least one parameter");
  std::vector<Tensor> flat;
  for (size_t i = 0; i < parameters.size(); ++i) {
    TDDP_CHECK(parameters[i].defined(), "parameters_to_vector: parameter {} is undefined", i);
    TDDP_CHECK(parameters[i].device() == parameters[0].device(),
               "parameters_to_vector: Found two parameters on different devices, {} and {}",
               parameters[0].device().str(), parameters[i].device().str());
    flat.push_back(parameters[i].reshape({-1}));
  }
  return tensor::cat(flat);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  TDDP_CHECK(vec.defined() && vec.dim() == 1, "vector_to_parameters: expected vec to be a 1-D tensor");
  int64_t total = 0;
  for (const Tensor& p : parameters) total += p.numel();
  TDDP_CHECK(vec.numel() == total, "vector_to_parameters: vec has {} elements but the parameters have {}", vec.numel(),
             total);
  tensor::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& p : parameters) {
    p.copy_(vec.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

tensor::Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                            std::string_view padding_side) {
  TDDP_CHECK(!sequences.empty(), "pad_sequence: received an empty list of sequences");
  TDDP_CHECK(padding_side == "right" || padding_side == "left",
             "pad_sequence: Expected padding_side to be one of left or right, but got {}", padding_side);
  int64_t longest = 0;
  for (const Tensor& s : sequences) {
    TDDP_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: each sequence needs at least one dim");
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    const int64_t missing = longest - s.size(0);
    if (missing == 0) {
      padded.push_back(s);
      continue;
    }
    tensor::Shape fill_shape = s.sizes();
    fill_shape[0] = missing;
    const Tensor fill = tensor::full(fill_shape, padding_value, tensor::TensorOptions(s.dtype()).device(s.device()));
    padded.push_back(padding_side == "right" ? tensor::cat({s, fill}) : tensor::cat({fill, s}));
  }
  return tensor::stack(padded, batch_first ? 0 : 1);
}

}  // namespace tinyddp::nn
