// Adamax, NAdam and RAdam (adamax_nadam_radam.h), as torch.optim's single-tensor paths (PyTorch
// 1.13; maximize and decoupled_weight_decay as PyTorch 2's). addcmul and addcdiv are written
// value * a * b and value * a / b, left to right, as torch's CPU kernels compute them.
#include "tinyddp/nn/adamax_nadam_radam.h"

#include <cmath>

namespace tinyddp::nn {

using tensor::NoGradGuard;

// ---- the shared state -------------------------------------------------------------------------

MomentOptimizer::MomentOptimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay,
                                 double beta1, double beta2, double eps, bool maximize, bool decoupled_weight_decay,
                                 std::string second_name, bool mu_product)
    : Optimizer(std::move(groups), std::move(name), lr, weight_decay), state_(params_.size()), maximize_(maximize),
      decoupled_weight_decay_(decoupled_weight_decay), second_name_(std::move(second_name)),
      has_mu_product_(mu_product) {
  TDDP_CHECK(eps >= 0, "{}: invalid epsilon value: {}", name_, eps);
  TDDP_CHECK(beta1 >= 0 && beta1 < 1, "{}: invalid beta parameter at index 0: {}", name_, beta1);
  TDDP_CHECK(beta2 >= 0 && beta2 < 1, "{}: invalid beta parameter at index 1: {}", name_, beta2);
  TDDP_CHECK(weight_decay >= 0, "{}: invalid weight_decay value: {}", name_, weight_decay);
  use_momentum("beta1", beta1, true);
}

void MomentOptimizer::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const double lr = this->lr(g), decay = weight_decay(g), beta1 = momentum(g);
    for (size_t i = group_begin(g); i < group_end(g); ++i) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      State& s = state_[i];
      if (!s.exp_avg.defined()) {  // the moments start at zero at the parameter's first step
        s.exp_avg = tensor::zeros_like(p);
        s.second = tensor::zeros_like(p);
      }
      ++s.step;
      Tensor grad = step_grad(p, maximize_);
      if (decay != 0) {
        if (decoupled_weight_decay_) {
          p.mul_(1 - lr * decay);  // the weights decayed (AdamW's way)
        } else {
          grad = tensor::add(grad, p, decay);  // an L2 term through the gradient
        }
      }
      update(p, s, grad, lr, beta1);
    }
  }
}

OrderedDict<Tensor> MomentOptimizer::state_dict() const {
  OrderedDict<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    out.insert(state_key(i, "step"), tensor::scalar_tensor(static_cast<double>(s.step), tensor::kFloat32));
    if (has_mu_product_) out.insert(state_key(i, "mu_product"), tensor::scalar_tensor(s.mu_product, tensor::kFloat32));
    out.insert(state_key(i, "exp_avg"), s.exp_avg);
    out.insert(state_key(i, second_name_), s.second);
  }
  return out;
}

void MomentOptimizer::load_state_dict(const OrderedDict<Tensor>& state) {
  std::vector<std::string> keys{"step", "exp_avg", second_name_};
  if (has_mu_product_) keys.push_back("mu_product");
  check_state(state, keys);
  std::vector<State> fresh(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    State& s = fresh[i];
    s.exp_avg = loaded_state(state, i, "exp_avg");
    s.second = loaded_state(state, i, second_name_);
    TDDP_CHECK(s.exp_avg.defined() == s.second.defined(), "{}: load_state_dict: parameter {} has {} without {}", name_,
               i, s.exp_avg.defined() ? "exp_avg" : second_name_, s.exp_avg.defined() ? second_name_ : "exp_avg");
    if (!s.exp_avg.defined()) continue;
    s.step = loaded_step(state, i);
    if (has_mu_product_) {
      const Tensor* mu = state.find(state_key(i, "mu_product"));
      TDDP_CHECK(mu != nullptr, "{}: load_state_dict: no 'mu_product' for parameter {}", name_, i);
      s.mu_product = static_cast<float>(mu->to(tensor::kFloat64).item<double>());
    }
  }
  state_ = std::move(fresh);
}

namespace {

// exp_avg = beta1 exp_avg + (1 - beta1) g, exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) g g.
void update_moments(const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& grad, double beta1, double beta2) {
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).add_(tensor::mul(tensor::mul(grad, 1 - beta2), grad));
}

}  // namespace

// ---- Adamax -----------------------------------------------------------------------------------

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions options) : Adamax(one_group(std::move(params)), options) {}

Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions options)
    : MomentOptimizer(std::move(groups), "Adamax", options.lr(), options.weight_decay(), options.beta1(),
                      options.beta2(), options.eps(), options.maximize(), false, "exp_inf"),
      options_(options) {}

void Adamax::update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) {
  s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  // The infinity norm: max(beta2 u, |g| + eps), NaN winning as torch.amax's.
  s.second.copy_(
      tensor::maximum(tensor::mul(s.second, options_.beta2()), tensor::add(tensor::abs(grad), options_.eps())));
  const double clr = lr / (1 - std::pow(beta1, static_cast<double>(s.step)));
  p.add_(tensor::div(tensor::mul(s.exp_avg, -clr), s.second));  // addcdiv_(exp_avg, exp_inf, -clr)
}

// ---- NAdam ------------------------------------------------------------------------------------

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options) : NAdam(one_group(std::move(params)), options) {}

NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions options)
    : MomentOptimizer(std::move(groups), "NAdam", options.lr(), options.weight_decay(), options.beta1(),
                      options.beta2(), options.eps(), options.maximize(), options.decoupled_weight_decay(),
                      "exp_avg_sq", true),
      options_(options) {
  TDDP_CHECK(options_.momentum_decay() >= 0, "NAdam: invalid momentum_decay value: {}", options_.momentum_decay());
}

void NAdam::update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) {
  const double beta2 = options_.beta2(), psi = options_.momentum_decay();
  const double t = static_cast<double>(s.step);
  const double bias_correction2 = 1 - std::pow(beta2, t);
  // The momentum schedule mu_t and mu_{t+1}; their running product is a float32 tensor in
  // PyTorch, so it is rounded to float32 after each product here too.
  const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, t * psi));
  const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * psi));
  s.mu_product = s.mu_product * static_cast<float>(mu);
  const float mu_product_next = s.mu_product * static_cast<float>(mu) * static_cast<float>(mu_next);
  update_moments(s.exp_avg, s.second, grad, beta1, beta2);
  const Tensor denom = tensor::sqrt(tensor::div(s.second, bias_correction2)).add_(options_.eps());
  p.add_(tensor::div(tensor::mul(grad, -lr * (1.0 - mu) / (1.0 - s.mu_product)), denom));
  p.add_(tensor::div(tensor::mul(s.exp_avg, -lr * mu_next / (1.0 - mu_product_next)), denom));
}

// ---- RAdam ------------------------------------------------------------------------------------

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options) : RAdam(one_group(std::move(params)), options) {}

RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions options)
    : MomentOptimizer(std::move(groups), "RAdam", options.lr(), options.weight_decay(), options.beta1(),
                      options.beta2(), options.eps(), options.maximize(), options.decoupled_weight_decay(),
                      "exp_avg_sq"),
      options_(options) {}

void RAdam::update(const Tensor& p, State& s, const Tensor& grad, double lr, double beta1) {
  const double beta2 = options_.beta2();
  const double rho_inf = 2 / (1 - beta2) - 1;  // the largest length of the approximated SMA
  const double t = static_cast<double>(s.step);
  const double bias_correction1 = 1 - std::pow(beta1, t);
  const double bias_correction2 = 1 - std::pow(beta2, t);
  update_moments(s.exp_avg, s.second, grad, beta1, beta2);
  const Tensor corrected = tensor::div(s.exp_avg, bias_correction1);
  const double rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bias_correction2;
  if (rho_t > 5) {
    // The variance is tractable: Adam's step, rectified.
    const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
    // (a number over a tensor is, in PyTorch, the tensor's reciprocal times the number)
    const Tensor adaptive_lr = tensor::mul(tensor::reciprocal(tensor::add(tensor::sqrt(s.second), options_.eps())),
                                           std::sqrt(bias_correction2));
    p.add_(tensor::mul(tensor::mul(tensor::mul(corrected, lr), adaptive_lr), rect), -1.0);
  } else {
    p.add_(tensor::mul(corrected, lr), -1.0);
  }
}

}  // namespace tinyddp::nn
