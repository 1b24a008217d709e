// Timeline (timeline.h): events on a clock aligned across ranks, written as a Chrome trace
// (a process per rank, a compute row and a row per bucket).
#include "tinyddp/ddp/timeline.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::ddp {

void Timeline::align(Clock::time_point origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_ = origin;
  aligned_ = true;
}

void Timeline::name_track(int track, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  track_names_[track] = std::move(name);
}

void Timeline::instant(const std::string& name, Clock::time_point at, int64_t iteration, int track) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, 'i', at, at, iteration, track});
}

void Timeline::span(const std::string& name, Clock::time_point start, Clock::time_point end, int64_t iteration,
                    int track) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, 'X', start, end, iteration, track});
}

std::string Timeline::json(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto us = [this](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  // Compute and every bucket's row up to the last one used (rows without events too), then
  // the layers' collectives if there were any.
  int bucket_rows = 1;
  bool layer_row = false;
  for (const Event& e : events_) {
    if (e.track == kLayerCollectives) {
      layer_row = true;
    } else {
      bucket_rows = std::max(bucket_rows, e.track + 1);
    }
  }
  std::vector<int> tracks;
  for (int track = 0; track < bucket_rows; ++track) tracks.push_back(track);
  if (layer_row) tracks.push_back(kLayerCollectives);
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  for (const int track : tracks) {
    const auto named = track_names_.find(track);
    const std::string name = named != track_names_.end()  ? named->second
                             : track == kCompute          ? "compute"
                             : track == kLayerCollectives ? "layer collectives (SyncBatchNorm)"
                                                          : "bucket " + std::to_string(track - 1) + " allreduce";
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", track}, {"args", {{"name", name}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", track}, {"args", {{"sort_index", track}}}});
  }
  for (const Event& e : events_) {
    nlohmann::json event = {{"name", e.name}, {"ph", std::string(1, e.phase)},       {"ts", us(e.start)}, {"pid", rank},
                            {"tid", e.track}, {"args", {{"iteration", e.iteration}}}};
    if (e.phase == 'X') event["dur"] = us(e.end) - us(e.start);
    if (e.phase == 'i') event["s"] = "t";
    events.push_back(event);
  }
  const nlohmann::json other = {
      {"rank", rank},
      {"clock", aligned_ ? "aligned: microseconds since all ranks left the barriers of agree_on_time_zero"
                         : "this rank's own: microseconds since its timeline started"}};
  return nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}}).dump();
}

// The same instant on every rank, each in its own clock: the ranks leave kRounds barriers and
// read their clock after each; rank r's clock minus rank 0's is the median over the rounds of
// the difference between their reads, so a read that a busy machine delayed (the thread
// descheduled between leaving a barrier and reading the clock) moves one round and not the
// result. Time zero is rank 0's last read, mapped onto each rank's clock.
Timeline::Clock::time_point agree_on_time_zero(comm::ProcessGroup& pg, tensor::Device device) {
  constexpr int kRounds = 5;
  std::vector<int64_t> reads(kRounds);
  for (int64_t& read : reads) {
    pg.barrier()->wait();
    read = std::chrono::duration_cast<std::chrono::nanoseconds>(Timeline::Clock::now().time_since_epoch()).count();
  }
  const std::vector<std::vector<int64_t>> all = comm::allgather_equal_ints(pg, device, reads);
  const std::vector<int64_t>& mine = all[static_cast<size_t>(pg.rank())];
  const std::vector<int64_t>& first = all[0];
  std::vector<int64_t> offsets(kRounds);
  for (int k = 0; k < kRounds; ++k) offsets[k] = mine[k] - first[k];
  std::nth_element(offsets.begin(), offsets.begin() + kRounds / 2, offsets.end());
  return Timeline::Clock::time_point(std::chrono::nanoseconds(first[kRounds - 1] + offsets[kRounds / 2]));
}

void Timeline::write(const std::string& path, int rank) const {
  std::ofstream out(path);
  TDDP_CHECK(out.good(), "DDP timeline: cannot write {}", path);
  out << json(rank);
  out.close();
  TDDP_CHECK(out.good(), "DDP timeline: writing {} failed", path);
}

}  // namespace tinyddp::ddp
