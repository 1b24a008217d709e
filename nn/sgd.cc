// torch.optim.SGD (nn/optim.h): its step, op for op as PyTorch's single-tensor path, each
// parameter in one pass where the tensors allow and a group in a few launches on a GPU
// (tensor/fused.h), and its momentum buffers for checkpoints.
#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

using tensor::NoGradGuard;

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(one_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), "SGD", options.lr(), options.weight_decay()), options_(options),
      momentum_buffers_(params_.size()) {
  TDDP_CHECK(options_.momentum() >= 0, "SGD: invalid momentum {}", options_.momentum());
  TDDP_CHECK(!options_.nesterov() || (options_.momentum() > 0 && options_.dampening() == 0),
             "SGD: nesterov momentum requires a momentum and zero dampening");
  use_momentum("momentum", options_.momentum(), false);
}

namespace {

// The SGD step of parameters [begin, end) (those with a gradient) in one call of
// tensor::fused_sgd_steps_, where they are on a GPU: a few launches for the group, where op by op
// takes about four per parameter. On the CPU, where a launch costs nothing, the lists would
// cost more than they save (each parameter takes one pass there either way): false, as for
// parameters the fused kernels decline.
bool sgd_group_step(const std::vector<Tensor>& all, std::vector<Tensor>& momentum_buffers, size_t begin, size_t end,
                    bool maximize, const tensor::SgdStep& step) {
  std::vector<size_t> stepped;
  std::vector<Tensor> params, grads, buffers;
  for (size_t i = begin; i < end; ++i) {
    const Tensor& p = all[i];
    if (!p.grad().defined()) continue;
    if (!p.is_cuda()) return false;
    stepped.push_back(i);
    params.push_back(p);
    grads.push_back(maximize ? tensor::neg(p.grad()) : p.grad());
    buffers.push_back(momentum_buffers[i]);
  }
  if (stepped.empty() || !tensor::fused_sgd_steps_(params, grads, &buffers, step)) return false;
  for (size_t k = 0; k < stepped.size(); ++k) momentum_buffers[stepped[k]] = buffers[k];
  return true;
}

}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const tensor::SgdStep step{lr(g), momentum(g), options_.dampening(), weight_decay(g), options_.nesterov()};
    if (sgd_group_step(params_, momentum_buffers_, group_begin(g), group_end(g), options_.maximize(), step)) continue;
    for (size_t i = group_begin(g); i < group_end(g); ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      Tensor& buf = momentum_buffers_[i];
      Tensor negated;  // (maximize: the gradient negated; otherwise the gradient itself, not copied)
      const Tensor& grad = options_.maximize() ? (negated = tensor::neg(p.grad())) : p.grad();
      // One pass over memory where the tensors allow (bit-identical to the ops below).
      if (tensor::fused_sgd_step_(p, grad, &buf, step)) continue;
      // The same update op by op (any layout or dtype).
      Tensor d_p = grad;
      if (step.weight_decay != 0) d_p = tensor::add(d_p, p, step.weight_decay);
      if (step.momentum != 0) {
        if (!buf.defined()) {
          buf = d_p.clone();  // the buffer starts as the first gradient
        } else {
          buf.mul_(step.momentum).add_(d_p, 1 - step.dampening);
        }
        d_p = step.nesterov ? tensor::add(d_p, buf, step.momentum) : buf;
      }
      p.add_(d_p, -step.lr);
    }
  }
}

OrderedDict<Tensor> SGD::state_dict() const {
  OrderedDict<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) out.insert(state_key(i, "momentum_buffer"), momentum_buffers_[i]);
  }
  return out;
}

void SGD::load_state_dict(const OrderedDict<Tensor>& state) {
  check_state(state, {"momentum_buffer"});
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) buffers[i] = loaded_state(state, i, "momentum_buffer");
  momentum_buffers_ = std::move(buffers);
}

}  // namespace tinyddp::nn
