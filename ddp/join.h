// Join: training on uneven inputs, as PyTorch's torch.distributed.algorithms.join. Every rank
// runs its own loop inside Join::run; a rank whose loop ends early keeps issuing, through each
// joinable's JoinHook, the collectives the ranks still training issue in one iteration, so
// nobody waits forever. Joinables here: DistributedDataParallel (its hook mirrors forward and
// backward: distributed_join.cc, reducer_join.cc) and ZeroRedundancyOptimizer (its hook
// steps and broadcasts its shard).
//
// Each iteration of an active rank begins with the first joinable's notify_join_context, an
// allreduce of 1 ("still active"); a joined rank answers 0 in Join::run's loop, and when the
// sum is 0 every rank has joined: the post hooks run and Join::run returns.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::ddp {

// The defaults are PyTorch's.
struct JoinOptions {
  // DDP: average gradients over all ranks (the joined ones contribute zeros), as if every rank
  // still had inputs; false: over the ranks that still have inputs.
  JoinOptions& divide_by_initial_world_size(bool v) {
    divide_by_initial_world_size_ = v;
    return *this;
  }
  // false: Join::run just runs the loop (no shadowing, no collectives of its own).
  JoinOptions& enable(bool v) {
    enable_ = v;
    return *this;
  }
  // Throw on every rank as soon as one runs out of inputs, instead of shadowing.
  JoinOptions& throw_on_early_termination(bool v) {
    throw_on_early_termination_ = v;
    return *this;
  }
  bool divide_by_initial_world_size() const { return divide_by_initial_world_size_; }
  bool enable() const { return enable_; }
  bool throw_on_early_termination() const { return throw_on_early_termination_; }

 private:
  bool divide_by_initial_world_size_ = true;
  bool enable_ = true;
  bool throw_on_early_termination_ = false;
};

class JoinHook {
 public:
  virtual ~JoinHook() = default;
  // On a joined rank, once per iteration the others still run: this joinable's collectives of
  // one iteration, in the order an active rank issues them.
  virtual void main_hook() {}
  // Once every rank has joined; `is_last_joiner`: this rank was among the last to join.
  virtual void post_hook(bool /*is_last_joiner*/) {}
};

class Joinable;

// What a joinable knows about the Join it is in (PyTorch's _JoinConfig).
struct JoinConfig {
  bool enable = false;  // inside an enabled Join::run
  bool throw_on_early_termination = false;
  bool is_first_joinable = false;  // the one whose notify_join_context counts the active ranks
  JoinOptions options;
  std::vector<Joinable*> joinables;  // all of this Join's, in order
};

class Joinable {
 public:
  virtual ~Joinable() = default;
  // The hook for one Join (made when the Join starts).
  virtual std::unique_ptr<JoinHook> join_hook() = 0;
  // Where the Join's own counting allreduce runs (the first joinable's).
  virtual tensor::Device join_device() const = 0;
  virtual comm::ProcessGroup& join_process_group() const = 0;
  // Whether this joinable's hook, on a joined rank, uses the gradients the others averaged
  // (ZeroRedundancyOptimizer's step does); DDP's hook then writes them to .grad.
  virtual bool needs_gradients_when_joined() const { return false; }
  const JoinConfig& join_config() const { return join_config_; }

 private:
  friend class Join;
  JoinConfig join_config_;
};

class Join {
 public:
  // Runs `loop` with the joinables in a Join (PyTorch's `with Join([ddp, zero]):`), then shadows
  // the other ranks' iterations until all have joined. The joinables must share a process group.
  static void run(const std::vector<Joinable*>& joinables, const std::function<void()>& loop, JoinOptions options = {});

  // Called by a joinable at the start of each iteration (DDP's forward, ZeRO's step). For the
  // first joinable of an enabled Join: allreduces 1 ("this rank is still active") and returns
  // the work with its tensor, which holds the number of active ranks once the work is done;
  // with throw_on_early_termination, throws when another rank has run out of inputs.
  // Otherwise: nothing.
  struct Notice {
    std::shared_ptr<comm::Work> work;
    tensor::Tensor active;
  };
  static std::optional<Notice> notify_join_context(const Joinable& joinable);
};

}  // namespace tinyddp::ddp
