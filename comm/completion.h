// Completion: the one-shot "finished, with or without an error" that Work (process_group.h)
// and Future (future.h) are both built on: a flag and an error under a mutex, a condition
// variable for waiters, the moment it finished, and callbacks that run exactly once, on the
// thread that completes it, or at once when it has completed already.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "tinyddp/comm/store.h"

namespace tinyddp::comm {

class Completion {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  bool done() const;
  // The error, or null (also null while pending).
  std::exception_ptr error() const;
  // When it completed, or nothing while pending.
  std::optional<TimePoint> completed_at() const;

  // Blocks until completed; with a timeout, returns false if that passed first.
  bool wait(std::optional<Millis> timeout = std::nullopt) const;

  // Runs `callback` once, when completed (at once, on this thread, when completed already).
  void on_done(std::function<void()> callback);

  // Completes with `error` (null: success), runs `under_lock` first while holding the lock (for
  // what the owner stores with the outcome, read after done() by any thread), then wakes the
  // waiters and runs the callbacks on this thread. Returns false, changing nothing, when it
  // had completed already.
  bool complete(std::exception_ptr error, const std::function<void()>& under_lock = {});

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  TimePoint completed_at_{};
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace tinyddp::comm
