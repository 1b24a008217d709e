// SequentialLR and ChainedScheduler (sequential_lr.h), as PyTorch's: SequentialLR undoes the
// epoch 0 its schedulers applied when they were made, puts the initial rates back and applies
// the first one's; at a milestone the next one jumps to its epoch 0 (step_to: its closed form).
#include "tinyddp/nn/sequential_lr.h"

#include <algorithm>
#include <string>

namespace tinyddp::nn {

namespace {
using Schedulers = std::vector<std::reference_wrapper<LRScheduler>>;

void check_same_optimizer(const Schedulers& schedulers, const Optimizer& optimizer, const char* name) {
  TDDP_CHECK(!schedulers.empty(), "{}: expects at least one scheduler", name);
  for (size_t i = 0; i < schedulers.size(); ++i) {
    TDDP_CHECK(&schedulers[i].get().optimizer() == &optimizer,
               "{}: expects all schedulers to belong to the same optimizer, but got scheduler at index {} to be "
               "different than the optimizer passed in",
               name, i);
  }
}

Optimizer& first_optimizer(const Schedulers& schedulers) {
  TDDP_CHECK(!schedulers.empty(), "ChainedScheduler: expects at least one scheduler");
  return schedulers.front().get().optimizer();
}
}  // namespace

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  check_same_optimizer(schedulers_, optimizer, "SequentialLR");
  TDDP_CHECK(milestones_.size() + 1 == schedulers_.size(),
             "SequentialLR: expects number of schedulers provided to be one more than the number of milestone "
             "points, but got number of schedulers {} and the number of milestones to be equal to {}",
             schedulers_.size(), milestones_.size());
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(g, *optimizer.initial_lr(g));
  for (LRScheduler& s : schedulers_) --s.last_epoch_;  // undo the epoch 0 each applied when made
  schedulers_.front().get().initial_step();
  last_epoch_ = 0;
  last_lr_ = schedulers_.front().get().get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto index = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) -
                                         milestones_.begin());  // bisect_right
  LRScheduler& scheduler = schedulers_[index];
  if (index > 0 && milestones_[index - 1] == last_epoch_) {
    scheduler.step_to(0);
  } else {
    scheduler.step();
  }
  last_lr_ = scheduler.get_last_lr();
}

OrderedDict<Tensor> SequentialLR::state_dict() const {
  OrderedDict<Tensor> out = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    for (const auto& [key, value] : schedulers_[i].get().state_dict()) {
      out.insert("_schedulers." + std::to_string(i) + "." + key, value);
    }
  }
  return out;
}

void SequentialLR::load_state_dict(const OrderedDict<Tensor>& state) {
  std::vector<OrderedDict<Tensor>> parts(schedulers_.size());
  OrderedDict<Tensor> own;
  for (const auto& [key, value] : state) {
    bool nested = false;
    for (size_t i = 0; i < schedulers_.size() && !nested; ++i) {
      const std::string prefix = "_schedulers." + std::to_string(i) + ".";
      if (key.rfind(prefix, 0) == 0) {
        parts[i].insert(key.substr(prefix.size()), value);
        nested = true;
      }
    }
    if (!nested) own.insert(key, value);
  }
  // the schedulers first, then this one's rates (the ones in force when it was saved)
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i].get().load_state_dict(parts[i]);
  LRScheduler::load_state_dict(own);
}

ChainedScheduler::ChainedScheduler(std::vector<std::reference_wrapper<LRScheduler>> schedulers)
    : LRScheduler(first_optimizer(schedulers), "ChainedScheduler"), schedulers_(std::move(schedulers)) {
  check_same_optimizer(schedulers_, optimizer_, "ChainedScheduler");
  last_epoch_ = 0;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

void ChainedScheduler::step() {
  for (LRScheduler& s : schedulers_) s.step();
  ++last_epoch_;
  last_lr_.clear();
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

}  // namespace tinyddp::nn
