// ReduceLROnPlateau (plateau.h), step for step as PyTorch 1.13's.
#include "tinyddp/nn/plateau.h"

#include <algorithm>
#include <cmath>

namespace tinyddp::nn {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  TDDP_CHECK(options_.factor() < 1.0, "ReduceLROnPlateau: factor should be < 1.0, got {}", options_.factor());
  TDDP_CHECK(options_.mode() == "min" || options_.mode() == "max", "ReduceLROnPlateau: mode {} is unknown!",
             options_.mode());
  TDDP_CHECK(options_.threshold_mode() == "rel" || options_.threshold_mode() == "abs",
             "ReduceLROnPlateau: threshold mode {} is unknown!", options_.threshold_mode());
  const size_t groups = optimizer_.num_param_groups();
  const std::vector<double>& given = options_.min_lrs();
  TDDP_CHECK(given.size() == 1 || given.size() == groups, "ReduceLROnPlateau: expected {} min_lrs, got {}", groups,
             given.size());
  min_lrs_ = given.size() == 1 ? std::vector<double>(groups, given[0]) : given;
  best_ = options_.mode() == "min" ? INFINITY : -INFINITY;
  for (size_t g = 0; g < groups; ++g) last_lr_.push_back(optimizer_.lr(g));
}

bool ReduceLROnPlateau::is_better(double current) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == "rel";
  if (options_.mode() == "min") return rel ? current < best_ * (1.0 - t) : current < best_ - t;
  return rel ? current > best_ * (t + 1.0) : current > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // bad epochs in the cooldown do not count
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience()) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g), new_lr = std::max(old_lr * options_.factor(), min_lrs_[g]);
      if (old_lr - new_lr > options_.eps()) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_[g] = optimizer_.lr(g);
}

OrderedDict<Tensor> ReduceLROnPlateau::state_dict() const {
  OrderedDict<Tensor> out;
  out.insert("best", tensor::scalar_tensor(best_, tensor::kFloat64));
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_bad_epochs", num_bad_epochs_},
                                   {"cooldown_counter", cooldown_counter_},
                                   {"last_epoch", last_epoch_}}) {
    out.insert(key, tensor::scalar_tensor(static_cast<double>(value), tensor::kInt64));
  }
  return out;
}

void ReduceLROnPlateau::load_state_dict(const OrderedDict<Tensor>& state) {
  for (const char* key : {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"}) {
    TDDP_CHECK(state.contains(key) && state.at(key).numel() == 1, "ReduceLROnPlateau: load_state_dict: missing '{}'",
               key);
  }
  best_ = state.at("best").item<double>();
  num_bad_epochs_ = state.at("num_bad_epochs").item<int64_t>();
  cooldown_counter_ = state.at("cooldown_counter").item<int64_t>();
  last_epoch_ = state.at("last_epoch").item<int64_t>();
}

}  // namespace tinyddp::nn
