// Join for uneven inputs: Join::run and notify_join_context (the generic part, as PyTorch's
// Join context manager), then DDP's join hook and the Reducer's side of it. Every collective
// an active rank issues in a forward/backward has a twin on a joined rank, in the same order:
//
//   active rank (forward, then backward)          joined rank (Join::run, then DDP's main_hook)
//   allreduce(1): "still active"                   allreduce(0): how many are active; 0 ends the loop
//   [throw_on_early_termination: allreduce(0)]     [allreduce(1): "terminate", then throw]
//   the one-time bucket rebuild's broadcast        the same rebuild
//   buffers: allreduce(max rank), broadcast        allreduce(-1), broadcast
//   allreduce(1 or 0): "my backward synchronises"  allreduce(0): does anyone's?  (no: skip the rest)
//   each bucket's reduction, in bucket order       the same hook on zeros
//   the used-parameter map (find_unused)           a map of zeros
//   [ZeroRedundancyOptimizer: its step's broadcasts, zero_redundancy_optimizer.cc]
//
// When every rank has joined, the last ones to join agree on the highest of them, whose
// parameters and buffers are broadcast to all (DDP's post_hook).
#include "tinyddp/ddp/join.h"

#include <fmt/format.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace {
int64_t allreduce_count(comm::ProcessGroup& pg, tensor::Device device, int64_t mine) {
  const Tensor t = tensor::from_vector(std::vector<int64_t>{mine}, {}, device);
  pg.allreduce(t)->wait();
  return t.item<int64_t>();
}
}  // namespace

void Join::run(const std::vector<Joinable*>& joinables, const std::function<void()>& loop, JoinOptions options) {
  TDDP_CHECK(!joinables.empty(), "Join: no joinables given");
  comm::ProcessGroup& pg = joinables.front()->join_process_group();
  for (const Joinable* j : joinables) {
    TDDP_CHECK(j != nullptr, "Join: a joinable is null");
    TDDP_CHECK(!j->join_config_.enable, "Join: a joinable is already in a Join");
    TDDP_CHECK(&j->join_process_group() == &pg, "Join: the joinables must share one process group");
  }
  if (!options.enable()) {
    loop();
    return;
  }
  for (Joinable* j : joinables)
    j->join_config_ = {true, options.throw_on_early_termination(), j == joinables.front(), options, joinables};
  struct Reset {
    const std::vector<Joinable*>& joinables;
    ~Reset() {
      for (Joinable* j : joinables) j->join_config_ = JoinConfig();
    }
  } reset{joinables};
  std::vector<std::unique_ptr<JoinHook>> hooks;
  for (Joinable* j : joinables) hooks.push_back(j->join_hook());
  loop();  // an exception leaves at once, as PyTorch's context manager does
  tensor::NoGradGuard no_grad;
  const tensor::Device device = joinables.front()->join_device();
  bool is_last_joiner = true;
  // Out of inputs: mirror the others' iterations until every rank is done (each round is a
  // collective with the group's timeout, so a dead peer ends the loop with an error).
  while (true) {
    const int64_t active = allreduce_count(pg, device, 0);
    if (active == 0) break;
    if (options.throw_on_early_termination()) {
      allreduce_count(pg, device, 1);  // tells the active ranks to throw too
      throw Error(fmt::format("Join: rank {} ran out of inputs while {} rank(s) had more (throw_on_early_termination)",
                              pg.rank(), active));
    }
    for (auto& hook : hooks) hook->main_hook();
    is_last_joiner = false;
  }
  for (auto& hook : hooks) hook->post_hook(is_last_joiner);
}

std::optional<Join::Notice> Join::notify_join_context(const Joinable& joinable) {
  const JoinConfig& config = joinable.join_config_;
  if (!config.enable || !config.is_first_joinable) return std::nullopt;
  comm::ProcessGroup& pg = joinable.join_process_group();
  const tensor::Device device = joinable.join_device();
  const Tensor active = tensor::from_vector(std::vector<int64_t>{1}, {}, device);
  std::shared_ptr<comm::Work> work = pg.allreduce(active);
  if (config.throw_on_early_termination && allreduce_count(pg, device, 0) != 0) {
    throw Error(
        fmt::format("Join: at least one rank ran out of inputs (throw_on_early_termination); rank {} throws "
                    "with every other rank",
                    pg.rank()));
  }
  return Notice{std::move(work), active};
}

// ---- DistributedDataParallel as a Joinable ------------------------------------------------------

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

std::unique_ptr<JoinHook> DistributedDataParallel::join_hook() { return std::make_unique<DDPJoinHook>(*this); }

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
  const bool should_sync = allreduce_count(*pg_, control_device_, 0) != 0;
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

// ---- The Reducer's side of Join -----------------------------------------------------------------

void Reducer::set_forward_pass_work_handle(std::shared_ptr<comm::Work> work, Tensor active_ranks,
                                           bool use_static_world_size) {
  forward_pass_work_ = std::move(work);
  forward_pass_active_ = std::move(active_ranks);
  use_static_world_size_ = use_static_world_size;
}

void Reducer::match_backward_collectives(bool write_gradients) {
  tensor::NoGradGuard no_grad;
  // The others' synchronised backward, counted as ours (static_graph's first iteration).
  ++num_bwd_calls_;
  const bool static_first = static_graph_first_iteration();
  Tensor used;  // the others' used-parameter map, when they send one
  const auto zero_map = [&] {
    used = tensor::zeros({static_cast<int64_t>(params_.size())},
                         tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(used)->wait();
  };
  if (static_first) zero_map();  // delay_all_reduce sends the map before the buckets
  std::vector<GradBucket> zeros;
  zeros.reserve(buckets_.size());  // each hook gets a reference that stays valid
  std::vector<std::shared_ptr<Future>> futures;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    zeros.push_back(make_grad_bucket(b, tensor::zeros_like(buckets_[b].contents)));
    futures.push_back(comm_hook_(zeros.back()));
  }
  std::vector<Tensor> results;
  for (auto& f : futures) results.push_back(f->wait());
  if (dynamic_graph_find_unused()) zero_map();  // the others send it after their last bucket
  if (write_gradients) {
    // The averages into .grad, as finalize_backward would have written them; a parameter no
    // rank used keeps its .grad.
    const Tensor used_on_host = used.defined() ? used.to(tensor::kCPU) : Tensor();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // The bucket's slots in the hook's result (the zeros buffer, or another tensor).
      const std::vector<Tensor> views = comm::flat_views(results[b], zeros[b].params);
      for (size_t k = 0; k < views.size(); ++k) {
        const size_t i = zeros[b].parameter_indices[k];
        const bool unused = used_on_host.defined() && used_on_host.data_ptr<int64_t>()[i] == 0;
        copy_bucket_to_grad(i, views[k], unused);
      }
    }
  }
  // Take part in the one-time rebuild the others' first iteration leads to (static_graph:
  // their second, the first one being delay_all_reduce's).
  if (should_rebuild_buckets() && !static_first && rebuilt_param_indices_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) rebuilt_param_indices_.push_back(i);
  }
}

}  // namespace tinyddp::ddp
