// The schedules that come back up, and the two plain ones beside them, as
// torch.optim.lr_scheduler's, to the last bit of PyTorch's rates:
//   ConstantLR:                  the rate times factor until total_iters, then the rate
//   PolynomialLR:                the rate decayed by (1 - t / total_iters)^power to 0
//   CosineAnnealingWarmRestarts: cosine from the initial rate to eta_min over T_0 steps, then
//                                a restart, the period times T_mult after each
//   CyclicLR:                    triangular cycles between base_lr and max_lr (modes
//                                "triangular", "triangular2", "exp_range"), the momentum (or
//                                Adam's beta1) cycled the other way
#pragma once

#include <string>
#include <vector>

#include "tinyddp/nn/scheduler.h"

namespace tinyddp::nn {

class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double factor_;
  int64_t total_;
};

class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);

 protected:
  std::vector<double> get_lr() const override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t total_;
  double power_;
};

class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t t0_, t_mult_;
  double eta_min_;
};

// CyclicLR's options beyond the rates, with PyTorch's defaults; chaining setters.
struct CyclicLROptions {
  int64_t step_size_up_ = 2000;
  int64_t step_size_down_ = -1;  // -1: step_size_up
  std::string mode_ = "triangular";
  double gamma_ = 1.0;
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.8, max_momentum_ = 0.9;

  CyclicLROptions& step_size_up(int64_t v) {
    step_size_up_ = v;
    return *this;
  }
  CyclicLROptions& step_size_down(int64_t v) {
    step_size_down_ = v;
    return *this;
  }
  CyclicLROptions& mode(std::string v) {
    mode_ = std::move(v);
    return *this;
  }
  CyclicLROptions& gamma(double v) {
    gamma_ = v;
    return *this;
  }
  CyclicLROptions& cycle_momentum(bool v) {
    cycle_momentum_ = v;
    return *this;
  }
  CyclicLROptions& base_momentum(double v) {
    base_momentum_ = v;
    return *this;
  }
  CyclicLROptions& max_momentum(double v) {
    max_momentum_ = v;
    return *this;
  }
};

// Sets every group's rate to base_lr when made (as PyTorch's), and with cycle_momentum its
// momentum (beta1 for Adam and AdamW) to max_momentum.
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions options = {});

 protected:
  std::vector<double> get_lr() const override;
  void after_rates_set() override;  // the momentum of the step

 private:
  double scale_factor() const;  // how far up the current cycle's triangle, 0 to 1
  double scale() const;         // the mode's factor on the height (1, halving, gamma^t)
  double max_lr_;
  CyclicLROptions options_;
  double total_size_, step_ratio_;
};

}  // namespace tinyddp::nn
