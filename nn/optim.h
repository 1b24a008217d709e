// Optimizers with PyTorch's update formulas, operation for operation (so float32 results
// match torch.optim): SGD (momentum, dampening, nesterov, weight decay) and Adam / AdamW
// (bias correction). Options are structs with chained setters, as in libtorch. Parameters
// come in groups, each with its own learning rate and weight decay (torch.optim's
// param_groups): what schedulers (scheduler.h) change, and what nanoGPT's decay / no-decay
// split (weight_decay_groups) needs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

// The key of one piece of per-parameter optimizer state, "state.<index>.<key>" (PyTorch's
// optimizer state_dict, flattened): written by state_key, read by parse_state_key, which
// gives nothing for a name of any other form.
struct StateKey {
  size_t index = 0;  // the parameter's position in the optimizer's params()
  std::string key;   // "momentum_buffer", "step", "exp_avg", ...
};
std::string state_key(size_t index, const std::string& key);
std::optional<StateKey> parse_state_key(const std::string& name);

// One parameter group: its parameters, and the learning rate and weight decay that override
// the optimizer's options for them (unset: the options' values).
//   nn::AdamW({nn::ParamGroup(decay).set_weight_decay(0.1), nn::ParamGroup(no_decay).set_weight_decay(0)}, options)
struct ParamGroup {
  explicit ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}
  ParamGroup& set_lr(double v) {
    lr = v;
    return *this;
  }
  ParamGroup& set_weight_decay(double v) {
    weight_decay = v;
    return *this;
  }
  std::vector<Tensor> params;
  std::optional<double> lr, weight_decay;
};

// nanoGPT's split: parameters of two or more dimensions (matmul weights, embeddings) decay by
// `weight_decay`, the others (biases, layer-norm weights) not at all. Group 0 is the decaying
// one; each group keeps the order of module.parameters() (a tied weight once).
std::vector<ParamGroup> weight_decay_groups(const Module& module, double weight_decay);
// The same split of the given tensors (a sharded model's shards: ddp::sharded_parameters).
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);
// A plain parameter list as the optimizers take it: one group, or no group for an empty list,
// which every optimizer refuses ("optimizer got an empty parameter list", as torch.optim: an
// optimizer with nothing to step is a mistake, not a silent no-op). A group given as one may
// be empty (ZeRO's ranks that own none of a group's parameters).
std::vector<ParamGroup> one_group(std::vector<Tensor> params);

class Optimizer;

// One parameter group of an optimizer, as an entry of torch's optimizer.param_groups (a dict
// there): reads and writes go to the optimizer, so
//   for (auto group : opt.param_groups()) group.set_lr(group.lr() * 0.5);  // g["lr"] *= 0.5
// does what the PyTorch loop does. Valid while the optimizer lives.
class ParamGroupRef {
 public:
  ParamGroupRef(Optimizer& optimizer, size_t index) : optimizer_(&optimizer), index_(index) {}
  size_t index() const { return index_; }
  std::vector<Tensor> params() const;  // group["params"]
  double lr() const;
  void set_lr(double lr);
  double weight_decay() const;
  void set_weight_decay(double weight_decay);
  double momentum() const;  // group["momentum"] or group["betas"][0]; see Optimizer::momentum
  void set_momentum(double momentum);
  std::optional<double> initial_lr() const;

 private:
  Optimizer* optimizer_;
  size_t index_;
};

class Optimizer {
 public:
  // One group, with the optimizer's own learning rate and weight decay.
  Optimizer(std::vector<Tensor> params, std::string name, double lr = 0, double weight_decay = 0);
  // Several groups; unset values are `lr` and `weight_decay`. A parameter may be in one group.
  Optimizer(std::vector<ParamGroup> groups, std::string name, double lr, double weight_decay);
  virtual ~Optimizer() = default;

  // Updates every parameter that has a gradient (inside NoGradGuard).
  virtual void step() = 0;
  // As torch.optim's step(closure): runs `closure` with gradients enabled (it typically zeroes
  // the gradients, runs forward and backward and returns the loss), then steps; returns the
  // closure's loss. Derived optimizers bring it in with `using Optimizer::step`.
  Tensor step(const std::function<Tensor()>& closure);
  void zero_grad(bool set_to_none = true);
  // Every group's parameters, group after group: the indices of state_dict()'s keys.
  const std::vector<Tensor>& params() const { return params_; }
  const std::string& name() const { return name_; }

  // The groups: group g holds params()[group_begin(g) .. group_end(g)).
  size_t num_param_groups() const { return groups_.size(); }
  // torch's optimizer.param_groups: one ParamGroupRef per group, in order.
  std::vector<ParamGroupRef> param_groups();
  size_t group_begin(size_t g) const { return group(g).begin; }
  size_t group_end(size_t g) const { return group(g).end; }
  double lr(size_t g = 0) const { return group(g).lr; }
  double weight_decay(size_t g = 0) const { return group(g).weight_decay; }
  void set_lr(size_t g, double lr);
  // As torch's param_group["lr"] = torch.tensor(rate, device=...): the group's rate held in a
  // one-element floating tensor too (its value becomes lr(g)), which set_lr then fills in place
  // (as PyTorch's schedulers fill_ a tensor rate). Adam and AdamW with capturable compute with
  // it on its device, so that a step captured in a CUDA graph reads the rate of each replay.
  void set_lr_tensor(size_t g, const Tensor& lr);
  // The group's tensor rate, or an undefined tensor when it has none.
  const Tensor& lr_tensor(size_t g = 0) const { return group(g).lr_tensor; }
  void set_weight_decay(size_t g, double weight_decay);
  // The group's rate when its first scheduler was made (torch's group["initial_lr"]): what
  // every scheduler of the group takes as its base rate, and what SequentialLR goes back to.
  std::optional<double> initial_lr(size_t g = 0) const { return group(g).initial_lr; }
  void set_initial_lr(size_t g, double lr);
  // The group's momentum, as torch's group["momentum"] (SGD, RMSprop) or group["betas"][0]
  // (Adam, AdamW): the options' value until set_momentum changes it (OneCycleLR cycles it).
  // momentum_name() is "momentum", "beta1", or empty for an optimizer without one (Adagrad),
  // whose momentum() and set_momentum() throw.
  const std::string& momentum_name() const { return momentum_name_; }
  double momentum(size_t g = 0) const;
  void set_momentum(size_t g, double momentum);
  // As torch.optim.Optimizer.add_param_group: one more group, its parameters after every
  // other's (so the state indices of the others do not move), with the optimizer's own lr and
  // weight decay where the group sets none; a parameter already in a group is refused.
  // Schedulers made before it refuse to step (make them after).
  virtual void add_param_group(ParamGroup group);

  // Per-parameter state as "state.<index>.<key>" tensors (index = position in params()).
  virtual OrderedDict<Tensor> state_dict() const = 0;
  // Restores state saved from an optimizer of the same kind over parameters of the same
  // shapes; checks everything before changing anything.
  virtual void load_state_dict(const OrderedDict<Tensor>& state) = 0;

 protected:
  // Validates `state` against the keys `allowed` may produce for each parameter index.
  void check_state(const OrderedDict<Tensor>& state, const std::vector<std::string>& keys) const;
  // Parameter i's state `key` from a loaded state_dict, copied into the parameter's dtype and
  // device (undefined where absent); and its step count (0 where absent; PyTorch saves it as a
  // float tensor).
  Tensor loaded_state(const OrderedDict<Tensor>& state, size_t i, const std::string& key) const;
  static int64_t loaded_step(const OrderedDict<Tensor>& state, size_t i);
  // The gradient a step follows: p.grad(), negated under `maximize` (torch's maximize=True).
  static Tensor step_grad(const Tensor& p, bool maximize);
  // After add_param_group: params() has grown; per-parameter state must cover it.
  virtual void params_added() {}
  // Derived constructors with a momentum: its name and the value every group starts with
  // (and groups added later get), and the range set_momentum accepts: [0, 1) for beta1.
  void use_momentum(std::string name, double initial, bool below_one);

  std::vector<Tensor> params_;
  std::string name_;

 private:
  struct Group {
    size_t begin, end;
    double lr, weight_decay;
    double momentum = 0;
    std::optional<double> initial_lr;
    Tensor lr_tensor;  // set_lr_tensor's
  };
  const Group& group(size_t g) const;
  // Checks and appends one group (the constructor's and add_param_group's work).
  void append_group(ParamGroup group);
  std::vector<Group> groups_;
  double default_lr_, default_weight_decay_;
  std::string momentum_name_;
  double default_momentum_ = 0;
  bool momentum_below_one_ = false;
};

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  // As torch's maximize=True (every optimizer here has it): ascend the gradient.
  SGDOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  double weight_decay() const { return weight_decay_; }
  bool nesterov() const { return nesterov_; }
  bool maximize() const { return maximize_; }

 private:
  double lr_;
  double momentum_ = 0;
  double dampening_ = 0;
  double weight_decay_ = 0;
  bool nesterov_ = false;
  bool maximize_ = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Groups take their lr and weight_decay from the group where set, else from `options`.
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  using Optimizer::step;
  void step() override;
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;
  // The options given (the defaults of every group; the groups' lr and weight decay are lr(g)
  // and weight_decay(g)).
  const SGDOptions& defaults() const { return options_; }

 protected:
  void params_added() override { momentum_buffers_.resize(params_.size()); }

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until a parameter's first step
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  AdamOptions& betas(double beta1, double beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return *this;
  }
  AdamOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  AdamOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  // As PyTorch's capturable=True: the step count is a float32 tensor on the parameter's
  // device and the bias corrections are computed there with tensor ops, so step() reads no
  // host number that a CUDA graph would freeze and can be captured. PyTorch's capturable
  // arithmetic, on any device (PyTorch asserts CUDA; its differentiable path runs the same
  // arithmetic on the CPU). The learning rate stays a host number: a captured step keeps it.
  AdamOptions& capturable(bool v) {
    capturable_ = v;
    return *this;
  }
  // As PyTorch's amsgrad=True: the update divides by the running maximum of the second moment
  // (state max_exp_avg_sq), never by a smaller one than before.
  AdamOptions& amsgrad(bool v) {
    amsgrad_ = v;
    return *this;
  }
  AdamOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  // Unset: the optimizer's default, as torch's (Adam 0, AdamW 1e-2); weight_decay() reads 0.
  double weight_decay() const { return weight_decay_.value_or(0.0); }
  bool weight_decay_set() const { return weight_decay_.has_value(); }
  bool capturable() const { return capturable_; }
  bool amsgrad() const { return amsgrad_; }
  bool maximize() const { return maximize_; }

 private:
  double lr_;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double eps_ = 1e-8;
  std::optional<double> weight_decay_;
  bool capturable_ = false;
  bool amsgrad_ = false;
  bool maximize_ = false;
};

// Adam; with decoupled = true it is AdamW (decay applied to the weights, not the gradient).
struct AdamWOptions;
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  // AdamW's options given to Adam (PyTorch: torch.optim.Adam(params, **adamw_kwargs) would add
  // an L2 term instead of decoupled decay): refused at compile time; use nn::AdamW.
  Adam(std::vector<Tensor> params, const AdamWOptions& options) = delete;
  Adam(std::vector<ParamGroup> groups, const AdamWOptions& options) = delete;
  using Optimizer::step;
  void step() override;
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;
  const AdamOptions& defaults() const { return options_; }

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, std::string name);
  void step_group(size_t g);
  void params_added() override {
    state_.resize(params_.size());
    group_steps_.resize(num_param_groups());
  }

 private:
  struct State {
    int64_t step = 0;  // without capturable
    // With capturable: float32 [1] on the parameter's device, as PyTorch's; where the group's
    // parameters share a device, a view of the group's counts (group_steps_).
    Tensor step_t;
    Tensor exp_avg, exp_avg_sq;
    Tensor max_exp_avg_sq;  // with amsgrad
  };
  // Capturable: the step counts of group g's parameters in one float32 tensor on their device
  // (made on first use), so that the numbers the update needs are computed for the whole group
  // by one op each; undefined where the group's parameters are on more than one device.
  const Tensor& group_steps(size_t g);
  // Parameter i's (of group g) capturable step count: its view of group_steps, else its own.
  Tensor step_count(size_t g, size_t i);
  // The group's stepped parameters' capturable numbers (tensor/fused.h's AdamDeviceNumbers):
  // PyTorch's capturable arithmetic on the counts, op for op.
  tensor::AdamDeviceNumbers device_numbers(size_t g, const std::vector<size_t>& stepped, double lr, const Tensor& lr_t,
                                           double beta1);
  // Parameter p's (of group g) step op by op: the decay, the moments, then the update with host
  // bias corrections, or (capturable) its numbers denom_scale, eps_term and keep (from device_numbers).
  void update(size_t g, const Tensor& p, State& s, const Tensor& denom_scale, const Tensor& eps_term,
              const Tensor& keep) const;
  AdamOptions options_;
  bool decoupled_;
  std::vector<State> state_;
  std::vector<Tensor> group_steps_;
};

// AdamW, as torch.optim.AdamW: a weight_decay the options leave unset is 1e-2, torch's
// default (nn::AdamW(params, nn::AdamOptions(1e-3)) decays by 1e-2; .weight_decay(0) turns it
// off). defaults() holds the decay used.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options);
  AdamW(std::vector<ParamGroup> groups, AdamOptions options);
};

// AdamW's options, as libtorch's AdamWOptions: AdamOptions whose weight decay starts at 1e-2
// (the same as AdamOptions(lr) given to AdamW), their setters chaining as AdamWOptions, so
// that nn::Adam, whose weight decay is an L2 term added to the gradient, refuses them at
// compile time rather than decay otherwise than asked.
struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { AdamOptions::weight_decay(1e-2); }
  using AdamOptions::amsgrad;
  using AdamOptions::betas;
  using AdamOptions::capturable;
  using AdamOptions::eps;
  using AdamOptions::lr;
  using AdamOptions::maximize;
  using AdamOptions::weight_decay;
  AdamWOptions& lr(double v) { return chain(AdamOptions::lr(v)); }
  AdamWOptions& betas(double beta1, double beta2) { return chain(AdamOptions::betas(beta1, beta2)); }
  AdamWOptions& eps(double v) { return chain(AdamOptions::eps(v)); }
  AdamWOptions& weight_decay(double v) { return chain(AdamOptions::weight_decay(v)); }
  AdamWOptions& capturable(bool v) { return chain(AdamOptions::capturable(v)); }
  AdamWOptions& amsgrad(bool v) { return chain(AdamOptions::amsgrad(v)); }
  AdamWOptions& maximize(bool v) { return chain(AdamOptions::maximize(v)); }

 private:
  AdamWOptions& chain(AdamOptions&) { return *this; }
};

}  // namespace tinyddp::nn
