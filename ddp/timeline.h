// Timeline: the events of DDP's gradient synchronisation on one rank (forward, hooks firing,
// each gradient copied into its bucket, each allreduce from launch to completion, finalize),
// written as a Chrome trace JSON file that Perfetto (ui.perfetto.dev) or chrome://tracing
// displays, so that the overlap of communication with the backward pass can be seen.
//
// Rows: one process per rank; in it a row for compute (forward, backward, copies, finalize),
// one row per bucket (its allreduces) and, with SyncBatchNorm layers, one for their
// collectives. Every event carries its iteration in "args".
//
// One clock for all ranks: DistributedDataParallel's constructor agrees with the other ranks on
// one instant (agree_on_time_zero, below: the median offset over five barriers) and
// calls align with it; times are microseconds since that instant, so the per-rank files line
// up (to within a barrier's release skew, tens of microseconds over loopback) and
// scripts/merge_timelines.py can put them into one trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::ddp {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kCompute = 0;
  // The row of bucket b's allreduces.
  static constexpr int bucket_track(size_t b) { return 1 + static_cast<int>(b); }
  // The row of the collectives that layers issue themselves (SyncBatchNorm's), after the buckets'.
  static constexpr int kLayerCollectives = 999;

  // Time zero of the trace: the instant the ranks agreed on (agree_on_time_zero), on this clock.
  void align(Clock::time_point origin);
  bool aligned() const { return aligned_; }

  // The row `track`'s name in the trace (unnamed rows: "compute", "bucket b allreduce").
  void name_track(int track, std::string name);
  void instant(const std::string& name, Clock::time_point at, int64_t iteration, int track = kCompute);
  void span(const std::string& name, Clock::time_point start, Clock::time_point end, int64_t iteration,
            int track = kCompute);
  // {"traceEvents": [...], "otherData": {...}} with process id = rank.
  std::string json(int rank) const;
  void write(const std::string& path, int rank) const;

 private:
  struct Event {
    std::string name;
    char phase;  // 'X' span, 'i' instant
    Clock::time_point start, end;
    int64_t iteration;
    int track;
  };
  mutable std::mutex mutex_;
  Clock::time_point origin_ = Clock::now();
  bool aligned_ = false;
  std::vector<Event> events_;
  std::map<int, std::string> track_names_;
};

// The same instant on every rank of `pg` (a collective: five barriers and an allgather on
// `device`), each on its own clock: what Timeline::align takes, so that the ranks' files line up.
Timeline::Clock::time_point agree_on_time_zero(comm::ProcessGroup& pg, tensor::Device device);

}  // namespace tinyddp::ddp
