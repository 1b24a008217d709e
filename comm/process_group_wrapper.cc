// ProcessGroupWrapper (process_group_wrapper.h): the agreement on the switch, the choice of
// where the check runs and on which channel its rows travel, and each collective handed on to
// the wrapped backend.
#include "tinyddp/comm/process_group_wrapper.h"

#include <fmt/format.h>

#include "tinyddp/comm/gloo/process_group_gloo.h"

namespace tinyddp::comm {

namespace {
// A group's rows over `side`, a CPU group of the same ranks, as a sum (exchange_records_by_sum).
CallCheck::Exchange exchange_rows_over(std::shared_ptr<ProcessGroup> side) {
  return [side = std::move(side), buffer = Tensor()](std::vector<CallSignature::Row>& rows) mutable {
    exchange_records_by_sum(rows, side->rank(), buffer, [&](const Tensor& t) { side->allreduce(t)->wait(); });
    return DataFate::kNotSent;
  };
}

// The check of one call, as the hook a backend runs where the data moves (or the wrapper runs
// on the calling thread). A mismatch is refused with the call named ("allreduce (...) failed:
// ..."); a failed exchange on the side group is named as the check's.
class CheckHook final : public CallHook {
 public:
  CheckHook(std::shared_ptr<CallCheck> check, std::string what, CallSignature call)
      : check_(std::move(check)), what_(std::move(what)), call_(std::move(call)) {}

  void run() override {
    refusing([&] { check_->verify(call_); });
  }
  Record record() override { return check_->next_row(call_); }
  void settle(const std::vector<Record>& records, DataFate fate) override {
    refusing([&] { check_->compare(records, fate); });
  }
  // run(), with the exchange's own failure named as the check's (side group: not the backend's).
  void run_on_side() {
    try {
      run();
    } catch (const CallRefused&) {
      throw;
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("{} failed: the desync check's exchange: {}", what_, e.what()));
    } catch (const std::exception& e) {
      throw Error(fmt::format("{} failed: the desync check's exchange: {}", what_, e.what()));
    }
  }

 private:
  template <typename F>
  void refusing(F&& step) {
    try {
      step();
    } catch (const CollectiveMismatchError& e) {
      throw CollectiveMismatchError(fmt::format("{} failed: {}", what_, e.what()));
    }
  }

  std::shared_ptr<CallCheck> check_;
  std::string what_;
  CallSignature call_;
};

}  // namespace

ProcessGroupWrapper::ProcessGroupWrapper(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<Store> store,
                                         ProcessGroupOptions options)
    : ProcessGroup(inner->rank(), inner->size(), inner->backend(), inner->display_name(), inner->tensor_rules()),
      inner_(std::move(inner)), store_(std::move(store)), options_(std::move(options)) {
  TDDP_CHECK(store_ != nullptr, "ProcessGroupWrapper: the store is null");
}

ProcessGroupWrapper::ProcessGroupWrapper(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<ProcessGroup> side)
    : ProcessGroup(inner->rank(), inner->size(), inner->backend(), inner->display_name(), inner->tensor_rules()),
      inner_(std::move(inner)), side_(std::move(side)) {
  TDDP_CHECK(side_ != nullptr && side_->rank() == rank_ && side_->size() == size_,
             "ProcessGroupWrapper: the side group must hold the same ranks as {} (rank {} of {})", display_name(),
             rank_, size_);
  check_ = std::make_shared<CallCheck>(display_name(), rank_, size_, exchange_rows_over(side_));
  agreed_ = true;
}

void ProcessGroupWrapper::agree() {
  std::lock_guard<std::mutex> lock(agree_mutex_);
  if (agreed_) return;
  if (CallCheck::agree(*store_, rank_, size_, options_.check_calls(), display_name(), options_.timeout())) {
    CallCheck::Exchange exchange = inner_->runs_call_hooks() ? inner_->own_record_exchange() : nullptr;
    if (!exchange) {
      ProcessGroupOptions side_options = options_;
      side_options.check_calls(false);
      side_ = std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>("tinyddp/call-check", store_), rank_,
                                                 size_, side_options);
      exchange = exchange_rows_over(side_);
    }
    check_ = std::make_shared<CallCheck>(display_name(), rank_, size_, std::move(exchange));
  }
  agreed_ = true;
}

bool ProcessGroupWrapper::checking() {
  agree();
  return check_ != nullptr;
}

void ProcessGroupWrapper::prepare_calls() {
  inner_->prepare_calls();
  agree();
}

std::shared_ptr<Work> ProcessGroupWrapper::forward(Call call,
                                                   const std::function<std::shared_ptr<Work>(Call)>& hand_on) {
  if (check_ && call.signature) {
    auto hook = std::make_shared<CheckHook>(check_, call.what, *call.signature);
    if (inner_->runs_call_hooks()) {
      call.hook = std::move(hook);
    } else {
      try {
        hook->run_on_side();
      } catch (...) {
        auto work = std::make_shared<Work>(call.what);
        work->finish(std::current_exception());
        return work;
      }
    }
  }
  return hand_on(std::move(call));
}

std::shared_ptr<Work> ProcessGroupWrapper::allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->allreduce_impl(tensors, op, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::broadcast_impl(const Tensor& tensor, int root, Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->broadcast_impl(tensor, root, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                          Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->allgather_impl(outputs, input, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                       int root, Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->gather_impl(outputs, input, root, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                        int root, Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->scatter_impl(output, inputs, root, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->reduce_impl(tensor, root, op, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                               ReduceOp op, Call call) {
  return forward(std::move(call),
                 [&](Call c) { return inner_->reduce_scatter_impl(output, inputs, op, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::reduce_scatter_widened_impl(const Tensor& sums, const Tensor& values,
                                                                       const Widen& widen, Call call) {
  // (A backend that runs the calls' hooks, Gloo's, has its ring on every group it wraps: it
  // never declines, so the hook it was handed always runs.)
  return forward(std::move(call),
                 [&](Call c) { return inner_->reduce_scatter_widened_impl(sums, values, widen, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroupWrapper::barrier_impl(Call call) {
  return forward(std::move(call), [&](Call c) { return inner_->barrier_impl(std::move(c)); });
}

// Point to point: the ranks' calls differ by design, so there is nothing to compare.
std::shared_ptr<Work> ProcessGroupWrapper::send_impl(const Tensor& tensor, int dst, int tag, Call call) {
  return inner_->send_impl(tensor, dst, tag, std::move(call));
}

std::shared_ptr<Work> ProcessGroupWrapper::recv_impl(const Tensor& tensor, int src, int tag, Call call) {
  return inner_->recv_impl(tensor, src, tag, std::move(call));
}

void ProcessGroupWrapper::check_placement(const Tensor& t, const char* op, const std::string& what) const {
  inner_->check_placement(t, op, what);
}

std::shared_ptr<ProcessGroup> ProcessGroupWrapper::create_subgroup(int id, int rank, int size) {
  std::shared_ptr<ProcessGroup> inner = inner_->create_subgroup(id, rank, size);
  if (size == 1) return inner;
  if (store_ == nullptr) return std::make_shared<ProcessGroupWrapper>(inner, side_->create_subgroup(id, rank, size));
  return std::make_shared<ProcessGroupWrapper>(
      inner, std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), store_), options_);
}

}  // namespace tinyddp::comm
