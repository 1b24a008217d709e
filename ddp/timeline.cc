// Timeline: see timeline.h.
#include "ddp/timeline.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tinyddp::ddp {

void Timeline::instant(const std::string& name, Clock::time_point at, int track) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, 'i', at, at, track});
}

void Timeline::span(const std::string& name, Clock::time_point start, Clock::time_point end, int track) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({name, 'X', start, end, track});
}

std::string Timeline::json(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto us = [this](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  nlohmann::json events = nlohmann::json::array();
  for (const char* track : {"compute (backward)", "communication"}) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", events.size()},
                      {"args", {{"name", track}}}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (const Event& e : events_) {
    nlohmann::json event = {{"name", e.name}, {"ph", std::string(1, e.phase)}, {"ts", us(e.start)}, {"pid", rank}, {"tid", e.track}};
    if (e.phase == 'X') event["dur"] = us(e.end) - us(e.start);
    if (e.phase == 'i') event["s"] = "t";
    events.push_back(event);
  }
  return nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump();
}

void Timeline::write(const std::string& path, int rank) const {
  std::ofstream out(path);
  TDDP_CHECK(out.good(), "DDP timeline: cannot write {}", path);
  out << json(rank);
}

}  // namespace tinyddp::ddp
