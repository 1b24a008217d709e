#include "tinyddp/nn/utils.h"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/random.h"

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

namespace {

// Puts the default generator in `state` for its lifetime, then back where it was.
class GeneratorAt {
 public:
  explicit GeneratorAt(const std::optional<std::string>& state) {
    if (!state) return;
    previous_ = tensor::default_generator().get_state();
    tensor::default_generator().set_state(*state);
  }
  ~GeneratorAt() {
    if (previous_) tensor::default_generator().set_state(*previous_);
  }
  GeneratorAt(const GeneratorAt&) = delete;
  GeneratorAt& operator=(const GeneratorAt&) = delete;

 private:
  std::optional<std::string> previous_;
};

}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& function, const std::vector<Tensor>& inputs,
                  bool preserve_rng_state) {
  TDDP_CHECK(function, "checkpoint: expected a function");
  bool any_requires_grad = false;
  for (const Tensor& x : inputs) any_requires_grad = any_requires_grad || (x.defined() && x.requires_grad());
  if (tensor::GradMode::is_enabled() && !any_requires_grad) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      std::cerr << "tinyddp: warning: checkpoint: none of the inputs have requires_grad=True; gradients will be "
                   "None (as PyTorch's reentrant checkpoint)\n";
    });
  }
  const std::optional<std::string> rng =
      preserve_rng_state ? std::optional<std::string>(tensor::default_generator().get_state()) : std::nullopt;
  Tensor out;
  {
    tensor::NoGradGuard no_grad;
    out = function(inputs);
  }
  TDDP_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor");
  if (!tensor::GradMode::is_enabled() || !any_requires_grad) return out;
  out = out.detach();  // a fresh handle: the function may have returned an input itself
  std::vector<Tensor> recorded;
  std::vector<tensor::SavedTensor> saved;
  std::vector<bool> wants;
  for (const Tensor& x : inputs) {
    if (!x.defined()) continue;
    recorded.push_back(x);
    saved.emplace_back(x);
    wants.push_back(x.requires_grad());
  }
  tensor::record_op("CheckpointFunctionBackward", out, recorded, [function, saved, wants, rng](const Tensor& grad) {
    // The inputs again, as leaves of a graph of their own, and the function recorded.
    std::vector<Tensor> again;
    for (size_t i = 0; i < saved.size(); ++i) {
      Tensor x = saved[i].get("CheckpointFunctionBackward").detach();
      if (wants[i]) x.requires_grad_(true);
      again.push_back(x);
    }
    Tensor y;
    {
      const GeneratorAt replay(rng);
      tensor::EnableGradGuard grad_mode;
      y = function(again);
    }
    TDDP_CHECK(y.defined() && y.requires_grad(),
               "checkpoint: the recomputed output does not require grad (none of the inputs or parameters the "
               "function uses does); checkpoint() is not needed here");
    y.backward(grad);
    std::vector<Tensor> grads;
    for (size_t i = 0; i < again.size(); ++i) grads.push_back(wants[i] ? again[i].grad() : Tensor());
    return grads;
  });
  return out;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& function, const Tensor& input, bool preserve_rng_state) {
  TDDP_CHECK(function, "checkpoint: expected a function");
  return checkpoint([function](const std::vector<Tensor>& v) { return function(v[0]); }, std::vector<Tensor>{input},
                    preserve_rng_state);
}

}  // namespace tinyddp::nn
