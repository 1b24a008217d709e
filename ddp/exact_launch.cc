// ExactGradientSum's collectives (exact_sum.h): when each parameter's integer sums leave, in
// the overlapped last chunk of a step (a fixed order, the last parameter first, each as soon
// as it and those after it are complete) or at finish(); the small parameters' sums in runs,
// one allreduce a run.
#include "tinyddp/autograd/accumulate_grad.h"
#include "tinyddp/comm/flatten.h"
#include "tinyddp/ddp/exact_sum.h"

namespace tinyddp::ddp {

namespace t = tinyddp::tensor;

Tensor ExactGradientSum::step_sums(size_t p) {
  Tensor sums = sums_.narrow(0, offsets_[p], lengths_[p]);
  if (!holds_[p]) sums.zero_();  // no chunk of this step folded into them (no gradient, or a refused step)
  holds_[p] = true;
  return sums;
}

void ExactGradientSum::launch(size_t p) {
  if (widened_[p]) {
    launch_widened(p);
    return;
  }
  if (!scattered_[p]) {
    // A run of small parameters leaves together, at the turn of its last member in the launch
    // order (the lowest-numbered, whose turn comes when all of them are complete).
    const SmallRun& run = runs_[static_cast<size_t>(run_of_[p])];
    if (p != run.members.back()) return;
    for (size_t q : run.members) step_sums(q);
    const std::shared_ptr<comm::Work> work = pg_->allreduce(sums_.narrow(0, run.offset, run.length));
    for (size_t q : run.members) launched_[q] = work;
    return;
  }
  const Tensor sums = step_sums(p);
  // Block r of the sums to rank r, in place: the integer sums over the ranks of its elements
  // (sharded: of its rows).
  const std::vector<Tensor> inputs = comm::flat_views(sums, std::vector<t::Shape>(pg_->size(), {block_[p]}));
  launched_[p] = pg_->reduce_scatter(inputs[static_cast<size_t>(pg_->rank())], inputs, comm::ReduceOp::kSum);
}

void ExactGradientSum::overlap_next_chunk() {
  if (hooks_.empty()) {
    for (size_t p = 0; p < params_.size(); ++p) {
      hooks_.push_back(params_[p].grad_accumulator()->add_post_hook([this, p] {
        if (!overlapping_) return;
        if (launched_[p]) {  // its sums left after a take (solo): this gradient comes too late
          late_ = true;
          ++contributions_[p];
          mixed_[p] = true;
          params_[p].mutable_grad() = Tensor();
          return;
        }
        add_gradient(p);
        fold_pending(p);
        ready(p);
      }));
    }
  }
  overlapping_ = true;
  ready_.assign(params_.size(), false);
  next_launch_ = static_cast<int64_t>(params_.size()) - 1;
}

void ExactGradientSum::ready(size_t p) {
  if (!pg_) return;
  ready_[p] = true;
  for (; next_launch_ >= 0 && ready_[static_cast<size_t>(next_launch_)]; --next_launch_) {
    launch(static_cast<size_t>(next_launch_));
  }
}

}  // namespace tinyddp::ddp
