// RMSprop and Adagrad, as torch.optim's, following their single-tensor code paths operation
// for operation (addcmul and addcdiv as value * a * b and value * a / b, left to right), with
// their defaults and their state under PyTorch's names ("square_avg", "momentum_buffer",
// "grad_avg"; "sum"; "step").
#pragma once

#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

struct RMSpropOptions {
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  RMSpropOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  RMSpropOptions& alpha(double v) {
    alpha_ = v;
    return *this;
  }
  RMSpropOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  RMSpropOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  RMSpropOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  RMSpropOptions& centered(bool v) {
    centered_ = v;
    return *this;
  }
  RMSpropOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double alpha() const { return alpha_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  double momentum() const { return momentum_; }
  bool centered() const { return centered_; }
  bool maximize() const { return maximize_; }

 private:
  double lr_, alpha_ = 0.99, eps_ = 1e-8, weight_decay_ = 0, momentum_ = 0;
  bool centered_ = false, maximize_ = false;
};

// square_avg = alpha square_avg + (1 - alpha) g^2; the step divides g by sqrt(square_avg) + eps
// (centered: by sqrt(square_avg - grad_avg^2) + eps, grad_avg the running mean of g), through a
// momentum buffer when momentum > 0.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = RMSpropOptions());
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = RMSpropOptions());
  using Optimizer::step;
  void step() override;
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;
  const RMSpropOptions& defaults() const { return options_; }

 protected:
  void params_added() override { state_.resize(params_.size()); }

 private:
  struct State {
    int64_t step = 0;
    Tensor square_avg, momentum_buffer, grad_avg;
  };
  RMSpropOptions options_;
  std::vector<State> state_;
};

struct AdagradOptions {
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  AdagradOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  AdagradOptions& lr_decay(double v) {
    lr_decay_ = v;
    return *this;
  }
  AdagradOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  AdagradOptions& initial_accumulator_value(double v) {
    initial_accumulator_value_ = v;
    return *this;
  }
  AdagradOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  AdagradOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double lr_decay() const { return lr_decay_; }
  double weight_decay() const { return weight_decay_; }
  double initial_accumulator_value() const { return initial_accumulator_value_; }
  double eps() const { return eps_; }
  bool maximize() const { return maximize_; }

 private:
  double lr_, lr_decay_ = 0, weight_decay_ = 0, initial_accumulator_value_ = 0, eps_ = 1e-10;
  bool maximize_ = false;
};

// sum += g^2 (from initial_accumulator_value); the step is lr / (1 + (step - 1) lr_decay) times
// g / (sqrt(sum) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options = AdagradOptions());
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = AdagradOptions());
  using Optimizer::step;
  void step() override;
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;
  const AdagradOptions& defaults() const { return options_; }

 protected:
  void params_added() override;

 private:
  struct State {
    int64_t step = 0;
    Tensor sum;
  };
  AdagradOptions options_;
  std::vector<State> state_;
};

}  // namespace tinyddp::nn
