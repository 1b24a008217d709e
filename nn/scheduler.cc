// The learning-rate schedulers of scheduler.h: the step and state-dict protocol they share,
// then each one's get_lr with PyTorch's formula (LambdaLR, StepLR, ExponentialLR, MultiStepLR,
// CosineAnnealingLR, LinearLR) and the warmup + cosine schedule of the GPT example.
#include "tinyddp/nn/scheduler.h"

#include <algorithm>
#include <cmath>

namespace tinyddp::nn {

LRScheduler::LRScheduler(Optimizer& optimizer, const char* name) : optimizer_(optimizer), name_(name) {
  // As PyTorch's group.setdefault("initial_lr", group["lr"]): the first scheduler of a group
  // fixes its base rate, the ones made after it (SequentialLR's, ChainedScheduler's) share it.
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    if (!optimizer_.initial_lr(g)) optimizer_.set_initial_lr(g, optimizer_.lr(g));
    base_lrs_.push_back(*optimizer_.initial_lr(g));
  }
}

void LRScheduler::initial_step() { step(); }

void LRScheduler::step() {
  TDDP_CHECK(optimizer_.num_param_groups() == base_lrs_.size(),
             "{}: the optimizer has {} parameter groups but the scheduler was made for {} (make the scheduler after "
             "add_param_group)",
             name_, optimizer_.num_param_groups(), base_lrs_.size());
  ++last_epoch_;
  last_lr_ = get_lr();
  for (size_t g = 0; g < last_lr_.size(); ++g) optimizer_.set_lr(g, last_lr_[g]);
  after_rates_set();
}

void LRScheduler::step_to(int64_t epoch) {
  last_epoch_ = epoch;
  last_lr_ = closed_form_lr().value_or(get_lr());
  for (size_t g = 0; g < last_lr_.size(); ++g) optimizer_.set_lr(g, last_lr_[g]);
  after_rates_set();
}

namespace {
// f(base rate, group) for every group: the closed forms' shape.
template <typename F>
std::vector<double> from_base(const std::vector<double>& base_lrs, F f) {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs.size(); ++g) out.push_back(f(base_lrs[g], g));
  return out;
}
}  // namespace

// The closed forms, PyTorch's expressions in its order of operations.
std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  const double k = static_cast<double>(last_epoch_ / step_size_);  // Python's // on epochs >= 0
  return from_base(base_lrs_, [&](double base, size_t) { return base * std::pow(gamma_, k); });
}
std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  return from_base(base_lrs_,
                   [&](double base, size_t) { return base * std::pow(gamma_, static_cast<double>(last_epoch_)); });
}
std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  // bisect_right over the sorted milestones: how many are <= last_epoch
  const auto passed =
      std::count_if(milestones_.begin(), milestones_.end(), [&](int64_t m) { return m <= last_epoch_; });
  return from_base(base_lrs_,
                   [&](double base, size_t) { return base * std::pow(gamma_, static_cast<double>(passed)); });
}
std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  const double e = static_cast<double>(last_epoch_), t = static_cast<double>(t_max_);
  return from_base(
      base_lrs_, [&](double base, size_t) { return eta_min_ + (base - eta_min_) * (1 + std::cos(M_PI * e / t)) / 2; });
}
std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_, last_epoch_));
  return from_base(base_lrs_, [&](double base, size_t) {
    return base * (start_ + (end_ - start_) * done / static_cast<double>(total_));
  });
}

OrderedDict<Tensor> LRScheduler::state_dict() const {
  OrderedDict<Tensor> out;
  out.insert("last_epoch", tensor::scalar_tensor(static_cast<double>(last_epoch_), tensor::kInt64));
  out.insert("base_lrs", tensor::from_vector(base_lrs_));
  out.insert("last_lr", tensor::from_vector(last_lr_));
  return out;
}

void LRScheduler::load_state_dict(const OrderedDict<Tensor>& state) {
  const size_t groups = base_lrs_.size();
  for (const char* key : {"last_epoch", "base_lrs", "last_lr"}) {
    TDDP_CHECK(state.contains(key), "{}: load_state_dict: missing '{}'", name_, key);
  }
  const Tensor& epoch = state.at("last_epoch");
  TDDP_CHECK(epoch.numel() == 1 && epoch.dtype() == tensor::kInt64 && epoch.item<int64_t>() >= -1,
             "{}: load_state_dict: last_epoch must be one int64 >= -1 (-1: a SequentialLR's scheduler not started)",
             name_);
  for (const char* key : {"base_lrs", "last_lr"}) {
    const Tensor& t = state.at(key);
    TDDP_CHECK(t.dim() == 1 && t.numel() == static_cast<int64_t>(groups) && t.dtype() == tensor::kFloat64,
               "{}: load_state_dict: '{}' must be float64 with one rate per parameter group ({}), got {} {}", name_,
               key, groups, tensor::dtype_name(t.dtype()), tensor::format_shape(t.sizes()));
  }
  last_epoch_ = epoch.item<int64_t>();
  base_lrs_ = state.at("base_lrs").to_vector<double>();
  last_lr_ = state.at("last_lr").to_vector<double>();
  for (size_t g = 0; g < groups; ++g) optimizer_.set_lr(g, last_lr_[g]);
  after_rates_set();
}

// ---- LambdaLR ---------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), std::move(lr_lambda))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer, "LambdaLR"), lambdas_(std::move(lr_lambdas)) {
  TDDP_CHECK(lambdas_.size() == optimizer.num_param_groups(),
             "LambdaLR: expected {} lr_lambdas (one per group), got {}", optimizer.num_param_groups(), lambdas_.size());
  for (const Lambda& f : lambdas_) TDDP_CHECK(f != nullptr, "LambdaLR: an lr_lambda is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(base_lrs_[g] * lambdas_[g](last_epoch_));
  return out;
}

// The chained schedulers below (StepLR, ExponentialLR, MultiStepLR, CosineAnnealingLR,
// LinearLR) write PyTorch's get_lr expressions in its order of operations, from the group's
// current rate, so that every rate equals PyTorch's to the last bit.

namespace {

// The group's current rates, each passed through f(current, group).
template <typename F>
std::vector<double> each_group(const Optimizer& optimizer, F f) {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) out.push_back(f(optimizer.lr(g), g));
  return out;
}

}  // namespace

// ---- StepLR -----------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  TDDP_CHECK(step_size_ >= 1, "StepLR: step_size must be at least 1, got {}", step_size_);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  return each_group(optimizer_, [&](double lr, size_t) {
    return last_epoch_ == 0 || last_epoch_ % step_size_ != 0 ? lr : lr * gamma_;
  });
}

// ---- ExponentialLR ----------------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() const {
  return each_group(optimizer_, [&](double lr, size_t) { return last_epoch_ == 0 ? lr : lr * gamma_; });
}

// ---- MultiStepLR ------------------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() const {
  const auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  return each_group(
      optimizer_, [&](double lr, size_t) { return hits == 0 ? lr : lr * std::pow(gamma_, static_cast<double>(hits)); });
}

// ---- CosineAnnealingLR ------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), t_max_(T_max), eta_min_(eta_min) {
  TDDP_CHECK(t_max_ >= 1, "CosineAnnealingLR: T_max must be at least 1, got {}", t_max_);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const double e = static_cast<double>(last_epoch_), t = static_cast<double>(t_max_);
  const int64_t period = 2 * t_max_;
  const int64_t phase = ((last_epoch_ - 1 - t_max_) % period + period) % period;  // Python's %
  return each_group(optimizer_, [&](double lr, size_t g) {
    if (last_epoch_ == 0) return lr;
    if (phase == 0) return lr + (base_lrs_[g] - eta_min_) * (1 - std::cos(M_PI / t)) / 2;  // the turn at eta_min
    return (1 + std::cos(M_PI * e / t)) / (1 + std::cos(M_PI * (e - 1) / t)) * (lr - eta_min_) + eta_min_;
  });
}

// ---- LinearLR ---------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, "LinearLR"), start_(start_factor), end_(end_factor), total_(total_iters) {
  TDDP_CHECK(start_ > 0 && start_ <= 1,
             "LinearLR: start_factor expected to be greater than 0 and less or equal to 1, got {}", start_);
  TDDP_CHECK(end_ >= 0 && end_ <= 1, "LinearLR: end_factor expected to be between 0 and 1, got {}", end_);
  TDDP_CHECK(total_ >= 1, "LinearLR: total_iters must be at least 1, got {}", total_);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  return each_group(optimizer_, [&](double lr, size_t) {
    if (last_epoch_ == 0) return lr * start_;
    if (last_epoch_ > total_) return lr;
    return lr * (1. + (end_ - start_) / (static_cast<double>(total_) * start_ +
                                         static_cast<double>(last_epoch_ - 1) * (end_ - start_)));
  });
}

// ---- WarmupCosineLR ---------------------------------------------------------------------------

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler(optimizer, "WarmupCosineLR"), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  TDDP_CHECK(warmup_ >= 0 && total_ >= 1, "WarmupCosineLR: need warmup_steps >= 0 and total_steps >= 1, got {} and {}",
             warmup_, total_);
  TDDP_CHECK(min_lr_ >= 0, "WarmupCosineLR: min_lr must not be negative, got {}", min_lr_);
  initial_step();
}

double WarmupCosineLR::at(int64_t step, double lr, int64_t warmup_steps, int64_t total_steps, double min_lr) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double decay_ratio = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
  return min_lr + coeff * (lr - min_lr);
}

std::vector<double> WarmupCosineLR::get_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(at(last_epoch_, base, warmup_, total_, min_lr_));
  return out;
}

// ---- NanoGptLR --------------------------------------------------------------------------------

NanoGptLR::NanoGptLR(Optimizer& optimizer, int64_t warmup_iters, int64_t lr_decay_iters, double min_lr, bool decay_lr)
    : LRScheduler(optimizer, "NanoGptLR"), warmup_(warmup_iters), decay_end_(lr_decay_iters), min_lr_(min_lr),
      decay_(decay_lr) {
  TDDP_CHECK(warmup_ >= 0 && decay_end_ >= 0,
             "NanoGptLR: need warmup_iters >= 0 and lr_decay_iters >= 0, got {} and {}", warmup_, decay_end_);
  TDDP_CHECK(min_lr_ >= 0, "NanoGptLR: min_lr must not be negative, got {}", min_lr_);
  TDDP_CHECK(!decay_ || decay_end_ != warmup_,
             "NanoGptLR: lr_decay_iters ({}) equals warmup_iters: the cosine would divide by zero at iteration {} "
             "(make lr_decay_iters larger, or set decay_lr off)",
             decay_end_, warmup_);
  initial_step();
}

double NanoGptLR::at(int64_t it, double lr, int64_t warmup_iters, int64_t lr_decay_iters, double min_lr) {
  if (it < warmup_iters) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio =
      static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * decay_ratio));
  return min_lr + coeff * (lr - min_lr);
}

std::vector<double> NanoGptLR::get_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(decay_ ? at(last_epoch_, base, warmup_, decay_end_, min_lr_) : base);
  return out;
}

}  // namespace tinyddp::nn
