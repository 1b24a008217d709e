// Join for uneven inputs: DistributedDataParallel::join and its steps, following PyTorch's
// Join context manager with DDP's join hook. Every collective an active rank issues in a
// forward/backward has a twin on a joined rank, in the same order:
//
//   active rank (forward, then backward)          joined rank (join_hook_main, per iteration)
//   allreduce(1): "still active"                   allreduce(0): how many are active; 0 ends the loop
//   [throw_on_early_termination: allreduce(0)]     [allreduce(1): "terminate", then throw]
//   the one-time bucket rebuild's broadcast        the same rebuild
//   buffers: allreduce(max rank), broadcast        allreduce(-1), broadcast
//   allreduce(1 or 0): "my backward synchronises"  allreduce(0): does anyone's?  (no: skip the rest)
//   each bucket's reduction, in bucket order       the same hook on zeros
//   the used-parameter map (find_unused)           a map of zeros
//
// When every rank has joined, the last ones to join agree on the highest of them, whose
// parameters and buffers are broadcast to all (join_hook_post).
#include <fmt/format.h>

#include "ddp/distributed.h"
#include "tensor/ops.h"

namespace tinyddp::ddp {

namespace {
int64_t allreduce_count(comm::ProcessGroup& pg, tensor::Device device, int64_t mine) {
  const Tensor t = tensor::from_vector(std::vector<int64_t>{mine}, {}, device);
  pg.allreduce(t)->wait();
  return t.item<int64_t>();
}
}  // namespace

void DistributedDataParallel::join(const std::function<void()>& loop, JoinOptions options) {
  TDDP_CHECK(!joining_, "DistributedDataParallel::join: already joining");
  if (!options.enable) {
    loop();
    return;
  }
  joining_ = true;
  join_options_ = options;
  struct Reset {
    DistributedDataParallel& ddp;
    ~Reset() { ddp.joining_ = false; }
  } reset{*this};
  loop();  // an exception leaves at once, as PyTorch's context manager does
  tensor::NoGradGuard no_grad;
  bool is_last_joiner = true;
  // Out of inputs: mirror the others' iterations until every rank is done (each round is a
  // collective with the group's timeout, so a dead peer ends the loop with an error).
  while (true) {
    const int64_t active = allreduce_count(*pg_, control_device_, 0);
    if (active == 0) break;
    if (options.throw_on_early_termination) {
      allreduce_count(*pg_, control_device_, 1);  // tells the active ranks to throw too
      throw Error(fmt::format("DistributedDataParallel::join: rank {} ran out of inputs while {} rank(s) had more "
                              "(throw_on_early_termination)",
                              pg_->rank(), active));
    }
    join_hook_main();
    is_last_joiner = false;
  }
  if (should_sync_work_) should_sync_work_->wait();  // this rank's last flag (answered by now)
  join_hook_post(is_last_joiner);
}

void DistributedDataParallel::notify_join_context() {
  const Tensor active = tensor::from_vector(std::vector<int64_t>{1}, {}, control_device_);
  std::shared_ptr<comm::Work> work = pg_->allreduce(active);
  if (join_options_.throw_on_early_termination) {
    if (allreduce_count(*pg_, control_device_, 0) != 0) {
      throw Error(fmt::format("DistributedDataParallel::join: at least one rank ran out of inputs "
                              "(throw_on_early_termination); rank {} throws with every other rank",
                              pg_->rank()));
    }
  }
  reducer_->set_forward_pass_work_handle(std::move(work), active, join_options_.divide_by_initial_world_size);
}

void DistributedDataParallel::join_hook_main() {
  reducer_->rebuild_buckets();
  sync_module_buffers(/*candidate=*/false);
  const bool should_sync = allreduce_count(*pg_, control_device_, 0) != 0;
  require_forward_param_sync_ = should_sync;  // as the active ranks' next forward will see it
  if (should_sync) reducer_->match_backward_collectives();
}

void DistributedDataParallel::join_hook_post(bool is_last_joiner) {
  broadcast_coalesced(module_states(), find_common_rank(is_last_joiner));
}

// ---- The Reducer's side of Join -----------------------------------------------------------------

void Reducer::set_forward_pass_work_handle(std::shared_ptr<comm::Work> work, Tensor active_ranks,
                                           bool use_static_world_size) {
  forward_pass_work_ = std::move(work);
  forward_pass_active_ = std::move(active_ranks);
  use_static_world_size_ = use_static_world_size;
}

void Reducer::match_backward_collectives() {
  tensor::NoGradGuard no_grad;
  // The others' synchronised backward, counted as ours (static_graph's first iteration).
  ++num_bwd_calls_;
  const bool static_first = static_graph_first_iteration();
  const auto zero_map = [&] {
    const Tensor zeros =
        tensor::zeros({static_cast<int64_t>(params_.size())}, tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(zeros)->wait();
  };
  if (static_first) zero_map();  // delay_all_reduce sends the map before the buckets
  std::vector<std::shared_ptr<Future>> futures;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GradBucket zeros = make_grad_bucket(b, tensor::zeros_like(buckets_[b].contents));
    futures.push_back(comm_hook_(zeros));
  }
  for (auto& f : futures) f->wait();
  if (dynamic_graph_find_unused()) zero_map();  // the others send it after their last bucket
  // Take part in the one-time rebuild the others' first iteration leads to (static_graph:
  // their second, the first one being delay_all_reduce's).
  if (should_rebuild_buckets() && !static_first && rebuilt_param_indices_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) rebuilt_param_indices_.push_back(i);
  }
}

}  // namespace tinyddp::ddp
