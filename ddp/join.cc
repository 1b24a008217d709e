// Join for uneven inputs: Join::run and notify_join_context, as PyTorch's Join context
// manager; the joinables' sides are theirs (DDP's: distributed_join.cc and reducer_join.cc;
// ZeroRedundancyOptimizer's: zero_redundancy_optimizer.cc). Every collective an active rank
// issues in a forward/backward has a twin on a joined rank, in the same order:
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

#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::ddp {

using comm::allreduce_int;
using tensor::Tensor;

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
    const int64_t active = allreduce_int(pg, device, 0);
    if (active == 0) break;
    if (options.throw_on_early_termination()) {
      allreduce_int(pg, device, 1);  // tells the active ranks to throw too
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
  if (config.throw_on_early_termination && allreduce_int(pg, device, 0) != 0) {
    throw Error(
        fmt::format("Join: at least one rank ran out of inputs (throw_on_early_termination); rank {} throws "
                    "with every other rank",
                    pg.rank()));
  }
  return Notice{std::move(work), active};
}

}  // namespace tinyddp::ddp
