// Future (future.h): a Completion (completion.h) with the value stored alongside, made from a
// Work's completion (Future::from_work, Work::get_future), and adoption of an inner Future's
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

std::shared_ptr<Future> Work::get_future() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (std::shared_ptr<Future> existing = future_.lock()) return existing;
  std::shared_ptr<Future> future = Future::from_work(shared_from_this(), result_);
  future_ = future;
  return future;
}

std::shared_ptr<Future> Future::completed(Tensor value) {
  auto future = std::make_shared<Future>();
  future->set_result(std::move(value));
  return future;
}

bool Future::done() const { return completion_.done(); }

Tensor Future::wait() {
  completion_.wait();
  if (std::exception_ptr error = completion_.error()) std::rethrow_exception(error);
  return value_;
}

Tensor Future::value() const {
  TDDP_CHECK(completion_.done(), "Future::value: the future is not complete yet (wait() for it)");
  if (std::exception_ptr error = completion_.error()) std::rethrow_exception(error);
  return value_;
}

std::exception_ptr Future::exception() const { return completion_.error(); }

void Future::add_done_callback(std::function<void(Future&)> callback) {
  completion_.on_done([this, callback = std::move(callback)] { callback(*this); });
}

void Future::set_result(Tensor value) { complete(std::move(value), nullptr, nullptr); }

void Future::set_exception(std::exception_ptr error) {
  TDDP_CHECK(error != nullptr, "Future::set_exception: no error given");
  complete(Tensor(), std::move(error), nullptr);
}

void Future::complete(Tensor value, std::exception_ptr error, std::shared_ptr<Work> source) {
  const bool first = completion_.complete(std::move(error), [&] {
    value_ = std::move(value);
    source_ = std::move(source);
  });
  TDDP_CHECK(first, "Future: completed twice (set_result or set_exception on a future that is done)");
}

void Future::adopt(const Future& other) {  // other is done: its outcome is fixed
  complete(other.value_, other.completion_.error(), other.source_);
}

std::optional<Future::TimePoint> Future::completed_at() const {
  if (!completion_.done()) return std::nullopt;
  if (source_) return source_->finished_at();  // on NCCL: unknown until the host saw it finish
  return completion_.completed_at();
}

}  // namespace tinyddp::comm
