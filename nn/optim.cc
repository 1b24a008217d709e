// The optimizers' common part: parameter groups, learning rates, state checks (the steps,
// mirroring torch.optim's single-tensor code paths operation for operation: sgd.cc, adam.cc).
#include "tinyddp/nn/optim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <unordered_map>

namespace tinyddp::nn {

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

}  // namespace tinyddp::nn
