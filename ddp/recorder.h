// Recorder: DDP's runtime statistics and its timeline, fed by the Reducer through a few calls
// made at the steps of one synchronised iteration (forward start and end, backward start, a
// gradient ready and copied into its bucket, a bucket launched, finalize). The Reducer's steps
// say when; the Recorder decides what to measure and how (host clocks, or CUDA events on the
// compute stream when the parameters are on a GPU).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/ddp/timeline.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::ddp {

// Runtime statistics, as PyTorch's DDP logging data. Times in microseconds; "last" is the
// most recent synchronised iteration, "avg" the mean over all of them. Backward compute runs
// from the start of backward to the last gradient; communication from the first bucket
// launch to the last allreduce completion; overlap is the part of communication that ran
// while backward was still computing. With the parameters on a GPU the four times are GPU
// times, measured as PyTorch does with CUDA events on the compute stream (forward start and
// end, the last gradient, the first bucket launch, the end of finalize, which waits for every
// allreduce): host clocks see only when work was queued, and an NCCL allreduce finishes on
// the GPU after backward returned. Such an iteration is measured at the next one (so that
// nothing waits for the GPU), or when stats() is called.
struct DDPStats {
  std::vector<size_t> bucket_bytes;
  bool buckets_rebuilt = false;
  // A backward with create_graph reached DDP: its gradients were averaged, their graphs (for a
  // higher-order gradient) stayed each rank's own (DDP warned once on stderr, as PyTorch's).
  bool create_graph = false;
  int64_t iterations = 0;
  double last_forward_compute_us = 0, last_backward_compute_us = 0, last_backward_comm_us = 0, last_overlap_us = 0;
  double avg_forward_compute_us = 0, avg_backward_compute_us = 0, avg_backward_comm_us = 0, avg_overlap_us = 0;
};

class Recorder {
 public:
  using Clock = Timeline::Clock;

  // `timing_device`: the parameters' GPU, or -1 (host clocks).
  explicit Recorder(int timing_device) : timing_device_(timing_device) {}

  void enable_timeline() { timeline_enabled_ = true; }
  // Time zero of the timeline; DDP calls it on every rank as they leave a barrier.
  void align_timeline(Clock::time_point origin) { timeline_.align(origin); }
  const Timeline& timeline() const { return timeline_; }

  // Around DDP's call of the module's forward.
  void forward_start();
  void forward_end();
  // The first gradient hook of a synchronised backward; `started` is when the engine began.
  void backward_start(Clock::time_point started);
  // A gradient hook fired for parameter `name`.
  void gradient_ready(const std::string& name);
  // Parameter `name`'s gradient went into bucket `bucket`, from `start` to now.
  void gradient_copied(size_t bucket, const std::string& name, Clock::time_point start);
  // Just before and after the communication hook is called for `bucket`; `first` for the
  // first bucket of the iteration. The launch is timed before the call: the backend may send,
  // and a peer finish, before the hook returns.
  void bucket_launching(bool first);
  void bucket_launched(size_t bucket, bool first);
  // finalize_backward's wait for `bucket` returned; `completed` is when the host saw its
  // reduction end (nothing: not known, e.g. NCCL's, which ends on the GPU).
  void bucket_waited(size_t bucket, std::optional<Clock::time_point> completed);
  // A collective a layer issued itself (SyncBatchNorm's allgather or allreduce), from `start`
  // to its completion at `end`: a span on the timeline's layer-collectives row.
  void layer_collective(const std::string& name, Clock::time_point start, Clock::time_point end);
  // The caller's own work (the loss, the optimizer step) from `start` to now, on the compute
  // row, in the iteration of the last forward (the step it belongs to, before or after finalize).
  void user_span(const std::string& name, Clock::time_point start);
  // finalize_backward, which began at `start`, is done; `bytes[b]` is bucket b's size.
  void finalized(Clock::time_point start, const std::vector<size_t>& bytes);

  // The statistics so far (an iteration still unmeasured on the GPU is measured now).
  DDPStats stats(std::vector<size_t> bucket_bytes, bool buckets_rebuilt) const;

 private:
  // Forward, backward compute, communication, overlap.
  using Times = std::array<double, 4>;
  struct DeviceMarks {
    tensor::cuda::StreamMark forward_start, forward_end, backward_end, comm_start, comm_end;
  };
  // Whether this iteration is timed on the GPU (a device, and no CUDA graph capturing on it).
  bool device_timing() const;
  void mark(tensor::cuda::StreamMark& slot) const;
  // finalized's timeline spans for `iteration` (finalize ran from `start` to `end`).
  void finish_timeline(Clock::time_point start, Clock::time_point end, int64_t iteration,
                       const std::vector<size_t>& bytes);
  // One iteration's times from its marks (waits for the last); nothing if a mark is missing.
  static std::optional<Times> measure(const DeviceMarks& m);
  // Adds one iteration's times to `stats` as its last ones and to the sums.
  static void add_times(const Times& t, DDPStats& stats, Times& sums, int64_t& measured);

  int timing_device_;
  Clock::time_point forward_start_{}, forward_end_{}, backward_start_{}, last_hook_{}, first_launch_{};
  // Per bucket, this iteration: launch, and completion as the host saw it.
  std::vector<Clock::time_point> launched_at_;
  Clock::time_point launching_{};  // the bucket being launched: when its hook was called
  std::vector<std::optional<Clock::time_point>> completed_at_;
  Clock::time_point comm_end_{};
  DDPStats stats_;
  Times sums_{};  // over the measured iterations
  int64_t measured_iterations_ = 0;
  // GPU timing: this iteration's marks, and the last finished iteration's, measured when the
  // next one finishes or by stats().
  DeviceMarks marks_;
  std::optional<DeviceMarks> unmeasured_;
  bool timeline_enabled_ = false;
  int64_t forward_iteration_ = 0;  // the iteration the last forward began
  Timeline timeline_;
};

}  // namespace tinyddp::ddp
