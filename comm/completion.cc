// Completion (completion.h): state under one mutex, callbacks taken out of it before they run,
// so a callback may complete, wait on or attach to other Completions.
#include "tinyddp/comm/completion.h"

namespace tinyddp::comm {

bool Completion::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr Completion::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::optional<Completion::TimePoint> Completion::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return std::nullopt;
  return completed_at_;
}

bool Completion::wait(std::optional<Millis> timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!timeout) {
    done_cv_.wait(lock, [this] { return done_; });
    return true;
  }
  return done_cv_.wait_for(lock, *timeout, [this] { return done_; });
}

void Completion::on_done(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool Completion::complete(std::exception_ptr error, const std::function<void()>& under_lock) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return false;
    if (under_lock) under_lock();
    done_ = true;
    error_ = std::move(error);
    completed_at_ = std::chrono::steady_clock::now();
    callbacks.swap(callbacks_);
  }
  done_cv_.notify_all();
  for (auto& callback : callbacks) callback();
  return true;
}

}  // namespace tinyddp::comm
