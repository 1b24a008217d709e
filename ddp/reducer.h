// Reducer: DDP's gradient synchronisation. It owns the buckets (one flat contents tensor per
// bucket, a view per parameter into it), registers one post-hook per parameter on its
// gradient accumulator, launches each bucket's allreduce as soon as the bucket is complete
// (strictly in bucket index order, so that every rank issues the same collectives), and at
// the end of backward (an engine callback) waits, averages and writes the gradients back.
// Follow one gradient: AccumulateGrad writes param.grad -> post-hook mark_ready(i) -> the
// gradient is copied into its bucket view (divided by the world size on the way, when no
// communication hook is registered) -> the bucket's pending count reaches zero ->
// launch_ready_buckets() -> ProcessGroup::allreduce -> finalize() -> param.grad.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "comm/process_group.h"
#include "ddp/buckets.h"
#include "ddp/comm_hooks.h"
#include "ddp/timeline.h"

namespace tinyddp::ddp {

using tensor::Tensor;

struct ReducerOptions {
  size_t first_bucket_cap_bytes = 1 << 20;
  size_t bucket_cap_bytes = 25 << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  // The graph is the same every iteration: unused parameters are found once (on the first
  // iteration) and reused; the buckets are rebuilt once.
  bool static_graph = false;
};

// Runtime statistics, as PyTorch's DDP logging data. Times in microseconds; "last" is the
// most recent synchronised iteration, "avg" the mean over all of them. Backward compute runs
// from the start of backward to the last gradient; communication from the first bucket
// launch to the last allreduce completion; overlap is the part of communication that ran
// while backward was still computing.
struct DDPStats {
  std::vector<size_t> bucket_bytes;
  bool buckets_rebuilt = false;
  int64_t iterations = 0;
  double last_forward_compute_us = 0, last_backward_compute_us = 0, last_backward_comm_us = 0, last_overlap_us = 0;
  double avg_forward_compute_us = 0, avg_backward_compute_us = 0, avg_backward_comm_us = 0, avg_overlap_us = 0;
};

// Where DDP's own small collectives (parameter descriptions, unused-parameter bitmaps, join
// counts, the agreed bucket order) run: on the parameters' GPU for NCCL, which takes CUDA
// tensors only; on the CPU for Gloo.
tensor::Device control_device(const comm::ProcessGroup& pg, const std::vector<Tensor>& params);

class Reducer {
 public:
  // `params` must be identical (count, shapes, dtypes) on every rank (DDP checks that).
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::shared_ptr<comm::ProcessGroup> pg,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called by DDP's forward: whether this iteration synchronises (false inside no_sync),
  // and, with find_unused_parameters, the parameters this forward's graph does not reach.
  void prepare_for_backward(bool synchronize, const std::vector<Tensor>& outputs);
  // Throws the "did not finish reduction" error if the previous synchronised backward left
  // parameters without gradients, or stopped part way (called at the start of every forward).
  void check_previous_iteration() const;

  const BucketAssignment& assignment() const { return assignment_; }
  bool buckets_rebuilt() const { return rebuilt_; }
  // Bucket contents (for tests: the views alias these).
  std::vector<Tensor> bucket_contents() const;
  const Tensor& bucket_view(size_t param) const { return views_[param]; }
  // Launch order of the last synchronised backward (bucket indices), for tests.
  const std::vector<size_t>& last_launch_order() const { return launch_order_; }
  // Replaces the default allreduce of each bucket (call before the first backward).
  void register_comm_hook(CommHook hook);

  // Join: the gradients of this iteration are averaged over `active` ranks instead of all
  // (the others contribute zeros); 0 restores the plain average.
  void set_active_ranks(int active) { active_ranks_ = active; }
  // Join: the collectives of one iteration of the active ranks, with zeros (a rank that ran
  // out of inputs calls this once per iteration of the others).
  void shadow_iteration();

  // Statistics and the optional timeline (see timeline.h).
  void record_forward(Timeline::Clock::time_point start, Timeline::Clock::time_point end);
  DDPStats stats() const;
  void enable_timeline() { timeline_enabled_ = true; }
  const Timeline& timeline() const { return timeline_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    Tensor contents;  // flat, one dtype
    Tensor inverse_world;  // 1 / world size, as a 0-d tensor that multiplies contents' dtype
    size_t pending = 0;
    std::shared_ptr<Future> future;
    Timeline::Clock::time_point launched_at{};
  };
  void build_buckets(const std::vector<size_t>& order);
  void mark_ready(size_t param);
  void mark_unused_ready();
  void launch_ready_buckets();
  void finalize();
  void record_iteration(Timeline::Clock::time_point finalize_start, Timeline::Clock::time_point comm_end);
  void reset_iteration();

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  tensor::Device control_device_;
  ReducerOptions options_;
  std::vector<autograd::RemovableHandle> hooks_;
  CommHook comm_hook_;
  // No hook registered: the built-in one allreduces the sum, and each gradient is divided by
  // the world size as it is copied into its bucket (one pass over the gradient, during
  // backward, instead of a division pass over the bucket after the allreduce).
  bool builtin_hook_ = true;
  int active_ranks_ = 0;
  bool unused_known_ = false;  // static_graph: unused_ was found on the first iteration

  BucketAssignment assignment_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<Tensor> views_;      // param -> its slot in the bucket contents

  // Per-iteration state.
  bool synchronize_ = true;
  bool backward_started_ = false;
  std::vector<bool> ready_;
  std::vector<bool> unused_;        // this forward's graph does not reach the parameter
  std::vector<bool> locally_used_;  // used since the last synchronised backward (no_sync too)
  size_t next_bucket_ = 0;
  std::vector<size_t> launch_order_;
  std::vector<size_t> arrival_order_;  // parameters in the order their hooks fired
  bool rebuilt_ = false;

  // Statistics of the current iteration and the running sums.
  Timeline::Clock::time_point forward_start_{}, forward_end_{}, backward_start_{}, last_hook_{}, first_launch_{};
  DDPStats stats_;
  double sum_forward_ = 0, sum_backward_ = 0, sum_comm_ = 0, sum_overlap_ = 0;
  bool timeline_enabled_ = false;
  Timeline timeline_;
  bool iteration_incomplete_ = false;
  std::string incomplete_message_;
};

}  // namespace tinyddp::ddp
