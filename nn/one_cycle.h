// OneCycleLR, as torch.optim.lr_scheduler.OneCycleLR: one cycle over total_steps steps, the
// rate rising from max_lr / div_factor to max_lr over the first pct_start of them and falling
// to that start / final_div_factor by the end (three_phase: back down to the start first, then
// to the minimum), each phase cosine ("cos") or linear; the momentum (SGD's, RMSprop's,
// Adam's beta1) going the other way, max_momentum to base_momentum and back. PyTorch's
// defaults and formulas, so every rate and momentum equals its own. As in PyTorch, the
// optimizer's own rate is replaced from the start, and stepping past total_steps is an error.
// One difference: at step total_steps (one past the cycle's end) PyTorch extrapolates, and a
// linear fall gives a negative rate there; tinyddp keeps the cycle's last rate instead (and
// the last momentum where a beta1 would reach 1).
//
//   nn::SGD opt(params, nn::SGDOptions(0.1).momentum(0.9));
//   nn::OneCycleLR sched(opt, /*max_lr=*/0.5, /*total_steps=*/epochs * steps_per_epoch);
//   for (...) { ...; opt.step(); sched.step(); }
#pragma once

#include <string>
#include <vector>

#include "tinyddp/nn/scheduler.h"

namespace tinyddp::nn {

struct OneCycleOptions {
  OneCycleOptions& pct_start(double v) {
    pct_start_ = v;
    return *this;
  }
  OneCycleOptions& anneal_strategy(std::string v) {  // "cos" or "linear"
    anneal_strategy_ = std::move(v);
    return *this;
  }
  OneCycleOptions& cycle_momentum(bool v) {
    cycle_momentum_ = v;
    return *this;
  }
  OneCycleOptions& base_momentum(double v) {
    base_momentum_ = v;
    return *this;
  }
  OneCycleOptions& max_momentum(double v) {
    max_momentum_ = v;
    return *this;
  }
  // One per parameter group (PyTorch's lists), instead of one for all.
  OneCycleOptions& base_momentums(std::vector<double> v) {
    base_momentums_ = std::move(v);
    return *this;
  }
  OneCycleOptions& max_momentums(std::vector<double> v) {
    max_momentums_ = std::move(v);
    return *this;
  }
  OneCycleOptions& div_factor(double v) {
    div_factor_ = v;
    return *this;
  }
  OneCycleOptions& final_div_factor(double v) {
    final_div_factor_ = v;
    return *this;
  }
  OneCycleOptions& three_phase(bool v) {
    three_phase_ = v;
    return *this;
  }

 private:
  friend class OneCycleLR;
  double pct_start_ = 0.3;
  std::string anneal_strategy_ = "cos";
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.85, max_momentum_ = 0.95, div_factor_ = 25.0, final_div_factor_ = 1e4;
  std::vector<double> base_momentums_, max_momentums_;
  bool three_phase_ = false;
};

class OneCycleLR : public LRScheduler {
 public:
  // max_lr for every group, or one per group.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleOptions options = {});
  // PyTorch's other spelling: total_steps = epochs * steps_per_epoch.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t epochs, int64_t steps_per_epoch,
             OneCycleOptions options = {});
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() const override;
  // The momentum of the step (cycle_momentum), set beside the rate and after a load.
  void after_rates_set() override;

 private:
  // Where a phase starts and ends: the group's initial, maximum or minimum rate; the maximum
  // or base momentum.
  enum class Level { kInitial, kMax, kMin };
  enum class Momentum { kMax, kBase };
  struct Phase {
    double end_step;
    Level start_lr, end_lr;
    Momentum start_momentum, end_momentum;
  };
  struct Point {
    const Phase* phase;
    double pct;
  };
  // The phase of the current step and how far into it.
  Point point() const;
  double anneal(double start, double end, double pct) const;
  double lr_at(size_t g, Level level) const;
  double momentum_at(size_t g, Momentum level) const;

  int64_t total_steps_;
  OneCycleOptions options_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_;
};

}  // namespace tinyddp::nn
