// RMSprop and Adagrad (rmsprop_adagrad.h), as torch.optim's single-tensor paths (PyTorch 1.13).
#include "tinyddp/nn/rmsprop_adagrad.h"

#include <cmath>

namespace tinyddp::nn {

using tensor::NoGradGuard;

// ---- RMSprop ----------------------------------------------------------------------------------

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options) : RMSprop(one_group(std::move(params)), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer(std::move(groups), "RMSprop", options.lr(), options.weight_decay()), options_(options),
      state_(params_.size()) {
  TDDP_CHECK(options_.eps() >= 0, "RMSprop: invalid epsilon value: {}", options_.eps());
  TDDP_CHECK(options_.momentum() >= 0, "RMSprop: invalid momentum value: {}", options_.momentum());
  use_momentum("momentum", options_.momentum(), false);
  TDDP_CHECK(options_.alpha() >= 0, "RMSprop: invalid alpha value: {}", options_.alpha());
}

void RMSprop::step() {
  NoGradGuard no_grad;
  const double alpha = options_.alpha(), eps = options_.eps();
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const double lr = this->lr(g), decay = weight_decay(g), momentum = this->momentum(g);
    for (size_t i = group_begin(g); i < group_end(g); ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      State& s = state_[i];
      if (!s.square_avg.defined()) {
        s.square_avg = tensor::zeros_like(p);
        if (options_.centered()) s.grad_avg = tensor::zeros_like(p);
      }
      // (torch makes it at the first step only; a momentum turned on later starts one here)
      if (momentum > 0 && !s.momentum_buffer.defined()) s.momentum_buffer = tensor::zeros_like(p);
      ++s.step;
      Tensor grad = step_grad(p, options_.maximize());
      if (decay != 0) grad = tensor::add(grad, p, decay);
      s.square_avg.mul_(alpha).add_(tensor::mul(tensor::mul(grad, 1 - alpha), grad));  // addcmul_
      Tensor avg;
      if (options_.centered()) {
        s.grad_avg.mul_(alpha).add_(grad, 1 - alpha);
        avg = tensor::sqrt(tensor::add(s.square_avg, tensor::mul(tensor::mul(s.grad_avg, -1.0), s.grad_avg)));
      } else {
        avg = tensor::sqrt(s.square_avg);
      }
      avg = tensor::add(avg, eps);
      if (momentum > 0) {
        s.momentum_buffer.mul_(momentum).add_(tensor::div(grad, avg));  // addcdiv_, value 1
        p.add_(s.momentum_buffer, -lr);
      } else {
        p.add_(tensor::div(tensor::mul(grad, -lr), avg));  // addcdiv_(grad, avg, value = -lr)
      }
    }
  }
}

OrderedDict<Tensor> RMSprop::state_dict() const {
  OrderedDict<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const State& s = state_[i];
    if (!s.square_avg.defined()) continue;
    out.insert(state_key(i, "step"), tensor::scalar_tensor(static_cast<double>(s.step), tensor::kFloat32));
    out.insert(state_key(i, "square_avg"), s.square_avg);
    if (s.momentum_buffer.defined()) out.insert(state_key(i, "momentum_buffer"), s.momentum_buffer);
    if (s.grad_avg.defined()) out.insert(state_key(i, "grad_avg"), s.grad_avg);
  }
  return out;
}

void RMSprop::load_state_dict(const OrderedDict<Tensor>& state) {
  check_state(state, {"step", "square_avg", "momentum_buffer", "grad_avg"});
  std::vector<State> fresh(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    State& s = fresh[i];
    s.square_avg = loaded_state(state, i, "square_avg");
    if (!s.square_avg.defined()) continue;
    s.step = loaded_step(state, i);
    s.momentum_buffer = loaded_state(state, i, "momentum_buffer");
    s.grad_avg = loaded_state(state, i, "grad_avg");
    // (a momentum buffer is kept whatever the momentum: a group's momentum may change, and a
    // missing buffer starts at zero when a momentum needs it)
    TDDP_CHECK(s.grad_avg.defined() == options_.centered(),
               "RMSprop: load_state_dict: the state of parameter {} was saved {} centered=true", i,
               options_.centered() ? "without" : "with");
  }
  state_ = std::move(fresh);
}

// ---- Adagrad ----------------------------------------------------------------------------------

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options) : Adagrad(one_group(std::move(params)), options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer(std::move(groups), "Adagrad", options.lr(), options.weight_decay()), options_(options) {
  TDDP_CHECK(options_.lr_decay() >= 0, "Adagrad: invalid lr_decay value: {}", options_.lr_decay());
  TDDP_CHECK(options_.initial_accumulator_value() >= 0, "Adagrad: invalid initial_accumulator_value value: {}",
             options_.initial_accumulator_value());
  TDDP_CHECK(options_.eps() >= 0, "Adagrad: invalid epsilon value: {}", options_.eps());
  params_added();
}

void Adagrad::params_added() {
  // As torch's: the sums exist from the start, filled with initial_accumulator_value.
  NoGradGuard no_grad;
  for (size_t i = state_.size(); i < params_.size(); ++i) {
    state_.push_back(State{0, tensor::full_like(params_[i], options_.initial_accumulator_value())});
  }
}

void Adagrad::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const double lr = this->lr(g), decay = weight_decay(g);
    for (size_t i = group_begin(g); i < group_end(g); ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      State& s = state_[i];
      ++s.step;
      Tensor grad = step_grad(p, options_.maximize());
      if (decay != 0) grad = tensor::add(grad, p, decay);
      const double clr = lr / (1 + static_cast<double>(s.step - 1) * options_.lr_decay());
      s.sum.add_(tensor::mul(grad, grad));  // addcmul_(grad, grad, value = 1)
      const Tensor std = tensor::add(tensor::sqrt(s.sum), options_.eps());
      p.add_(tensor::div(tensor::mul(grad, -clr), std));  // addcdiv_(grad, std, value = -clr)
    }
  }
}

OrderedDict<Tensor> Adagrad::state_dict() const {
  OrderedDict<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.insert(state_key(i, "step"), tensor::scalar_tensor(static_cast<double>(state_[i].step), tensor::kFloat32));
    out.insert(state_key(i, "sum"), state_[i].sum);
  }
  return out;
}

void Adagrad::load_state_dict(const OrderedDict<Tensor>& state) {
  check_state(state, {"step", "sum"});
  std::vector<State> fresh(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    fresh[i].sum = loaded_state(state, i, "sum");
    TDDP_CHECK(fresh[i].sum.defined(), "Adagrad: load_state_dict: no 'sum' for parameter {}", i);
    fresh[i].step = loaded_step(state, i);
  }
  state_ = std::move(fresh);
}

}  // namespace tinyddp::nn
