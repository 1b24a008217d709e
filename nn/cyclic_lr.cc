// The schedules of cyclic_lr.h, each get_lr written as PyTorch's, in its order of operations.
#include "tinyddp/nn/cyclic_lr.h"

#include <algorithm>
#include <cmath>

namespace tinyddp::nn {

// ---- ConstantLR and PolynomialLR (chained: from the group's current rate) ---------------------

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer, "ConstantLR"), factor_(factor), total_(total_iters) {
  TDDP_CHECK(factor_ >= 0 && factor_ <= 1, "ConstantLR: constant factor expected to be between 0 and 1, got {}",
             factor_);
  initial_step();
}

std::vector<double> ConstantLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    const double lr = optimizer_.lr(g);
    out.push_back(last_epoch_ == 0 ? lr * factor_ : last_epoch_ != total_ ? lr : lr * (1.0 / factor_));
  }
  return out;
}

std::optional<std::vector<double>> ConstantLR::closed_form_lr() const {
  std::vector<double> out;
  const double reached = last_epoch_ >= total_ ? 1.0 : 0.0;
  for (const double base : base_lrs_) out.push_back(base * (factor_ + reached * (1 - factor_)));
  return out;
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer, "PolynomialLR"), total_(total_iters), power_(power) {
  TDDP_CHECK(total_ >= 1, "PolynomialLR: total_iters must be at least 1, got {}", total_);
  initial_step();
}

std::vector<double> PolynomialLR::get_lr() const {
  std::vector<double> out;
  const double t = static_cast<double>(last_epoch_), n = static_cast<double>(total_);
  const double decay = std::pow((1.0 - t / n) / (1.0 - (t - 1) / n), power_);
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    const double lr = optimizer_.lr(g);
    out.push_back(last_epoch_ == 0 || last_epoch_ > total_ ? lr : lr * decay);
  }
  return out;
}

std::optional<std::vector<double>> PolynomialLR::closed_form_lr() const {
  std::vector<double> out;
  const double done = static_cast<double>(std::min(total_, last_epoch_));
  for (const double base : base_lrs_) {
    out.push_back(base * std::pow(1.0 - done / static_cast<double>(total_), power_));
  }
  return out;
}

// ---- CosineAnnealingWarmRestarts (from the initial rates) -------------------------------------

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult,
                                                         double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingWarmRestarts"), t0_(T_0), t_mult_(T_mult), eta_min_(eta_min) {
  TDDP_CHECK(t0_ >= 1, "CosineAnnealingWarmRestarts: Expected positive integer T_0, but got {}", t0_);
  TDDP_CHECK(t_mult_ >= 1, "CosineAnnealingWarmRestarts: Expected integer T_mult >= 1, but got {}", t_mult_);
  initial_step();
}

std::vector<double> CosineAnnealingWarmRestarts::get_lr() const {
  // T_cur and T_i after last_epoch steps: each step adds 1 to T_cur, and reaching T_i restarts
  // (T_cur -= T_i, T_i *= T_mult), as PyTorch's step() counts them.
  int64_t t_cur = last_epoch_, t_i = t0_;
  while (t_cur >= t_i) {
    t_cur -= t_i;
    t_i *= t_mult_;
  }
  std::vector<double> out;
  for (double base : base_lrs_) {
    out.push_back(eta_min_ +
                  (base - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(t_cur) / static_cast<double>(t_i))) / 2);
  }
  return out;
}

// ---- CyclicLR -----------------------------------------------------------------------------------

CyclicLR::CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions options)
    : LRScheduler(optimizer, "CyclicLR"), max_lr_(max_lr), options_(std::move(options)) {
  const CyclicLROptions& o = options_;
  TDDP_CHECK(o.mode_ == "triangular" || o.mode_ == "triangular2" || o.mode_ == "exp_range",
             "CyclicLR: mode is invalid and scale_fn is None: '{}' (triangular, triangular2 or exp_range)", o.mode_);
  TDDP_CHECK(o.step_size_up_ >= 1 && (o.step_size_down_ == -1 || o.step_size_down_ >= 1),
             "CyclicLR: step sizes must be at least 1, got {} and {}", o.step_size_up_, o.step_size_down_);
  TDDP_CHECK(!o.cycle_momentum_ || !optimizer.momentum_name().empty(),
             "CyclicLR: optimizer must support momentum or beta1 with `cycle_momentum` option enabled (pass "
             "CyclicLROptions().cycle_momentum(false))");
  const double up = static_cast<double>(o.step_size_up_);
  const double down = o.step_size_down_ == -1 ? up : static_cast<double>(o.step_size_down_);
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    base_lrs_[g] = base_lr;
    optimizer.set_lr(g, base_lr);
    if (o.cycle_momentum_) optimizer.set_momentum(g, o.max_momentum_);
  }
  initial_step();
}

double CyclicLR::scale_factor() const {
  const double t = static_cast<double>(last_epoch_);
  const double cycle = std::floor(1 + t / total_size_);
  const double x = 1. + t / total_size_ - cycle;
  return x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
}

double CyclicLR::scale() const {
  const double t = static_cast<double>(last_epoch_);
  if (options_.mode_ == "triangular") return 1.0;
  if (options_.mode_ == "triangular2") return 1 / std::pow(2.0, std::floor(1 + t / total_size_) - 1);
  return std::pow(options_.gamma_, t);  // exp_range scales by iterations
}

std::vector<double> CyclicLR::get_lr() const {
  const double factor = scale_factor(), s = scale();
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(base + (max_lr_ - base) * factor * s);
  return out;
}

void CyclicLR::after_rates_set() {
  if (!options_.cycle_momentum_) return;
  const double height = (options_.max_momentum_ - options_.base_momentum_) * scale_factor();
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    optimizer_.set_momentum(g, options_.max_momentum_ - height * scale());
  }
}

}  // namespace tinyddp::nn
