#include "tinyddp/nn/utils.h"

#include <iostream>
#include <mutex>
#include <optional>

#include "tinyddp/autograd/engine.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/random.h"

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

namespace {

// Puts the default generator in `state` for its lifetime, then back where it was.
class GeneratorAt {
 public:
  explicit GeneratorAt(const std::optional<tensor::Generator::Snapshot>& state) {
    if (!state) return;
    previous_ = tensor::default_generator().snapshot();
    tensor::default_generator().restore(*state);
  }
  ~GeneratorAt() {
    if (previous_) tensor::default_generator().restore(*previous_);
  }
  GeneratorAt(const GeneratorAt&) = delete;
  GeneratorAt& operator=(const GeneratorAt&) = delete;

 private:
  std::optional<tensor::Generator::Snapshot> previous_;
};

}  // namespace

namespace {

// The outputs the checkpoint's node stands for: the defined floating-point ones, of one dtype
// and device (their gradients travel packed in one tensor).
std::vector<size_t> differentiable_outputs(const std::vector<Tensor>& outs) {
  std::vector<size_t> picked;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined() || !outs[i].is_floating_point()) continue;
    const Tensor& first = outs[picked.empty() ? i : picked[0]];
    TDDP_CHECK(outs[i].dtype() == first.dtype() && outs[i].device() == first.device(),
               "checkpoint: the function's floating-point outputs must share a dtype and device, got {} on {} and {} "
               "on {}",
               tensor::dtype_name(first.dtype()), first.device().str(), tensor::dtype_name(outs[i].dtype()),
               outs[i].device().str());
    picked.push_back(i);
  }
  TDDP_CHECK(!picked.empty(), "checkpoint: the function returned no floating-point tensor");
  return picked;
}

// One tensor holding the picked outputs (flattened, one after another), and its parts as views.
Tensor pack(const std::vector<Tensor>& outs, const std::vector<size_t>& picked) {
  if (picked.size() == 1) return outs[picked[0]].detach();  // a fresh handle: it may be an input itself
  std::vector<Tensor> flat;
  for (size_t i : picked) flat.push_back(outs[i].detach().reshape({-1}));
  return tensor::cat(flat);
}
std::vector<Tensor> unpack(const Tensor& packed, const std::vector<tensor::Shape>& shapes) {
  if (shapes.size() == 1) return {packed};
  std::vector<Tensor> parts;
  int64_t offset = 0;
  for (const tensor::Shape& shape : shapes) {
    const int64_t n = tensor::shape_numel(shape, "checkpoint");
    parts.push_back(packed.slice(0, offset, offset + n).view(shape));
    offset += n;
  }
  return parts;
}

}  // namespace

std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& function,
                               const std::vector<Tensor>& inputs, bool preserve_rng_state) {
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
  const std::optional<tensor::Generator::Snapshot> rng =
      preserve_rng_state ? std::optional(tensor::default_generator().snapshot()) : std::nullopt;
  std::vector<Tensor> outs;
  {
    tensor::NoGradGuard no_grad;
    outs = function(inputs);
  }
  if (!tensor::GradMode::is_enabled() || !any_requires_grad) return outs;
  const std::vector<size_t> picked = differentiable_outputs(outs);
  std::vector<tensor::Shape> shapes;
  for (size_t i : picked) shapes.push_back(outs[i].sizes());
  const Tensor packed = pack(outs, picked);
  std::vector<Tensor> recorded;
  std::vector<tensor::SavedTensor> saved;
  std::vector<bool> wants;
  for (const Tensor& x : inputs) {
    if (!x.defined()) continue;
    recorded.push_back(x);
    saved.emplace_back(x);
    wants.push_back(x.requires_grad());
  }
  tensor::record_op("CheckpointFunctionBackward", packed, recorded,
                    [function, saved, wants, rng, picked, shapes](const Tensor& grad) {
                      // The inputs again, as leaves of a graph of their own, and the function recorded.
                      std::vector<Tensor> again;
                      for (size_t i = 0; i < saved.size(); ++i) {
                        Tensor x = saved[i].get("CheckpointFunctionBackward").detach();
                        if (wants[i]) x.requires_grad_(true);
                        again.push_back(x);
                      }
                      std::vector<Tensor> ys;
                      {
                        const GeneratorAt replay(rng);
                        tensor::EnableGradGuard grad_mode;
                        ys = function(again);
                      }
                      // Backward from the recomputed outputs that require grad, each with its part of
                      // the packed gradient (an output the loss did not use gets zeros).
                      const std::vector<Tensor> grads = unpack(grad, shapes);
                      std::vector<Tensor> roots, root_grads;
                      for (size_t k = 0; k < picked.size(); ++k) {
                        if (picked[k] >= ys.size() || !ys[picked[k]].requires_grad()) continue;
                        roots.push_back(ys[picked[k]]);
                        root_grads.push_back(grads[k]);
                      }
                      TDDP_CHECK(!roots.empty(),
                                 "checkpoint: the recomputed output does not require grad (none of the inputs or "
                                 "parameters the function uses does); checkpoint() is not needed here");
                      autograd::Engine::backward(roots, root_grads);
                      std::vector<Tensor> input_grads;
                      for (size_t i = 0; i < again.size(); ++i)
                        input_grads.push_back(wants[i] ? again[i].grad() : Tensor());
                      return input_grads;
                    });
  const std::vector<Tensor> parts = unpack(packed, shapes);
  for (size_t k = 0; k < picked.size(); ++k) outs[picked[k]] = parts[k];
  for (Tensor& out : outs) {
    if (out.defined() && !out.requires_grad()) out = out.detach();  // integer outputs: no graph
  }
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& function, const std::vector<Tensor>& inputs,
                  bool preserve_rng_state) {
  TDDP_CHECK(function, "checkpoint: expected a function");
  const std::function<std::vector<Tensor>(const std::vector<Tensor>&)> one = [function](const std::vector<Tensor>& v) {
    Tensor out = function(v);
    TDDP_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor");
    return std::vector<Tensor>{out};
  };
  return checkpoint(one, inputs, preserve_rng_state)[0];
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& function, const Tensor& input, bool preserve_rng_state) {
  TDDP_CHECK(function, "checkpoint: expected a function");
  return checkpoint([function](const std::vector<Tensor>& v) { return function(v[0]); }, std::vector<Tensor>{input},
                    preserve_rng_state);
}

}  // namespace tinyddp::nn
