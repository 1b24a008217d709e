// Adam and AdamW, mirroring torch.optim's single-tensor code paths (PyTorch 1.13 / 2.x
// foreach=False) operation for operation, and their state for checkpoints; a group's update in
// one call where the backend has a fused kernel (tensor/fused.h).
#include <algorithm>
#include <cmath>

#include "tinyddp/nn/optim.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::nn {

using tensor::NoGradGuard;

// ---- Adam / AdamW -----------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params)), options, false, "Adam") {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(std::move(groups), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, std::string name)
    : Optimizer(std::move(groups), std::move(name), options.lr(), options.weight_decay()), options_(options),
      decoupled_(decoupled), state_(params_.size()), group_steps_(num_param_groups()) {
  TDDP_CHECK(options_.eps() >= 0, "{}: invalid epsilon {}", name_, options_.eps());
  TDDP_CHECK(options_.beta1() >= 0 && options_.beta1() < 1, "{}: invalid beta1 {}", name_, options_.beta1());
  TDDP_CHECK(options_.beta2() >= 0 && options_.beta2() < 1, "{}: invalid beta2 {}", name_, options_.beta2());
  use_momentum("beta1", options_.beta1(), true);
}

namespace {
// torch.optim.AdamW's default decay where the options leave it unset.
AdamOptions with_adamw_default(AdamOptions options) {
  if (!options.weight_decay_set()) options.weight_decay(1e-2);
  return options;
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params)), with_adamw_default(options), true, "AdamW") {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(std::move(groups), with_adamw_default(options), true, "AdamW") {}

void Adam::step() {
  for (size_t g = 0; g < num_param_groups(); ++g) step_group(g);
}

const Tensor& Adam::group_steps(size_t g) {
  Tensor& steps = group_steps_[g];
  if (steps.defined() || group_begin(g) == group_end(g)) return steps;
  const tensor::Device device = params_[group_begin(g)].device();
  for (size_t i = group_begin(g); i < group_end(g); ++i) {
    if (params_[i].device() != device) return steps;  // (undefined: each its own count)
  }
  const auto count = static_cast<int64_t>(group_end(g) - group_begin(g));
  steps = tensor::zeros({count}, tensor::TensorOptions().device(device));
  return steps;
}

Tensor Adam::step_count(size_t g, size_t i) {
  const Tensor& steps = group_steps(g);
  if (!steps.defined()) return tensor::zeros({1}, tensor::TensorOptions().device(params_[i].device()));
  return steps.narrow(0, static_cast<int64_t>(i - group_begin(g)), 1);
}

tensor::AdamDeviceNumbers Adam::device_numbers(size_t g, const std::vector<size_t>& stepped, double lr,
                                               const Tensor& lr_t, double beta1) {
  const double beta2 = options_.beta2(), eps = options_.eps();
  // PyTorch's capturable branch, op for op (a number over a tensor is the tensor's reciprocal
  // times the number): bias corrections 1 - beta^step on the device, then
  // denom = sqrt(v) / (sqrt(bc2) * -step_size) + eps / -step_size and p += m / denom. Each op is
  // elementwise, so one op on the group's counts gives each parameter the bits of its own.
  const auto numbers = [&](const Tensor& steps) {
    const Tensor bias_correction1 = 1.0 - tensor::pow(beta1, steps);
    const Tensor bias_correction2 = 1.0 - tensor::pow(beta2, steps);
    // The rate: the group's tensor (lr / bc1, tensor by tensor) or a number (bc1's reciprocal times it).
    const Tensor step_size_neg = lr_t.defined() ? tensor::neg(tensor::div(lr_t, bias_correction1))
                                                : tensor::neg(tensor::mul(1.0 / bias_correction1, lr));
    return std::pair(tensor::mul(tensor::sqrt(bias_correction2), step_size_neg), tensor::mul(1.0 / step_size_neg, eps));
  };
  tensor::AdamDeviceNumbers out;
  const Tensor& steps = group_steps(g);
  const auto [scales, eps_terms] = steps.defined() ? numbers(steps) : std::pair<Tensor, Tensor>();
  for (const size_t i : stepped) {
    if (steps.defined()) {
      const auto at = static_cast<int64_t>(i - group_begin(g));
      out.denom_scale.push_back(scales.narrow(0, at, 1));
      out.eps_term.push_back(eps_terms.narrow(0, at, 1));
    } else {
      const auto [scale, eps_term] = numbers(state_[i].step_t);
      out.denom_scale.push_back(scale);
      out.eps_term.push_back(eps_term);
    }
  }
  // AdamW with the rate a tensor decays the weights by 1 - lr * decay computed there.
  if (decoupled_ && lr_t.defined() && weight_decay(g) != 0) out.keep = 1.0 - tensor::mul(lr_t, weight_decay(g));
  return out;
}

void Adam::step_group(size_t g) {
  NoGradGuard no_grad;
  const double lr = this->lr(g), decay = weight_decay(g), beta1 = momentum(g), beta2 = options_.beta2();
  const bool capturable = options_.capturable();
  // With capturable, a group's tensor rate is read on the device (a captured step follows it).
  const Tensor lr_t = capturable ? lr_tensor(g) : Tensor();
  // The parameters with a gradient: their state made and their step counted first.
  std::vector<size_t> stepped;
  for (size_t i = group_begin(g); i < group_end(g); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    // A graph would replay this step with the bias correction of the step it was captured at.
    TDDP_CHECK(capturable || !(p.is_cuda() && tensor::cuda::is_capturing(p.device().index)),
               "{}.step: cannot be captured in a CUDA graph: its bias correction depends on the step count, a host "
               "number the graph would freeze at the captured step (pass AdamOptions().capturable(true), capture "
               "SGD, or run {} eagerly)",
               name_, name_);
    State& s = state_[i];
    if (!s.exp_avg.defined()) {
      s.exp_avg = tensor::zeros_like(p);
      s.exp_avg_sq = tensor::zeros_like(p);
      if (capturable) s.step_t = step_count(g, i).fill_(0.0);
      if (options_.amsgrad()) s.max_exp_avg_sq = tensor::zeros_like(p);
    }
    if (!capturable) ++s.step;
    stepped.push_back(i);
  }
  if (stepped.empty()) return;
  if (capturable && group_steps(g).defined() && stepped.size() == group_end(g) - group_begin(g)) {
    group_steps_[g].add_(1.0);  // every count at once (each element's op is its own add)
  } else if (capturable) {
    for (const size_t i : stepped) state_[i].step_t.add_(1.0);
  }
  const tensor::AdamDeviceNumbers numbers =
      capturable ? device_numbers(g, stepped, lr, lr_t, beta1) : tensor::AdamDeviceNumbers();
  // All of them in one call where they allow (tensor/fused.h: on a GPU, a few launches for the
  // group), else each in one pass, else op by op: the same operations every way.
  const auto fused_step = [&](int64_t count) {
    return tensor::AdamStep{lr, beta1, beta2, options_.eps(), decay, count, decoupled_, options_.maximize()};
  };
  const auto lists = [&](const std::vector<size_t>& which, auto&& fused) {
    std::vector<Tensor> ps, grads, avgs, avg_sqs;
    for (const size_t i : which) {
      ps.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      avgs.push_back(state_[i].exp_avg);
      avg_sqs.push_back(state_[i].exp_avg_sq);
    }
    return fused(ps, grads, avgs, avg_sqs);
  };
  if (!options_.amsgrad() && capturable) {  // the counts are on the device: any mix of them
    if (lists(stepped, [&](auto&&... l) { return tensor::fused_adam_steps_(l..., fused_step(1), &numbers); })) return;
  } else if (!options_.amsgrad() && std::all_of(stepped.begin(), stepped.end(),
                                                [&](size_t i) { return state_[i].step == state_[stepped[0]].step; })) {
    if (lists(stepped,
              [&](auto&&... l) { return tensor::fused_adam_steps_(l..., fused_step(state_[stepped[0]].step)); }))
      return;
  }
  for (size_t k = 0; k < stepped.size(); ++k) {
    const size_t i = stepped[k];
    const Tensor& p = params_[i];
    State& s = state_[i];
    const Tensor scale = capturable ? numbers.denom_scale[k] : Tensor();
    const Tensor eps_term = capturable ? numbers.eps_term[k] : Tensor();
    if (!options_.amsgrad()) {  // this parameter alone in one pass
      const tensor::AdamDeviceNumbers one{{scale}, {eps_term}, numbers.keep};
      if (lists({i}, [&](auto&&... l) {
            return tensor::fused_adam_steps_(l..., fused_step(s.step), capturable ? &one : nullptr);
          }))
        continue;
    }
    update(g, p, s, scale, eps_term, numbers.keep);
  }
}

void Adam::update(size_t g, const Tensor& p, State& s, const Tensor& denom_scale, const Tensor& eps_term,
                  const Tensor& keep) const {
  const double lr = this->lr(g), decay = weight_decay(g), beta1 = momentum(g);
  const double beta2 = options_.beta2(), eps = options_.eps();
  Tensor grad = step_grad(p, options_.maximize());
  if (decay != 0) {
    if (decoupled_ && keep.defined()) {
      p.mul_(keep);  // AdamW, the rate a tensor: 1 - lr * decay there
    } else if (decoupled_) {
      p.mul_(1 - lr * decay);  // AdamW: decay the weights
    } else {
      grad = tensor::add(grad, p, decay);  // Adam: L2 through the gradient
    }
  }
  s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  // addcmul_(grad, grad, value = 1 - beta2): value * grad * grad, left to right
  s.exp_avg_sq.mul_(beta2).add_(tensor::mul(tensor::mul(grad, 1 - beta2), grad));
  // amsgrad: the running maximum of the second moment stands in for it (torch.maximum: NaN
  // wins). Updated in place, as every state here: a captured step must write where it reads.
  if (options_.amsgrad()) s.max_exp_avg_sq.copy_(tensor::maximum(s.max_exp_avg_sq, s.exp_avg_sq));
  const Tensor& second = options_.amsgrad() ? s.max_exp_avg_sq : s.exp_avg_sq;
  if (!denom_scale.defined()) {
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(s.step));
    const double step_size = lr / bias_correction1;
    const Tensor denom = tensor::div(tensor::sqrt(second), std::sqrt(bias_correction2)).add_(eps);
    // addcdiv_(exp_avg, denom, value = -step_size): value * exp_avg / denom, left to right
    p.add_(tensor::div(tensor::mul(s.exp_avg, -step_size), denom));
    return;
  }
  // Capturable (device_numbers): denom = sqrt(v) / (sqrt(bc2) * -step_size) + eps / -step_size.
  p.add_(tensor::div(s.exp_avg, tensor::div(tensor::sqrt(second), denom_scale).add_(eps_term)));
}

OrderedDict<Tensor> Adam::state_dict() const {
  OrderedDict<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    out.insert(state_key(i, "step"),
               s.step_t.defined() ? s.step_t : tensor::scalar_tensor(static_cast<double>(s.step), tensor::kInt64));
    out.insert(state_key(i, "exp_avg"), s.exp_avg);
    out.insert(state_key(i, "exp_avg_sq"), s.exp_avg_sq);
    if (s.max_exp_avg_sq.defined()) out.insert(state_key(i, "max_exp_avg_sq"), s.max_exp_avg_sq);
  }
  return out;
}

void Adam::load_state_dict(const OrderedDict<Tensor>& state) {
  check_state(state, {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
  std::vector<State> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor* step = state.find(state_key(i, "step"));
    const Tensor* avg = state.find(state_key(i, "exp_avg"));
    const Tensor* avg_sq = state.find(state_key(i, "exp_avg_sq"));
    const int present = (step != nullptr) + (avg != nullptr) + (avg_sq != nullptr);
    TDDP_CHECK(present == 0 || present == 3, "{}: load_state_dict: parameter {} has only part of its state", name_, i);
    if (present == 0) continue;
    TDDP_CHECK(step->numel() == 1, "{}: load_state_dict: state.{}.step must have one element", name_, i);
    if (options_.capturable()) {  // PyTorch's float32 step, which an int64 count also converts to
      loaded[i].step_t = step->to(tensor::kFloat32).reshape({1}).to(params_[i].device()).clone();
    } else {
      loaded[i].step = loaded_step(state, i);
    }
    loaded[i].exp_avg = loaded_state(state, i, "exp_avg");
    loaded[i].exp_avg_sq = loaded_state(state, i, "exp_avg_sq");
    loaded[i].max_exp_avg_sq = loaded_state(state, i, "max_exp_avg_sq");
    TDDP_CHECK(options_.amsgrad() == loaded[i].max_exp_avg_sq.defined(),
               "{}: load_state_dict: parameter {}'s state {} max_exp_avg_sq, but amsgrad is {}", name_, i,
               loaded[i].max_exp_avg_sq.defined() ? "has" : "lacks", options_.amsgrad() ? "on" : "off");
  }
  // Capturable counts go where the group keeps them (checked first: a refused state changes nothing).
  for (size_t g = 0; options_.capturable() && g < num_param_groups(); ++g) {
    for (size_t i = group_begin(g); i < group_end(g); ++i) {
      if (loaded[i].step_t.defined()) loaded[i].step_t = step_count(g, i).copy_(loaded[i].step_t);
    }
  }
  state_ = std::move(loaded);
}

}  // namespace tinyddp::nn
