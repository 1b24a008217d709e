// The optimizers' common part (parameter groups, learning rates, state checks) and the
// Adam/AdamW steps, mirroring torch.optim's single-tensor code paths (PyTorch 1.13 / 2.x
// foreach=False) operation for operation, and their state for checkpoints (SGD: sgd.cc).
#include "tinyddp/nn/optim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "tinyddp/tensor/cuda.h"

namespace tinyddp::nn {

using tensor::NoGradGuard;

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  if (params.empty()) return {};
  return {ParamGroup(std::move(params))};
}

std::vector<ParamGroup> weight_decay_groups(const Module& module, double weight_decay) {
  return weight_decay_groups(module.parameters(), weight_decay);
}

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return {ParamGroup(std::move(decay)).set_weight_decay(weight_decay),
          ParamGroup(std::move(no_decay)).set_weight_decay(0.0)};
}

Optimizer::Optimizer(std::vector<Tensor> params, std::string name, double lr, double weight_decay)
    : Optimizer(one_group(std::move(params)), std::move(name), lr, weight_decay) {}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay)
    : name_(std::move(name)), default_lr_(lr), default_weight_decay_(weight_decay) {
  TDDP_CHECK(!groups.empty(), "{}: optimizer got an empty parameter list", name_);
  for (ParamGroup& group : groups) append_group(std::move(group));
}

void Optimizer::append_group(ParamGroup group) {
  const size_t g = groups_.size();
  std::unordered_map<const tensor::TensorImpl*, size_t> group_of;
  for (size_t k = 0; k < groups_.size(); ++k) {
    for (size_t i = groups_[k].begin; i < groups_[k].end; ++i) group_of.emplace(params_[i].impl(), k);
  }
  // Everything is checked before anything changes.
  TDDP_CHECK(group.lr.value_or(default_lr_) >= 0, "{}: invalid learning rate {} (group {})", name_,
             group.lr.value_or(default_lr_), g);
  TDDP_CHECK(group.weight_decay.value_or(default_weight_decay_) >= 0, "{}: invalid weight_decay {} (group {})", name_,
             group.weight_decay.value_or(default_weight_decay_), g);
  for (size_t k = 0; k < group.params.size(); ++k) {
    const Tensor& p = group.params[k];
    const size_t i = params_.size() + k;
    TDDP_CHECK(p.defined() && p.is_leaf(), "{}: parameter {} must be a defined leaf tensor", name_, i);
    TDDP_CHECK(p.is_floating_point(), "{}: parameter {} has dtype {}; optimizers need floating point", name_, i,
               tensor::dtype_name(p.dtype()));
    TDDP_CHECK(!is_placeholder(p),
               "{}: parameter {} is a placeholder that fully_shard left in its module (the values live in the "
               "shards): build the optimizer from model.parameters() after fully_shard, which lists the shards",
               name_, i);
    const auto [it, fresh] = group_of.emplace(p.impl(), g);
    TDDP_CHECK(fresh || it->second == g,
               "{}: parameter {} of group {} is also in group {} (a parameter may be in one group only)", name_, i, g,
               it->second);
  }
  const size_t begin = params_.size();
  for (Tensor& p : group.params) params_.push_back(std::move(p));
  groups_.push_back(Group{begin, params_.size(), group.lr.value_or(default_lr_),
                          group.weight_decay.value_or(default_weight_decay_), default_momentum_,
                          /*initial_lr=*/std::nullopt, /*lr_tensor=*/Tensor()});
}

void Optimizer::use_momentum(std::string name, double initial, bool below_one) {
  momentum_name_ = std::move(name);
  momentum_below_one_ = below_one;
  default_momentum_ = initial;
  for (size_t g = 0; g < groups_.size(); ++g) set_momentum(g, initial);
}

double Optimizer::momentum(size_t g) const {
  TDDP_CHECK(!momentum_name_.empty(), "{}: has no momentum", name_);
  return group(g).momentum;
}

void Optimizer::set_momentum(size_t g, double momentum) {
  group(g);
  TDDP_CHECK(!momentum_name_.empty(), "{}: has no momentum to set", name_);
  TDDP_CHECK(momentum >= 0 && (!momentum_below_one_ || momentum < 1), "{}: invalid {} {} (group {})", name_,
             momentum_name_, momentum, g);
  groups_[g].momentum = momentum;
}

void Optimizer::add_param_group(ParamGroup group) {
  append_group(std::move(group));
  params_added();
}

const Optimizer::Group& Optimizer::group(size_t g) const {
  TDDP_CHECK(g < groups_.size(), "{}: there is no parameter group {} ({} groups)", name_, g, groups_.size());
  return groups_[g];
}

void Optimizer::set_lr(size_t g, double lr) {
  group(g);
  TDDP_CHECK(lr >= 0, "{}: invalid learning rate {} (group {})", name_, lr, g);
  groups_[g].lr = lr;
  if (groups_[g].lr_tensor.defined()) groups_[g].lr_tensor.fill_(lr);
}

void Optimizer::set_lr_tensor(size_t g, const Tensor& lr) {
  group(g);
  TDDP_CHECK(lr.defined() && lr.numel() == 1 && tensor::is_floating_point(lr.dtype()),
             "{}: set_lr_tensor takes a floating tensor of one element (group {}), got {}", name_, g,
             lr.defined() ? fmt::format("{} of {} elements", tensor::dtype_name(lr.dtype()), lr.numel())
                          : std::string("an undefined tensor"));
  const double value = lr.item<double>();
  TDDP_CHECK(value >= 0, "{}: invalid learning rate {} (group {})", name_, value, g);
  groups_[g].lr = value;
  groups_[g].lr_tensor = lr;
}

std::vector<ParamGroupRef> Optimizer::param_groups() {
  std::vector<ParamGroupRef> out;
  for (size_t g = 0; g < groups_.size(); ++g) out.emplace_back(*this, g);
  return out;
}

std::vector<Tensor> ParamGroupRef::params() const {
  const std::vector<Tensor>& all = optimizer_->params();
  return {all.begin() + static_cast<int64_t>(optimizer_->group_begin(index_)),
          all.begin() + static_cast<int64_t>(optimizer_->group_end(index_))};
}
double ParamGroupRef::lr() const { return optimizer_->lr(index_); }
void ParamGroupRef::set_lr(double lr) { optimizer_->set_lr(index_, lr); }
double ParamGroupRef::weight_decay() const { return optimizer_->weight_decay(index_); }
void ParamGroupRef::set_weight_decay(double weight_decay) { optimizer_->set_weight_decay(index_, weight_decay); }
double ParamGroupRef::momentum() const { return optimizer_->momentum(index_); }
void ParamGroupRef::set_momentum(double momentum) { optimizer_->set_momentum(index_, momentum); }
std::optional<double> ParamGroupRef::initial_lr() const { return optimizer_->initial_lr(index_); }

void Optimizer::set_initial_lr(size_t g, double lr) {
  group(g);
  TDDP_CHECK(lr >= 0, "{}: invalid initial learning rate {} (group {})", name_, lr, g);
  groups_[g].initial_lr = lr;
}

void Optimizer::set_weight_decay(size_t g, double weight_decay) {
  group(g);
  TDDP_CHECK(weight_decay >= 0, "{}: invalid weight_decay {} (group {})", name_, weight_decay, g);
  groups_[g].weight_decay = weight_decay;
}

void Optimizer::zero_grad(bool set_to_none) { nn::zero_grad(params_, set_to_none); }

Tensor Optimizer::step(const std::function<Tensor()>& closure) {
  TDDP_CHECK(closure != nullptr, "{}.step: the closure is empty", name_);
  Tensor loss;
  {
    tensor::EnableGradGuard enable_grad;  // as torch's step: the closure runs under enable_grad
    loss = closure();
  }
  step();
  return loss;
}

Tensor Optimizer::step_grad(const Tensor& p, bool maximize) { return maximize ? tensor::neg(p.grad()) : p.grad(); }

Tensor Optimizer::loaded_state(const OrderedDict<Tensor>& state, size_t i, const std::string& key) const {
  const Tensor* t = state.find(state_key(i, key));
  return t != nullptr ? t->to(params_[i].dtype()).to(params_[i].device()).clone() : Tensor();
}

int64_t Optimizer::loaded_step(const OrderedDict<Tensor>& state, size_t i) {
  const Tensor* step = state.find(state_key(i, "step"));
  return step != nullptr ? static_cast<int64_t>(step->to(tensor::kFloat64).item<double>()) : 0;
}

std::string state_key(size_t index, const std::string& key) { return fmt::format("state.{}.{}", index, key); }

std::optional<StateKey> parse_state_key(const std::string& name) {
  constexpr std::string_view kPrefix = "state.";
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size() || dot + 1 == name.size()) return std::nullopt;
  size_t index = 0;
  const auto [end, error] = std::from_chars(name.data() + kPrefix.size(), name.data() + dot, index);
  if (error != std::errc() || end != name.data() + dot) return std::nullopt;
  return StateKey{index, name.substr(dot + 1)};
}

void Optimizer::check_state(const OrderedDict<Tensor>& state, const std::vector<std::string>& keys) const {
  for (const auto& [name, t] : state) {
    const std::optional<StateKey> parsed = parse_state_key(name);
    TDDP_CHECK(parsed.has_value(), "{}: load_state_dict: unexpected key '{}' (expected state.<index>.<key>)", name_,
               name);
    const auto& [index, key] = *parsed;
    TDDP_CHECK(index < params_.size(), "{}: load_state_dict: key '{}' refers to parameter {} but there are only {}",
               name_, name, index, params_.size());
    TDDP_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(),
               "{}: load_state_dict: unexpected state '{}' in key '{}'", name_, key, name);
    TDDP_CHECK(t.defined(), "{}: load_state_dict: '{}' is undefined", name_, name);
    if (key != "step" && key != "mu_product") {  // (the scalars; every other state is per element)
      TDDP_CHECK(t.sizes() == params_[index].sizes(),
                 "{}: load_state_dict: '{}' has shape {} but parameter {} has shape {}", name_, name,
                 tensor::format_shape(t.sizes()), index, tensor::format_shape(params_[index].sizes()));
    }
  }
}

// ---- Adam / AdamW -----------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params)), options, false, "Adam") {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(std::move(groups), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, std::string name)
    : Optimizer(std::move(groups), std::move(name), options.lr(), options.weight_decay()), options_(options),
      decoupled_(decoupled), state_(params_.size()) {
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

void Adam::step_group(size_t g) {
  NoGradGuard no_grad;
  const double lr = this->lr(g), decay = weight_decay(g), beta1 = momentum(g), beta2 = options_.beta2();
  // With capturable, a group's tensor rate is read on the device (a captured step follows it).
  const Tensor lr_t = options_.capturable() ? lr_tensor(g) : Tensor();
  // The parameters with a gradient: their state made and their step counted first.
  std::vector<size_t> stepped;
  for (size_t i = group_begin(g); i < group_end(g); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    // A graph would replay this step with the bias correction of the step it was captured at.
    TDDP_CHECK(options_.capturable() || !(p.is_cuda() && tensor::cuda::is_capturing(p.device().index)),
               "{}.step: cannot be captured in a CUDA graph: its bias correction depends on the step count, a host "
               "number the graph would freeze at the captured step (pass AdamOptions().capturable(true), capture "
               "SGD, or run {} eagerly)",
               name_, name_);
    State& s = state_[i];
    if (!s.exp_avg.defined()) {
      s.exp_avg = tensor::zeros_like(p);
      s.exp_avg_sq = tensor::zeros_like(p);
      if (options_.capturable()) s.step_t = tensor::zeros({1}, tensor::TensorOptions().device(p.device()));
      if (options_.amsgrad()) s.max_exp_avg_sq = tensor::zeros_like(p);
    }
    if (options_.capturable()) {
      s.step_t.add_(1.0);
    } else {
      ++s.step;
    }
    stepped.push_back(i);
  }
  if (stepped.empty()) return;
  // All of them in one call where they allow (tensor/fused.h: on a GPU, a few launches for the
  // group), else each in one pass, else op by op: the same operations every way.
  const auto fused_step = [&](int64_t count) {
    return tensor::AdamStep{lr, beta1, beta2, options_.eps(), decay, count, decoupled_, options_.maximize()};
  };
  const bool plain = !options_.capturable() && !options_.amsgrad();
  if (plain && std::all_of(stepped.begin(), stepped.end(),
                           [&](size_t i) { return state_[i].step == state_[stepped[0]].step; })) {
    std::vector<Tensor> ps, grads, avgs, avg_sqs;
    for (const size_t i : stepped) {
      ps.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      avgs.push_back(state_[i].exp_avg);
      avg_sqs.push_back(state_[i].exp_avg_sq);
    }
    if (tensor::fused_adam_steps_(ps, grads, avgs, avg_sqs, fused_step(state_[stepped[0]].step))) return;
  }
  for (const size_t i : stepped) {
    const Tensor& p = params_[i];
    State& s = state_[i];
    if (plain && tensor::fused_adam_step_(p, p.grad(), s.exp_avg, s.exp_avg_sq, fused_step(s.step))) continue;
    Tensor grad = step_grad(p, options_.maximize());
    if (decay != 0) {
      if (decoupled_ && lr_t.defined()) {
        p.mul_(1.0 - tensor::mul(lr_t, decay));  // AdamW, the rate a tensor: 1 - lr * decay there
      } else if (decoupled_) {
        p.mul_(1 - lr * decay);  // AdamW: decay the weights
      } else {
        grad = tensor::add(grad, p, decay);  // Adam: L2 through the gradient
      }
    }
    s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
    // addcmul_(grad, grad, value = 1 - beta2): value * grad * grad, left to right
    s.exp_avg_sq.mul_(beta2).add_(tensor::mul(tensor::mul(grad, 1 - beta2), grad));
    update(p, s, lr, lr_t, beta1);
  }
}

void Adam::update(const Tensor& p, State& s, double lr, const Tensor& lr_t, double beta1) const {
  const double beta2 = options_.beta2(), eps = options_.eps();
  // amsgrad: the running maximum of the second moment stands in for it (torch.maximum: NaN
  // wins). Updated in place, as every state here: a captured step must write where it reads.
  if (options_.amsgrad()) s.max_exp_avg_sq.copy_(tensor::maximum(s.max_exp_avg_sq, s.exp_avg_sq));
  const Tensor& second = options_.amsgrad() ? s.max_exp_avg_sq : s.exp_avg_sq;
  if (!options_.capturable()) {
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(s.step));
    const double step_size = lr / bias_correction1;
    const Tensor denom = tensor::div(tensor::sqrt(second), std::sqrt(bias_correction2)).add_(eps);
    // addcdiv_(exp_avg, denom, value = -step_size): value * exp_avg / denom, left to right
    p.add_(tensor::div(tensor::mul(s.exp_avg, -step_size), denom));
    return;
  }
  // PyTorch's capturable branch, op for op (a number over a tensor is the tensor's reciprocal
  // times the number): bias corrections 1 - beta^step on the device, then
  // denom = sqrt(v) / (sqrt(bc2) * -step_size) + eps / -step_size and p += m / denom.
  const Tensor bias_correction1 = 1.0 - tensor::pow(beta1, s.step_t);
  const Tensor bias_correction2 = 1.0 - tensor::pow(beta2, s.step_t);
  // The rate: the group's tensor (lr / bc1, tensor by tensor) or a number (bc1's reciprocal times it).
  const Tensor step_size_neg = lr_t.defined() ? tensor::neg(tensor::div(lr_t, bias_correction1))
                                              : tensor::neg(tensor::mul(1.0 / bias_correction1, lr));
  const Tensor denom = tensor::div(tensor::sqrt(second), tensor::mul(tensor::sqrt(bias_correction2), step_size_neg))
                           .add_(tensor::mul(1.0 / step_size_neg, eps));
  p.add_(tensor::div(s.exp_avg, denom));
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
  state_ = std::move(loaded);
}

}  // namespace tinyddp::nn
