// Learning-rate schedulers, as torch.optim.lr_scheduler: each sets the learning rate of every
// parameter group of an optimizer (any of them, ZeroRedundancyOptimizer included) from the
// group's initial rate and the number of step() calls so far. As in PyTorch the constructor
// already applies epoch 0, and step() goes after optimizer.step():
//
//   nn::AdamW opt(params, nn::AdamWOptions(6e-4));
//   nn::WarmupCosineLR sched(opt, /*warmup_steps=*/100, /*total_steps=*/5000, /*min_lr=*/6e-5);
//   for (...) { ...; opt.step(); sched.step(); }
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // One more epoch (or iteration): every group's lr becomes get_lr().
  virtual void step();
  int64_t last_epoch() const { return last_epoch_; }
  // The groups' initial_lr: their rates when the group's first scheduler was made.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  Optimizer& optimizer() const { return optimizer_; }  // the one whose rates it sets

  // last_epoch, base_lrs and last_lr (float64), for checkpoints; loading puts last_lr back
  // into the optimizer's groups, so a resumed run goes on with the same rates.
  virtual OrderedDict<Tensor> state_dict() const;
  virtual void load_state_dict(const OrderedDict<Tensor>& state);

 protected:
  // Call initial_step() at the end of the derived constructor (it applies epoch 0).
  LRScheduler(Optimizer& optimizer, const char* name);
  void initial_step();
  // The rate of each group at last_epoch().
  virtual std::vector<double> get_lr() const = 0;
  // After step() or load_state_dict() has set the rates: schedules that set more than the rate
  // (OneCycleLR's momentum) set it here.
  virtual void after_rates_set() {}
  // The rates at last_epoch() from the base rates alone, for the schedules that have such a
  // form (PyTorch's _get_closed_form_lr); nothing for the others.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // Jumps to `epoch` (PyTorch's step(epoch)): the closed form's rates, else get_lr()'s.
  void step_to(int64_t epoch);
  friend class SequentialLR;

  Optimizer& optimizer_;
  const char* name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * lr_lambda(epoch), one function for all groups or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<Lambda> lambdas_;
};

// The rate times gamma every step_size epochs (PyTorch's chained form: the group's current
// rate times gamma, so the numbers equal PyTorch's to the last bit).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// The rate times gamma at every epoch (chained, as PyTorch's ExponentialLR).
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

// The rate times gamma at each milestone epoch (times gamma^k where a milestone is listed k
// times), as PyTorch's MultiStepLR.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// Cosine annealing from the initial rate to eta_min over T_max epochs and back up over the
// next T_max, and so on, in PyTorch's recursive form (each rate from the current one), so the
// rates equal PyTorch's CosineAnnealingLR to the last bit.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// The rate times a factor going linearly from start_factor to end_factor over total_iters
// epochs, then kept (PyTorch's LinearLR and its defaults, in its chained form).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_, end_;
  int64_t total_;
};

// Linear warmup, then cosine decay to min_lr over the run, for step s = last_epoch() (the shape
// of nanoGPT's get_lr, not its numbers: NanoGptLR below is that one):
//   s < warmup:       lr * (s + 1) / warmup
//   s < total_steps:  min_lr + 0.5 (1 + cos(pi (s - warmup) / (total_steps - warmup))) (lr - min_lr)
//   afterwards:       min_lr
// with lr the group's initial rate.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  // The formula for one rate, for anyone who sets the rate by hand.
  static double at(int64_t step, double lr, int64_t warmup_steps, int64_t total_steps, double min_lr);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t warmup_, total_;
  double min_lr_;
};

// nanoGPT's get_lr (its train.py), operation for operation, for iteration it = last_epoch() and
// lr the group's initial rate (nanoGPT's learning_rate):
//   it < warmup_iters:     lr * (it + 1) / (warmup_iters + 1)
//   it > lr_decay_iters:   min_lr
//   otherwise:             min_lr + 0.5 (1 + cos(pi (it - warmup_iters) / (lr_decay_iters - warmup_iters))) (lr -
//   min_lr)
// lr_decay_iters may end before the run does (min_lr after it), or even before the warmup
// does (min_lr right after it); equal to warmup_iters it is refused, as nanoGPT would divide
// by zero at that iteration. decay_lr = false keeps lr throughout (train.py's decay_lr).
class NanoGptLR : public LRScheduler {
 public:
  NanoGptLR(Optimizer& optimizer, int64_t warmup_iters, int64_t lr_decay_iters, double min_lr, bool decay_lr = true);
  // The formula for one rate (decay_lr on).
  static double at(int64_t it, double lr, int64_t warmup_iters, int64_t lr_decay_iters, double min_lr);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t warmup_, decay_end_;
  double min_lr_;
  bool decay_;
};

}  // namespace tinyddp::nn
