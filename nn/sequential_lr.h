// Schedulers of schedulers, as torch.optim.lr_scheduler's SequentialLR and ChainedScheduler:
//
//   nn::LinearLR warmup(opt, 0.1, 1.0, 5);
//   nn::CosineAnnealingLR decay(opt, 95);
//   nn::SequentialLR sched(opt, {warmup, decay}, {5});  // warmup for 5 steps, then the cosine
//
// The schedulers are held by reference: they must outlive the one that drives them.
#pragma once

#include <functional>
#include <vector>

#include "tinyddp/nn/scheduler.h"

namespace tinyddp::nn {

// One scheduler after another: schedulers[i] drives the rates from milestones[i - 1] on,
// starting there from its epoch 0 (its closed form: a CosineAnnealingLR starts again from the
// base rate). Construction puts every group back to its initial rate and applies the first
// scheduler's epoch 0, as PyTorch's.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  // Its own last_epoch, base_lrs, last_lr, then each scheduler's state under "_schedulers.<i>.".
  OrderedDict<Tensor> state_dict() const override;
  void load_state_dict(const OrderedDict<Tensor>& state) override;

 protected:
  std::vector<double> get_lr() const override { return last_lr_; }

 private:
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Every scheduler steps at each step(), in order, each from the rates the one before left
// (their product, for the multiplicative ones).
class ChainedScheduler : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::reference_wrapper<LRScheduler>> schedulers);
  void step() override;

 protected:
  std::vector<double> get_lr() const override { return last_lr_; }

 private:
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
};

}  // namespace tinyddp::nn
