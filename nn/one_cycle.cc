// OneCycleLR (one_cycle.h): its phases, PyTorch's two annealing formulas, and the walk from
// the step number to the phase it falls in, which gives the rate and the momentum alike.
#include "tinyddp/nn/one_cycle.h"

#include <cmath>

namespace tinyddp::nn {

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.num_param_groups(), max_lr), total_steps,
                 std::move(options)) {}

namespace {
int64_t steps_of(int64_t epochs, int64_t steps_per_epoch) {
  TDDP_CHECK(epochs > 0 && steps_per_epoch > 0,
             "OneCycleLR: expected positive epochs and steps_per_epoch, got {} and {}", epochs, steps_per_epoch);
  return epochs * steps_per_epoch;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t epochs, int64_t steps_per_epoch,
                       OneCycleOptions options)
    : OneCycleLR(optimizer, max_lr, steps_of(epochs, steps_per_epoch), std::move(options)) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleOptions options)
    : LRScheduler(optimizer, "OneCycleLR"), total_steps_(total_steps), options_(std::move(options)),
      max_lrs_(std::move(max_lrs)) {
  const OneCycleOptions& o = options_;
  TDDP_CHECK(total_steps_ > 0, "OneCycleLR: expected a positive total_steps, got {}", total_steps_);
  TDDP_CHECK(o.pct_start_ >= 0 && o.pct_start_ <= 1, "OneCycleLR: expected pct_start in [0, 1], got {}", o.pct_start_);
  TDDP_CHECK(o.anneal_strategy_ == "cos" || o.anneal_strategy_ == "linear",
             "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got '{}'", o.anneal_strategy_);
  TDDP_CHECK(max_lrs_.size() == optimizer.num_param_groups(),
             "OneCycleLR: expected {} values for max_lr (one per parameter group), got {}",
             optimizer.num_param_groups(), max_lrs_.size());
  TDDP_CHECK(!o.cycle_momentum_ || !optimizer.momentum_name().empty(),
             "OneCycleLR: {} has no momentum or beta1 to cycle (pass OneCycleOptions().cycle_momentum(false))",
             optimizer.name());
  for (const auto* list : {&o.base_momentums_, &o.max_momentums_}) {
    TDDP_CHECK(list->empty() || list->size() == max_lrs_.size(),
               "OneCycleLR: expected {} momentums (one per parameter group), got {}", max_lrs_.size(), list->size());
  }
  const double total = static_cast<double>(total_steps_), pct = o.pct_start_ * total;
  if (o.three_phase_) {
    phases_ = {{pct - 1, Level::kInitial, Level::kMax, Momentum::kMax, Momentum::kBase},
               {2 * pct - 2, Level::kMax, Level::kInitial, Momentum::kBase, Momentum::kMax},
               {total - 1, Level::kInitial, Level::kMin, Momentum::kMax, Momentum::kMax}};
  } else {
    phases_ = {{pct - 1, Level::kInitial, Level::kMax, Momentum::kMax, Momentum::kBase},
               {total - 1, Level::kMax, Level::kMin, Momentum::kBase, Momentum::kMax}};
  }
  // The cycle starts from max_lr / div_factor whatever the optimizer's rate was (torch's
  // group["initial_lr"]); that is the base rate.
  for (size_t g = 0; g < max_lrs_.size(); ++g) base_lrs_[g] = max_lrs_[g] / o.div_factor_;
  initial_step();
}

double OneCycleLR::lr_at(size_t g, Level level) const {
  const double initial = max_lrs_[g] / options_.div_factor_;
  if (level == Level::kInitial) return initial;
  return level == Level::kMax ? max_lrs_[g] : initial / options_.final_div_factor_;
}

double OneCycleLR::momentum_at(size_t g, Momentum level) const {
  const bool max = level == Momentum::kMax;
  const std::vector<double>& list = max ? options_.max_momentums_ : options_.base_momentums_;
  if (!list.empty()) return list[g];
  return max ? options_.max_momentum_ : options_.base_momentum_;
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy_ == "linear") return (end - start) * pct + start;
  const double cos_out = std::cos(M_PI * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

OneCycleLR::Point OneCycleLR::point() const {
  TDDP_CHECK(last_epoch_ <= total_steps_, "OneCycleLR: tried to step {} times; total_steps is {}", last_epoch_,
             total_steps_);
  const double step = static_cast<double>(last_epoch_);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (step <= phase.end_step || i + 1 == phases_.size()) {
      TDDP_CHECK(phase.end_step != start, "OneCycleLR: phase {} has no steps (total_steps {}, pct_start {})", i,
                 total_steps_, options_.pct_start_);
      return {&phase, (step - start) / (phase.end_step - start)};
    }
    start = phase.end_step;
  }
  return {&phases_.back(), 1.0};  // not reached: the last phase takes every later step
}

std::vector<double> OneCycleLR::get_lr() const {
  const Point at = point();
  std::vector<double> out;
  for (size_t g = 0; g < max_lrs_.size(); ++g) {
    const double end = lr_at(g, at.phase->end_lr), lr = anneal(lr_at(g, at.phase->start_lr), end, at.pct);
    // Step total_steps, one past the last phase's end (the step() after the last update),
    // extrapolates: a linear fall goes below zero there, which PyTorch sets and set_lr
    // refuses; the cycle's last rate stands instead.
    out.push_back(lr < 0 ? end : lr);
  }
  return out;
}

void OneCycleLR::after_rates_set() {
  if (!options_.cycle_momentum_) return;
  const Point at = point();
  for (size_t g = 0; g < max_lrs_.size(); ++g) {
    const double end = momentum_at(g, at.phase->end_momentum);
    double momentum = anneal(momentum_at(g, at.phase->start_momentum), end, at.pct);
    // The same one step past the end: a linear rise may pass 1, which no beta1 may be.
    if (momentum < 0 || (optimizer_.momentum_name() == "beta1" && momentum >= 1)) momentum = end;
    optimizer_.set_momentum(g, momentum);
  }
}

}  // namespace tinyddp::nn
