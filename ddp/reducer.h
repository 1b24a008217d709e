// Reducer: DDP's gradient synchronisation, step by step as PyTorch's c10d Reducer. It owns
// the buckets (one flat contents tensor per bucket, a view per parameter into it), registers
// one post-hook per parameter on its gradient accumulator, launches each bucket's reduction
// as soon as the bucket is complete (strictly in bucket index order, so that every rank
// issues the same collectives), and once the last bucket is launched queues
// finalize_backward on the engine, which waits and writes the averaged gradients to .grad.
// Follow one gradient: AccumulateGrad writes param.grad -> post-hook autograd_hook(i) ->
// mark_variable_ready(i) copies it into its bucket view (divided by the world size on the way
// when no communication hook is registered) -> the bucket's pending count reaches zero ->
// mark_bucket_ready -> the comm hook's allreduce -> finalize_backward -> param.grad.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tinyddp/autograd/autograd.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/buckets.h"
#include "tinyddp/ddp/comm_hooks.h"
#include "tinyddp/ddp/recorder.h"

namespace tinyddp::ddp {

using tensor::Tensor;

struct ReducerOptions {
  ReducerOptions& first_bucket_cap_bytes(size_t v) {
    first_bucket_cap_bytes_ = v;
    return *this;
  }
  ReducerOptions& bucket_cap_bytes(size_t v) {
    bucket_cap_bytes_ = v;
    return *this;
  }
  ReducerOptions& find_unused_parameters(bool v) {
    find_unused_parameters_ = v;
    return *this;
  }
  ReducerOptions& gradient_as_bucket_view(bool v) {
    gradient_as_bucket_view_ = v;
    return *this;
  }
  // The graph is the same every iteration: the first synchronised iteration reduces after
  // backward and learns which parameters are unused and how often each hook fires; later
  // iterations reuse that (no graph search, no used-parameter allreduce).
  ReducerOptions& static_graph(bool v) {
    static_graph_ = v;
    return *this;
  }
  size_t first_bucket_cap_bytes() const { return first_bucket_cap_bytes_; }
  size_t bucket_cap_bytes() const { return bucket_cap_bytes_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool gradient_as_bucket_view() const { return gradient_as_bucket_view_; }
  bool static_graph() const { return static_graph_; }

 private:
  size_t first_bucket_cap_bytes_ = 1 << 20;
  size_t bucket_cap_bytes_ = 25 << 20;
  bool find_unused_parameters_ = false;
  bool gradient_as_bucket_view_ = false;
  bool static_graph_ = false;
};

// Where DDP's own small collectives (parameter descriptions, unused-parameter bitmaps, join
// counts, the agreed bucket order) run: on the CPU when the process group takes CPU tensors
// (Gloo), else on the parameters' device (NCCL takes CUDA tensors only).
tensor::Device control_device(const comm::ProcessGroup& pg, const std::vector<Tensor>& params);

class Reducer {
 public:
  // `params` must be identical (count, shapes, strides, dtypes) on every rank (DDP checks that).
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // ---- The steps DDP's forward drives, in this order ---------------------------------------
  // A synchronised forward (grad mode on, not in no_sync) begins: counts the iteration.
  void prepare_for_forward();
  // Before every forward with grad mode on: throws if the previous synchronised backward did
  // not finish (parameters without gradients, or an error part way), then, once, rebuilds the
  // buckets in the order gradients arrived in the first synchronised backward (rank 0's
  // assignment, broadcast). Returns whether it rebuilt them now.
  bool rebuild_buckets();
  // After a synchronised forward: arms the hooks for the next backward and, with
  // find_unused_parameters (not static_graph), finds the parameters `outputs` do not reach.
  void prepare_for_backward(const std::vector<Tensor>& outputs);
  // Join: this forward's allreduce of "ranks still active"; the gradients of this iteration
  // are divided by its result (unless use_static_world_size), waited for at the first gradient.
  void set_forward_pass_work_handle(std::shared_ptr<comm::Work> work, Tensor active_ranks, bool use_static_world_size);

  // ---- Join: a joined rank's part of one iteration of the others ---------------------------
  // The buckets' reductions on zeros through the same hook, in bucket order, then the used-
  // parameter allreduce when the active ranks run one; the joined rank then also pushes
  // every parameter for the one-time rebuild (as the others did in their first iteration).
  // `write_gradients`: also write the averages to .grad, as finalize_backward does (for a
  // ZeroRedundancyOptimizer that steps on the joined rank); PyTorch leaves .grad as it was.
  void match_backward_collectives(bool write_gradients = false);

  // ---- For DDP, inspection and statistics -------------------------------------------------
  // Whether the one-time rebuild of the buckets has happened (ZeRO's overlap waits for it).
  bool buckets_rebuilt() const { return has_rebuilt_bucket_; }
  // What the Reducer holds now, for a reader or a test to look at (the parts of PyTorch's
  // DDP logging data that describe the buckets). The tensors are handles: they alias the
  // Reducer's buckets.
  struct Snapshot {
    BucketAssignment assignment;  // parameter indices and bytes per bucket
    bool buckets_rebuilt = false;
    std::vector<Tensor> bucket_contents;   // each bucket's flat contents
    std::vector<Tensor> bucket_views;      // each parameter's view of its bucket (by index)
    std::vector<size_t> launch_order;      // buckets, in the order the last synchronised backward launched them
    std::vector<size_t> grad_ready_order;  // parameters, in the order their gradients arrived then
    // The synchronised backward under way (or the last one), as a gradient hook sees it
    // (examples/ddp_walk prints it at every hook).
    std::vector<size_t> pending;   // per bucket: its parameters whose gradient has not arrived
    size_t launched = 0;           // buckets 0 .. launched - 1 are handed to the comm hook
    std::vector<bool> reduced;     // per launched bucket: its reduction has completed
    int div_factor = 0;            // what each gradient is divided by (0: no gradient yet)
    bool divided_on_copy = false;  // no hook registered: divided on the way into the bucket
  };
  Snapshot snapshot() const;
  // Replaces the default hooks::allreduce of each bucket; once, before the first backward
  // (as PyTorch: register_comm_hook can only be called once).
  void register_comm_hook(CommHook hook);

  // Statistics and the timeline (DDP calls its forward_start/forward_end around the module).
  Recorder& recorder() { return recorder_; }
  const Recorder& recorder() const { return recorder_; }
  DDPStats stats() const {
    DDPStats out = recorder_.stats(assignment_.bytes, has_rebuilt_bucket_);
    out.create_graph = create_graph_seen_;
    return out;
  }

 private:
  // Bucket b holds the parameters assignment_.buckets[b] (params_of), in that order.
  struct Bucket {
    Tensor contents;            // flat, one dtype
    std::vector<Tensor> views;  // each parameter's slot in contents (comm::flat_views), built once
    Tensor inverse_div;         // 1 / the divisor as a 0-d tensor of the contents' dtype
    int inverse_div_of = 0;     // the divisor inverse_div holds
  };
  // Where parameter i lives: buckets_[bucket].views[index].
  struct Slot {
    size_t bucket = 0, index = 0;
  };
  const std::vector<size_t>& params_of(size_t b) const { return assignment_.buckets[b]; }
  const Tensor& view_of(size_t i) const { return buckets_[slot_of_[i].bucket].views[slot_of_[i].index]; }

  // Backward, in the order things happen.
  void autograd_hook(size_t param);
  void mark_variable_ready(size_t param);
  void copy_grad_to_bucket(size_t param);
  void mark_bucket_ready(size_t bucket);
  // What a comm hook sees of bucket `b`, with `buffer` as its contents (Join passes zeros).
  GradBucket make_grad_bucket(size_t b, Tensor buffer) const;
  void all_reduce_bucket(size_t bucket);
  void all_reduce_local_used_map();
  void delay_all_reduce();
  void finalize_backward();
  // Writes bucket b's reduced contents to .grad; `result` is the hook's value (copied into
  // the contents first when it is another tensor).
  void finalize_bucket_dense(size_t b, const Tensor& result);
  void finish_local_used_map();
  void copy_bucket_to_grad(size_t param, const Tensor& reduced_view, bool global_unused);
  bool globally_unused(size_t param);

  void initialize_buckets(const BucketAssignment& assignment);
  void set_divide_factor();
  void search_unused_parameters(const std::vector<Tensor>& outputs);
  void ensure_prior_reduction_finished() const;
  void check_not_marked_twice(size_t param) const;

  bool dynamic_graph_find_unused() const { return options_.find_unused_parameters() && !options_.static_graph(); }
  bool static_graph_first_iteration() const { return options_.static_graph() && num_bwd_calls_ == 1; }
  bool static_graph_after_first_iteration() const { return options_.static_graph() && num_bwd_calls_ > 1; }
  bool should_rebuild_buckets() const {
    return (options_.static_graph() || !options_.find_unused_parameters()) && !has_rebuilt_bucket_;
  }

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  tensor::Device control_device_;
  ReducerOptions options_;
  std::vector<autograd::RemovableHandle> hooks_;
  CommHook comm_hook_;
  // No hook registered: hooks::allreduce, with its division folded into the copy of each
  // gradient into the bucket (one pass over the gradient, during backward).
  bool builtin_hook_ = true;

  BucketAssignment assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slot_of_;  // param -> its bucket and place there

  // One synchronised backward pass (PyTorch's names): made afresh by prepare_for_backward,
  // the only place it is reset; finalize_backward disarms it and leaves the rest for a reader
  // (snapshot) and for the next forward's check (ensure_prior_reduction_finished).
  struct Iteration {
    Iteration() = default;
    explicit Iteration(const BucketAssignment& assignment, size_t params);
    bool expect_autograd_hooks = false;  // armed: the hooks reduce (false: no_sync, or finalized)
    bool first_autograd_hook_called = false;
    bool has_marked_unused_parameters = false;  // this forward's unused parameters marked ready
    bool delay_all_reduce_queued = false;       // static_graph's first iteration
    int div_factor = 0;                         // the divisor, set by the first ready parameter
    // Buckets launch strictly in index order: buckets 0 .. launched - 1 are on their way.
    size_t launched = 0;
    std::vector<bool> ready;                       // per parameter: marked ready
    std::vector<size_t> pending;                   // per bucket: its parameters not yet ready
    std::vector<std::shared_ptr<Future>> futures;  // per launched bucket: its reduction
    std::vector<size_t> grad_ready_order;          // parameters, in the order their gradients arrived
    std::vector<int> hooks_left;                   // static_graph: firings still to come, per parameter
  };
  Iteration iteration_;
  // Across iterations: whether a reduction started and has not been finalized (the next
  // forward refuses to start then), and whether the engine finished the pass that started it.
  bool require_finalize_ = false;
  bool backward_completed_ = true;
  std::vector<size_t> unused_parameters_;  // this forward's (static_graph: the first iteration's)
  int64_t num_iterations_ = 0;             // synchronised forwards
  int64_t num_bwd_calls_ = 0;              // synchronised backward passes (static_graph's first is 1)
  bool create_graph_seen_ = false;         // a gradient with a graph of its own arrived (warned once)

  // Which parameters got a gradient since the last synchronised backward (no_sync included);
  // allreduced so that a parameter no rank used keeps its .grad untouched.
  std::vector<int64_t> local_used_map_;
  Tensor local_used_map_dev_;
  std::shared_ptr<comm::Work> local_used_work_;
  bool local_used_map_reduced_ = false;

  // static_graph: how often each hook fired in the first iteration (each iteration counts
  // down a copy, Iteration::hooks_left: a parameter is ready after its last firing).
  std::vector<int> num_grad_hooks_triggered_;

  // The one-time rebuild: parameters in the order their gradients arrived.
  std::vector<size_t> rebuilt_param_indices_;
  bool has_rebuilt_bucket_ = false;

  // Division (Iteration::div_factor): the world size, or (Join) the number of ranks still
  // active, which the forward's count (forward_pass_work_) gives once.
  std::shared_ptr<comm::Work> forward_pass_work_;
  Tensor forward_pass_active_;
  bool use_static_world_size_ = true;

  Recorder recorder_;
};

}  // namespace tinyddp::ddp
