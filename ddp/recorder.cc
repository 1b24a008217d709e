// Recorder (recorder.h): the calls the Reducer makes at each step (forward, each gradient's
// arrival and copy, each bucket's launch and wait, finalize) turned into DDPStats and, when on,
// timeline events.
#include "tinyddp/ddp/recorder.h"

#include <algorithm>

#include <fmt/format.h>

namespace tinyddp::ddp {

bool Recorder::device_timing() const {
  // A CUDA graph's capture records no marks: an event recorded then is a node of the graph,
  // which no host can time (its replays run no host code, so they are not counted either).
  return timing_device_ >= 0 && !tensor::cuda::is_capturing(timing_device_);
}

void Recorder::mark(tensor::cuda::StreamMark& slot) const {
  if (device_timing()) slot = tensor::cuda::StreamMark::record(timing_device_, /*timing=*/true);
}

void Recorder::forward_start() {
  forward_start_ = Clock::now();
  forward_iteration_ = stats_.iterations;
  marks_ = DeviceMarks();
  mark(marks_.forward_start);
}

void Recorder::forward_end() {
  forward_end_ = Clock::now();
  mark(marks_.forward_end);
  if (timeline_enabled_) timeline_.span("forward", forward_start_, forward_end_, stats_.iterations);
}

void Recorder::backward_start(Clock::time_point started) { backward_start_ = started; }

void Recorder::layer_collective(const std::string& name, Clock::time_point start, Clock::time_point end) {
  if (timeline_enabled_) timeline_.span(name, start, end, stats_.iterations, Timeline::kLayerCollectives);
}

void Recorder::user_span(const std::string& name, Clock::time_point start) {
  if (timeline_enabled_) timeline_.span(name, start, Clock::now(), forward_iteration_);
}

void Recorder::gradient_ready(const std::string& name) {
  last_hook_ = Clock::now();
  mark(marks_.backward_end);
  if (timeline_enabled_) timeline_.instant("grad ready: " + name, last_hook_, stats_.iterations);
}

void Recorder::gradient_copied(size_t bucket, const std::string& name, Clock::time_point start) {
  if (timeline_enabled_)
    timeline_.span(fmt::format("into bucket {}: {}", bucket, name), start, Clock::now(), stats_.iterations);
}

void Recorder::bucket_launching(bool first) {
  launching_ = Clock::now();
  if (first) mark(marks_.comm_start);  // before the hook queues its kernels
}

void Recorder::bucket_launched(size_t bucket, bool first) {
  const auto now = launching_;
  if (launched_at_.size() <= bucket) launched_at_.resize(bucket + 1);
  if (completed_at_.size() <= bucket) completed_at_.resize(bucket + 1);
  launched_at_[bucket] = now;
  completed_at_[bucket].reset();
  if (first) {
    first_launch_ = now;
    comm_end_ = now;
  }
  if (timeline_enabled_) timeline_.instant(fmt::format("bucket {} launched", bucket), now, stats_.iterations);
}

void Recorder::bucket_waited(size_t bucket, std::optional<Clock::time_point> completed) {
  completed_at_[bucket] = completed;
  comm_end_ = std::max(comm_end_, completed.value_or(Clock::now()));
}

std::optional<Recorder::Times> Recorder::measure(const DeviceMarks& m) {
  if (!m.forward_start.defined() || !m.forward_end.defined() || !m.backward_end.defined() || !m.comm_start.defined() ||
      !m.comm_end.defined()) {
    return std::nullopt;
  }
  using tensor::cuda::StreamMark;
  constexpr double kUs = 1000.0;  // per millisecond
  const double comm = StreamMark::elapsed_ms(m.comm_start, m.comm_end) * kUs;
  // Backward compute: from the end of forward (the loss and backward's kernels follow on the
  // same stream) to the last gradient.
  return Times{StreamMark::elapsed_ms(m.forward_start, m.forward_end) * kUs,
               StreamMark::elapsed_ms(m.forward_end, m.backward_end) * kUs, comm,
               std::clamp(StreamMark::elapsed_ms(m.comm_start, m.backward_end) * kUs, 0.0, comm)};
}

void Recorder::add_times(const Times& t, DDPStats& stats, Times& sums, int64_t& measured) {
  stats.last_forward_compute_us = t[0];
  stats.last_backward_compute_us = t[1];
  stats.last_backward_comm_us = t[2];
  stats.last_overlap_us = t[3];
  for (size_t k = 0; k < t.size(); ++k) sums[k] += t[k];
  ++measured;
}

void Recorder::finalized(Clock::time_point start, const std::vector<size_t>& bytes) {
  const auto us = [](auto from, auto to) {
    return std::max(0.0, std::chrono::duration<double, std::micro>(to - from).count());
  };
  const auto end = Clock::now();
  const int64_t iteration = stats_.iterations++;
  if (device_timing()) {
    // The previous iteration's marks have long passed; this one's are measured next time.
    mark(marks_.comm_end);
    if (unmeasured_) {
      if (const auto times = measure(*unmeasured_)) add_times(*times, stats_, sums_, measured_iterations_);
    }
    unmeasured_ = marks_;
  } else if (timing_device_ < 0) {  // host clocks (a captured GPU iteration is timed by neither)
    add_times(Times{us(forward_start_, forward_end_), us(backward_start_, last_hook_), us(first_launch_, comm_end_),
                    us(first_launch_, std::min(last_hook_, comm_end_))},
              stats_, sums_, measured_iterations_);
  }
  finish_timeline(start, end, iteration, bytes);
}

void Recorder::finish_timeline(Clock::time_point start, Clock::time_point end, int64_t iteration,
                               const std::vector<size_t>& bytes) {
  if (timeline_enabled_) {
    timeline_.span("backward (to the last gradient)", backward_start_, last_hook_, iteration);
    for (size_t b = 0; b < bytes.size(); ++b) {
      // Launch instants are on the compute row; each allreduce's span on its bucket's row,
      // ending when the host saw it end (NCCL: at the latest, when finalize ended).
      timeline_.span(fmt::format("allreduce bucket {} ({} KiB)", b, bytes[b] >> 10), launched_at_[b],
                     completed_at_[b].value_or(end), iteration, Timeline::bucket_track(b));
    }
    timeline_.span("finalize", start, end, iteration);
  }
}

DDPStats Recorder::stats(std::vector<size_t> bucket_bytes, bool buckets_rebuilt) const {
  DDPStats out = stats_;
  out.bucket_bytes = std::move(bucket_bytes);
  out.buckets_rebuilt = buckets_rebuilt;
  Times sums = sums_;
  int64_t measured = measured_iterations_;
  if (unmeasured_) {
    if (const auto times = measure(*unmeasured_)) add_times(*times, out, sums, measured);  // waits for the GPU
  }
  if (measured > 0) {
    const double n = static_cast<double>(measured);
    out.avg_forward_compute_us = sums[0] / n;
    out.avg_backward_compute_us = sums[1] / n;
    out.avg_backward_comm_us = sums[2] / n;
    out.avg_overlap_us = sums[3] / n;
  }
  return out;
}

}  // namespace tinyddp::ddp
