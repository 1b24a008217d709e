// DistributedDataParallel: wraps a module so that, after backward, every rank holds the
// gradients averaged over all ranks, with the allreduce of each bucket overlapped with the
// rest of the backward pass (see reducer.h). Names and options follow PyTorch's DDP.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/exact_step.h"
#include "tinyddp/ddp/join.h"
#include "tinyddp/ddp/reducer.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::ddp {

struct DDPOptions {
  DDPOptions& bucket_cap_mb(double v) {
    bucket_cap_mb_ = v;
    return *this;
  }
  DDPOptions& first_bucket_cap_mb(double v) {
    first_bucket_cap_mb_ = v;
    return *this;
  }
  DDPOptions& find_unused_parameters(bool v) {
    find_unused_parameters_ = v;
    return *this;
  }
  DDPOptions& gradient_as_bucket_view(bool v) {
    gradient_as_bucket_view_ = v;
    return *this;
  }
  DDPOptions& broadcast_buffers(bool v) {
    broadcast_buffers_ = v;
    return *this;
  }
  DDPOptions& static_graph(bool v) {
    static_graph_ = v;
    return *this;
  }
  bool static_graph() const { return static_graph_; }
  // Parameters and buffers (names inside the wrapped module, e.g. "head.weight") that DDP
  // leaves alone: not broadcast, not reduced (PyTorch's params_and_buffers_to_ignore).
  DDPOptions& params_and_buffers_to_ignore(std::vector<std::string> names) {
    ignore_ = std::move(names);
    return *this;
  }
  const std::vector<std::string>& params_and_buffers_to_ignore() const { return ignore_; }
  // Write each rank's events as a Chrome trace to "<path>.rank<r>.json" (when the DDP object
  // is destroyed, or by write_timeline). The environment variable TINYDDP_DDP_TIMELINE sets it too.
  DDPOptions& timeline(std::string path) {
    timeline_ = std::move(path);
    return *this;
  }
  const std::string& timeline() const { return timeline_; }
  // The same bits at any world size (docs/ddp.md): training steps go through
  // DistributedDataParallel::deterministic_step, which cuts the global batch into chunks of
  // chunk_size rows and sums their gradients exactly (exact_sum.h) in place of the Reducer's
  // buckets. Not in PyTorch, whose sums depend on the world size.
  DDPOptions& deterministic(bool v) {
    deterministic_ = v;
    return *this;
  }
  DDPOptions& chunk_size(int64_t rows) {
    chunk_size_ = rows;
    return *this;
  }
  bool deterministic() const { return deterministic_; }
  int64_t chunk_size() const { return chunk_size_; }
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
  std::vector<std::string> ignore_;
  std::string timeline_;
  bool deterministic_ = false;
  int64_t chunk_size_ = 16;
};

class DistributedDataParallel : public nn::Module, public Joinable {
 public:
  // Checks that every rank has the same parameters (count, shapes, strides, dtypes; a clear
  // error naming the first difference otherwise), broadcasts rank 0's parameters (those that
  // require grad and the frozen ones) and buffers, and sets up the Reducer over the
  // parameters that require grad. `pg` defaults to comm::default_group().
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> pg = nullptr,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  // Bucket sizes, whether they were rebuilt, and per-iteration timings (see DDPStats).
  // (Empty under the deterministic option, which has no Reducer: see exact_sum().)
  DDPStats stats() const;
  // Writes this rank's timeline (requires the timeline option) to `path`.
  void write_timeline(const std::string& path) const;

  // As PyTorch's: with grad mode on, checks that the previous iteration finished and rebuilds
  // the buckets once; broadcasts buffers (broadcast_buffers) when the previous forward
  // synchronised; runs the module; and, unless no_sync or grad mode is off, arms the Reducer
  // for the backward pass (training or eval mode alike).
  Tensor forward(const Tensor& input) override;
  // The same for modules with several inputs or outputs: find_unused_parameters walks the
  // graph from every output, as PyTorch's DDP walks every tensor of the output structure.
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;
  // A module whose outputs nest (nn::Value: tuples, lists, dicts of tensors): every tensor in
  // them counts for find_unused_parameters and static_graph, as PyTorch's _find_tensors.
  // ddp.call_nested(inputs) calls it.
  nn::Value forward_nested(const std::vector<Tensor>& inputs) override;
  // The same with keyword arguments, passed to the module's call_kwargs (its kwargs hooks see
  // them), as PyTorch's DDP forward(*inputs, **kwargs). ddp.call_kwargs(args, kwargs) calls it.
  nn::Value forward_kwargs(const std::vector<Tensor>& args, const nn::Value& kwargs) override;
  std::shared_ptr<nn::Module> module() const { return module_; }
  const DDPOptions& options() const { return options_; }
  const Reducer& reducer() const;  // throws under the deterministic option (no Reducer)
  comm::ProcessGroup& process_group() const { return *pg_; }
  std::shared_ptr<comm::ProcessGroup> process_group_ptr() const { return pg_; }

  // The deterministic option's training step (distributed_exact.cc). `inputs` and `targets`
  // hold the whole global batch, rows first, the same on every rank; it is cut into chunks of
  // chunk_size rows, and this rank runs its share (chunks r C / W .. (r + 1) C / W - 1), each
  // through chunk_loss (the forward, through this DDP, and the loss of those rows) and a
  // backward. Leaves every .grad the mean over all C chunks, summed exactly (whatever .grad held
  // before is dropped, as zero_grad(set_to_none) would), and returns the mean of the chunks'
  // losses: the same bits on any world size. Clear errors when chunk_size does not divide the
  // batch or the world the chunks. A step whose gradients outgrow the fixed-point grid runs its
  // chunks once more (ExactGradientSum::finish), so chunk_loss must not change state it reads.
  // With BatchRows::kRank, `inputs` and `targets` hold only this rank's chunks (rows r n ..
  // (r + 1) n - 1 of a global batch of W n rows), which each rank loads alone: the same chunks,
  // the same bits.
  using ChunkLoss = ddp::ChunkLoss;
  double deterministic_step(const Tensor& inputs, const Tensor& targets, const ChunkLoss& chunk_loss,
                            BatchRows rows = BatchRows::kGlobal);
  // Randomness inside a chunk (dropout) is the chunk's own: before its forward the default
  // generator is seeded from rank 0's initial seed, the step's count and the chunk's index, and
  // after the step it is put back where it was, so a mask depends on neither the rank nor the
  // world size (the CPU generator's draws; CUDA's generator is not forked yet).
  //
  // The option's state, for checkpoints: the steps done, then the exact sum's grids
  // (ExactGradientSum::grid_state). A run resumed with it, on any world size, gives the bits of
  // the uninterrupted run.
  std::vector<int64_t> deterministic_state() const;
  void load_deterministic_state(std::vector<int64_t> bounds);
  // Null before the first deterministic_step.
  const ExactGradientSum* exact_sum() const { return exact_ ? exact_->sum() : nullptr; }

  // How each bucket is reduced (see comm_hooks.h); once, before the first forward. `state` is
  // handed to the hook with the bucket, as in PyTorch: register_comm_hook(pg, hook) with
  // hook(pg, bucket).
  // The deterministic option sums exactly and refuses a hook.
  void register_comm_hook(CommHook hook);
  template <typename State, typename Hook>
  void register_comm_hook(State state, Hook hook) {
    register_comm_hook([state = std::move(state), hook = std::move(hook)](GradBucket& b) { return hook(state, b); });
  }

  // While the guard lives, backward passes only accumulate .grad locally; the first
  // synchronised backward afterwards reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.require_sync_) {
      ddp.require_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The caller's own work on this rank's timeline, as PyTorch's record_function marks it in a
  // profile: a span named `name` on the compute row from now until the guard goes, in the
  // iteration of the last forward. train marks its loss and its optimizer step, so that the
  // picture of an iteration has no unlabelled gap. Nothing is recorded when the timeline is off.
  class TimelineSpan {
   public:
    TimelineSpan(Recorder& recorder, std::string name)
        : recorder_(&recorder), name_(std::move(name)), start_(Recorder::Clock::now()) {}
    TimelineSpan(TimelineSpan&& other) noexcept
        : recorder_(std::exchange(other.recorder_, nullptr)), name_(std::move(other.name_)), start_(other.start_) {}
    TimelineSpan(const TimelineSpan&) = delete;
    TimelineSpan& operator=(const TimelineSpan&) = delete;
    TimelineSpan& operator=(TimelineSpan&&) = delete;
    ~TimelineSpan() {
      if (recorder_ != nullptr) recorder_->user_span(name_, start_);
    }

   private:
    Recorder* recorder_;
    std::string name_;
    Recorder::Clock::time_point start_;
  };
  TimelineSpan timeline_span(std::string name) { return TimelineSpan(recorder(), std::move(name)); }

  // Uneven inputs (PyTorch's `with ddp.join():`): every rank calls join() with its own
  // training loop. Each forward inside tells the others this rank is still active; a rank
  // whose loop has ended shadows the others' collectives (buffer broadcast, the buckets'
  // reductions on zeros, the used-parameter map) until every rank is done, so nobody waits
  // forever. Buffers come from the highest active rank; gradients are divided by the initial
  // world size (default) or by the number of active ranks; no_sync works inside. At the end
  // the model of the last rank to join (the highest of them) is broadcast to all. See join.cc and distributed_join.cc.
  // join(loop, options) is Join::run({this}, loop, options); with a ZeroRedundancyOptimizer
  // too, call Join::run({&ddp, &zero}, loop, options) (join.h).
  void join(const std::function<void()>& loop, JoinOptions options = {});

  // Joinable (join.h): DDP's join hook runs join_hook_main and join_hook_post (distributed_join.cc).
  std::unique_ptr<JoinHook> join_hook() override;
  tensor::Device join_device() const override { return control_device_; }
  comm::ProcessGroup& join_process_group() const override { return *pg_; }
  // Join's steps (distributed_join.cc): an active rank's part of each forward, and a joined rank's
  // mirror of one iteration of the others.
  void notify_join_context();
  void join_hook_main();
  void join_hook_post(bool is_last_joiner);

 private:
  // What the ranks tell each other at construction, in one exchange: their parameters' shapes,
  // strides and dtypes (every rank throws unless all wrap the same parameters) and whether
  // their timeline is on.
  struct RanksAgreed {
    bool any_timeline = false;  // some rank records a timeline: all agree on its time zero
  };
  RanksAgreed verify_same_parameters(const std::vector<std::string>& names) const;
  // Broadcasts `tensors` from `root`, coalesced into flat buffers per device and dtype.
  void broadcast_coalesced(const std::vector<Tensor>& tensors, int root = 0) const;
  // Points every layer of the module with collectives of its own (layer_collectives.h:
  // SyncBatchNorm) at this DDP's timeline (on) or away (off).
  void observe_layer_collectives(bool on);
  // Parameters and buffers DDP synchronises (everything but params_and_buffers_to_ignore).
  std::vector<Tensor> module_states() const;
  std::vector<Tensor> synced_buffers() const;
  // The highest rank among the candidates (an allreduce of max): inside join, the source of
  // the buffers (candidates: the active ranks) and of the final model (the last to join).
  int find_common_rank(bool candidate) const;
  // Broadcasts the buffers before a forward when the previous forward synchronised: from rank
  // 0, or inside join from the highest active rank (`candidate`: this rank is active).
  void sync_module_buffers(bool candidate);
  // forward and forward_many around the module's own call (which returns its outputs).
  nn::Value run_forward(const std::function<nn::Value()>& module_forward);
  // The deterministic option: what it cannot take, refused by name at construction; then
  // its steps (ExactSteps: a collective, for rank 0's seed of the chunks' randomness).
  void check_deterministic() const;
  void start_exact_steps();
  // The Reducer's recorder, or the deterministic option's own.
  Recorder& recorder() const;

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::string> param_names_;  // params_'s names in the module
  std::unordered_set<std::string> ignored_;
  tensor::Device control_device_;           // see control_device() in reducer.h
  std::unique_ptr<Reducer> reducer_;        // null under the deterministic option
  bool require_sync_ = true;                // false inside no_sync (PyTorch's require_backward_grad_sync)
  bool require_forward_param_sync_ = true;  // the previous forward synchronised: broadcast buffers first
  Tensor should_sync_flag_;                 // Join: this forward's "my backward synchronises" (1 or 0)
  std::shared_ptr<comm::Work> should_sync_work_;
  // The deterministic option: its steps (the exact sum, the grids, the chunks' seed) and the
  // timeline's recorder.
  std::unique_ptr<ExactSteps> exact_;
  std::unique_ptr<Recorder> deterministic_recorder_;
};

}  // namespace tinyddp::ddp
