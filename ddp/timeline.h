// Timeline: the events of DDP's gradient synchronisation on one rank (hooks firing, buckets
// ready, each allreduce from launch to completion, finalize), written as a Chrome trace JSON
// file that Perfetto (ui.perfetto.dev) or chrome://tracing displays, so that the overlap of
// communication with the backward pass can be seen.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace tinyddp::ddp {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Track (thread) ids in the trace.
  static constexpr int kCompute = 0;
  static constexpr int kCommunication = 1;

  void instant(const std::string& name, Clock::time_point at, int track = kCompute);
  void span(const std::string& name, Clock::time_point start, Clock::time_point end, int track = kCompute);
  // {"traceEvents": [...]} with one process per rank.
  std::string json(int rank) const;
  void write(const std::string& path, int rank) const;

 private:
  struct Event {
    std::string name;
    char phase;  // 'X' span, 'i' instant
    Clock::time_point start, end;
    int track;
  };
  mutable std::mutex mutex_;
  Clock::time_point origin_ = Clock::now();
  std::vector<Event> events_;
};

}  // namespace tinyddp::ddp
