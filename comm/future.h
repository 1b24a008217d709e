// Future: a value that an asynchronous operation produces, with PyTorch's meaning
// (torch.futures.Future). A collective's Future completes when its Work does; `then(callback)`
// makes a new Future from a callback that runs exactly once, when this one completes (on the
// thread that completes it: a backend's worker, a completion callback, or this thread when it
// is complete already); `wait()` blocks until completion and can be called any number of
// times, re-running nothing. Communication hooks return one (ddp/comm_hooks.h); PowerSGD is a
// chain of `then`s (ddp/powersgd.cc).
//
// A callback that starts more communication returns that communication's Future, and the
// Future `then` made completes when that one does, without blocking any thread. Order: a
// callback's collectives run before the collectives this thread issues after attaching it
// (Gloo runs collectives issued from its worker thread ahead of its queue; NCCL runs the
// callback at once, in stream order), so chains run depth first, the same on every rank.
// Attach a callback right after issuing its work.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/completion.h"
#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

class Future {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Pending, until set_result or set_exception.
  Future() = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // Completes with `value` (the tensor the operation wrote) when `work` finishes, or with its
  // error. On NCCL that is at once, in stream order: kernels queued after wait() see the value.
  static std::shared_ptr<Future> from_work(std::shared_ptr<Work> work, Tensor value);
  // Already completed with `value`.
  static std::shared_ptr<Future> completed(Tensor value);

  bool done() const;
  // Blocks until done; returns the value or rethrows the error. Idempotent.
  Tensor wait();
  // The value of a completed future (rethrows its error); throws if it is still pending.
  Tensor value() const;
  // The error, or null (also null while pending).
  std::exception_ptr exception() const;

  // A new Future holding what `callback(*this)` returns, run once when this one completes
  // (also when it failed: value() rethrows inside the callback). The callback returns a
  // Tensor, or a std::shared_ptr<Future> whose completion the new Future then adopts. An
  // exception from the callback becomes the new Future's error.
  template <typename Callback>
  std::shared_ptr<Future> then(Callback callback);
  // Runs `callback(*this)` once when done (at once when done already). It must not throw.
  void add_done_callback(std::function<void(Future&)> callback);

  void set_result(Tensor value);
  void set_exception(std::exception_ptr error);

  // When the communication behind the value finished, if known: the Work's finish time for a
  // collective's Future (on NCCL, when the host saw it), carried along a `then` chain to the
  // last collective of the chain; else when the future completed.
  std::optional<TimePoint> completed_at() const;

 private:
  // Completes once; `source` is the Work whose finish time completed_at reports.
  void complete(Tensor value, std::exception_ptr error, std::shared_ptr<Work> source);
  // Takes over another future's outcome (for a callback that returned a Future).
  void adopt(const Future& other);

  // Done, the error and the callbacks; value_ and source_ are stored with the outcome, under
  // its lock, and never change after: read once done() (or from a done callback).
  Completion completion_;
  Tensor value_;
  std::shared_ptr<Work> source_;
};

template <typename Callback>
std::shared_ptr<Future> Future::then(Callback callback) {
  using Result = std::invoke_result_t<Callback&, Future&>;
  static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::shared_ptr<Future>>,
                "Future::then: the callback must return a Tensor or a std::shared_ptr<Future>");
  auto next = std::make_shared<Future>();
  add_done_callback([next, callback = std::move(callback)](Future& self) mutable {
    try {
      if constexpr (std::is_same_v<Result, Tensor>) {
        Tensor value = callback(self);
        next->complete(std::move(value), nullptr, self.source_);  // self is done: source_ is fixed
      } else {
        std::shared_ptr<Future> inner = callback(self);
        TDDP_CHECK(inner != nullptr, "Future::then: the callback returned a null future");
        inner->add_done_callback([next](Future& done) { next->adopt(done); });
      }
    } catch (...) {
      next->complete(Tensor(), std::current_exception(), nullptr);
    }
  });
  return next;
}

}  // namespace tinyddp::comm
