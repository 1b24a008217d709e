// Future (future.h): completion under a mutex (the value or the error, the callbacks run once
// by whoever completes it), from a Work's completion, and adoption of an inner Future's
// outcome for a callback that returned one.
#include "tinyddp/comm/future.h"

namespace tinyddp::comm {

std::shared_ptr<Future> Future::from_work(std::shared_ptr<Work> work, Tensor value) {
  TDDP_CHECK(work != nullptr, "Future::from_work: the work is null");
  auto future = std::make_shared<Future>();
  // The Work holds the callback until it finishes; the callback holds the future, and the
  // Work only weakly (a Work holding itself would never be freed).
  work->on_finished([future, weak = std::weak_ptr<Work>(work), value = std::move(value)](const Work& finished) {
    future->complete(value, finished.exception(), weak.lock());
  });
  return future;
}

std::shared_ptr<Future> Future::completed(Tensor value) {
  auto future = std::make_shared<Future>();
  future->set_result(std::move(value));
  return future;
}

bool Future::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

Tensor Future::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
  return value_;
}

Tensor Future::value() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TDDP_CHECK(done_, "Future::value: the future is not complete yet (wait() for it)");
  if (error_) std::rethrow_exception(error_);
  return value_;
}

std::exception_ptr Future::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Future::add_done_callback(std::function<void(Future&)> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(*this);
}

void Future::set_result(Tensor value) { complete(std::move(value), nullptr, nullptr); }

void Future::set_exception(std::exception_ptr error) {
  TDDP_CHECK(error != nullptr, "Future::set_exception: no error given");
  complete(Tensor(), std::move(error), nullptr);
}

void Future::complete(Tensor value, std::exception_ptr error, std::shared_ptr<Work> source) {
  std::vector<std::function<void(Future&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TDDP_CHECK(!done_, "Future: completed twice (set_result or set_exception on a future that is done)");
    done_ = true;
    value_ = std::move(value);
    error_ = std::move(error);
    source_ = std::move(source);
    completed_at_ = std::chrono::steady_clock::now();
    callbacks.swap(callbacks_);
  }
  done_cv_.notify_all();
  for (auto& callback : callbacks) callback(*this);
}

void Future::adopt(const Future& other) {
  Tensor value;
  std::exception_ptr error;
  std::shared_ptr<Work> source;
  {
    std::lock_guard<std::mutex> lock(other.mutex_);
    value = other.value_;
    error = other.error_;
    source = other.source_;
  }
  complete(std::move(value), std::move(error), std::move(source));
}

std::optional<Future::TimePoint> Future::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) return std::nullopt;
  if (source_) return source_->finished_at();  // on NCCL: unknown until the host saw it finish
  return completed_at_;
}

}  // namespace tinyddp::comm
