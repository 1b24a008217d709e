// Work and ReduceOp helpers: see process_group.h.
#include "comm/process_group.h"

#include <fmt/format.h>

namespace tinyddp::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Work::wait(std::optional<Millis> timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout) {
    if (!done_cv_.wait_for(lock, *timeout, [this] { return done_; })) {
      throw TimeoutError(fmt::format("Work::wait: {} did not finish within {} ms", description_, timeout->count()));
    }
  } else {
    done_cv_.wait(lock, [this] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
}

std::optional<std::chrono::steady_clock::time_point> Work::finished_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return std::nullopt;
  return finished_at_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    finished_at_ = std::chrono::steady_clock::now();
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace tinyddp::comm
