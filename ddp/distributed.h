// DistributedDataParallel: wraps a module so that, after backward, every rank holds the
// gradients averaged over all ranks, with the allreduce of each bucket overlapped with the
// rest of the backward pass (see reducer.h). Names and options follow PyTorch's DDP.
#pragma once

#include <functional>
#include <memory>

#include "comm/process_group.h"
#include "ddp/reducer.h"
#include "nn/module.h"

namespace tinyddp::ddp {

// Join for uneven inputs (see DistributedDataParallel::join).
struct JoinOptions {
  // Average gradients over all ranks (the joined ones contribute zeros) instead of over the
  // ranks that still have inputs.
  bool divide_by_initial_world_size = false;
  // Throw on every rank as soon as one runs out of inputs, instead of shadowing.
  bool throw_on_early_termination = false;
};

struct DDPOptions {
  DDPOptions& bucket_cap_mb(double v) { bucket_cap_mb_ = v; return *this; }
  DDPOptions& first_bucket_cap_mb(double v) { first_bucket_cap_mb_ = v; return *this; }
  DDPOptions& find_unused_parameters(bool v) { find_unused_parameters_ = v; return *this; }
  DDPOptions& gradient_as_bucket_view(bool v) { gradient_as_bucket_view_ = v; return *this; }
  DDPOptions& broadcast_buffers(bool v) { broadcast_buffers_ = v; return *this; }
  DDPOptions& static_graph(bool v) { static_graph_ = v; return *this; }
  bool static_graph() const { return static_graph_; }
  // Write each rank's events as a Chrome trace to "<path>.rank<r>.json" (when the DDP object
  // is destroyed, or by write_timeline). The environment variable TINYDDP_DDP_TIMELINE sets it too.
  DDPOptions& timeline(std::string path) { timeline_ = std::move(path); return *this; }
  const std::string& timeline() const { return timeline_; }
  double bucket_cap_mb() const { return bucket_cap_mb_; }
  double first_bucket_cap_mb() const { return first_bucket_cap_mb_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool gradient_as_bucket_view() const { return gradient_as_bucket_view_; }
  bool broadcast_buffers() const { return broadcast_buffers_; }

 private:
  double bucket_cap_mb_ = 25;
  double first_bucket_cap_mb_ = 1;
  bool find_unused_parameters_ = false;
  bool gradient_as_bucket_view_ = false;
  bool broadcast_buffers_ = true;
  bool static_graph_ = false;
  std::string timeline_;
};

class DistributedDataParallel : public nn::Module {
 public:
  // Checks that every rank has the same parameters (count, shapes, dtypes; a clear error
  // naming the first difference otherwise), broadcasts rank 0's parameters and buffers, and
  // sets up the Reducer. `pg` defaults to comm::default_group().
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> pg = nullptr,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  // Bucket sizes, whether they were rebuilt, and per-iteration timings (see DDPStats).
  DDPStats stats() const { return reducer_->stats(); }
  // Writes this rank's timeline (requires the timeline option) to `path`.
  void write_timeline(const std::string& path) const;

  // Broadcasts buffers (broadcast_buffers), runs the module, and prepares the Reducer.
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Module> module() const { return module_; }
  const Reducer& reducer() const { return *reducer_; }
  comm::ProcessGroup& process_group() const { return *pg_; }
  std::shared_ptr<comm::ProcessGroup> process_group_ptr() const { return pg_; }

  // How each bucket is reduced (see comm_hooks.h). `state` is handed to the hook with the
  // bucket, as in PyTorch: register_comm_hook(pg, hook) with hook(pg, bucket).
  void register_comm_hook(CommHook hook) { reducer_->register_comm_hook(std::move(hook)); }
  template <typename State, typename Hook>
  void register_comm_hook(State state, Hook hook) {
    reducer_->register_comm_hook([state = std::move(state), hook = std::move(hook)](GradBucket& b) { return hook(state, b); });
  }

  // While the guard lives, backward passes only accumulate .grad locally; the first
  // synchronised backward afterwards reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.require_sync_) { ddp.require_sync_ = false; }
    ~NoSyncGuard() { ddp_.require_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Uneven inputs: every rank calls join() with its own training loop (forward + backward per
  // input). Each forward first agrees with the others on how many ranks still have inputs; a
  // rank whose loop has ended shadows the others' collectives (with zeros) until every rank
  // is done; gradients are averaged over the active ranks. At the end the model of the rank
  // that ran the most iterations (the last to join) is broadcast to all.
  void join(const std::function<void()>& loop, JoinOptions options = {});

 private:
  void verify_same_parameters(const std::vector<std::string>& names) const;
  // Broadcasts `tensors` from `root`, coalesced into flat buffers per device and dtype.
  void broadcast_coalesced(const std::vector<Tensor>& tensors, int root = 0) const;

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<Tensor> params_;
  tensor::Device control_device_;  // see control_device() in reducer.h
  std::unique_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  bool joining_ = false;
  JoinOptions join_options_;
  int64_t join_iterations_ = 0;
};

}  // namespace tinyddp::ddp
