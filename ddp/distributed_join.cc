// DistributedDataParallel as a Joinable (join.h): its join hook, which on a joined rank
// mirrors an active rank's forward (the bucket rebuild, the buffers' broadcast, "does this
// backward synchronise?") and backward (the Reducer's match_backward_collectives,
// reducer_join.cc), and its post hook, which broadcasts the model from the last rank to join.
// The order of those collectives, twin by twin: join.cc's opening comment.
#include <memory>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/ddp/distributed.h"

namespace tinyddp::ddp {

namespace {
class DDPJoinHook : public JoinHook {
 public:
  explicit DDPJoinHook(DistributedDataParallel& ddp) : ddp_(ddp) {}
  void main_hook() override { ddp_.join_hook_main(); }
  void post_hook(bool is_last_joiner) override { ddp_.join_hook_post(is_last_joiner); }

 private:
  DistributedDataParallel& ddp_;
};
}  // namespace

std::unique_ptr<JoinHook> DistributedDataParallel::join_hook() {
  TDDP_CHECK(!options_.deterministic(),
             "DistributedDataParallel: join does not take the deterministic option (every rank runs the same number "
             "of chunks in each deterministic_step, so inputs are never uneven)");
  return std::make_unique<DDPJoinHook>(*this);
}

void DistributedDataParallel::join(const std::function<void()>& loop, JoinOptions options) {
  Join::run({this}, loop, options);
}

void DistributedDataParallel::notify_join_context() {
  if (std::optional<Join::Notice> notice = Join::notify_join_context(*this)) {
    reducer_->set_forward_pass_work_handle(std::move(notice->work), notice->active,
                                           join_config().options.divide_by_initial_world_size());
  }
}

void DistributedDataParallel::join_hook_main() {
  reducer_->rebuild_buckets();
  sync_module_buffers(/*candidate=*/false);
  const bool should_sync = comm::allreduce_int(*pg_, control_device_, 0) != 0;
  require_forward_param_sync_ = should_sync;  // as the active ranks' next forward will see it
  if (!should_sync) return;
  // Another joinable (ZeroRedundancyOptimizer) steps with this rank's .grad: give it the
  // others' average instead of the gradients of this rank's last iteration.
  bool write_gradients = false;
  for (const Joinable* j : join_config().joinables)
    write_gradients = write_gradients || j->needs_gradients_when_joined();
  reducer_->match_backward_collectives(write_gradients);
}

void DistributedDataParallel::join_hook_post(bool is_last_joiner) {
  if (should_sync_work_) should_sync_work_->wait();  // this rank's last flag (answered by now)
  broadcast_coalesced(module_states(), find_common_rank(is_last_joiner));
}

}  // namespace tinyddp::ddp
