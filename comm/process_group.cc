// ProcessGroup's one validation layer (process_group.h): each public collective checks its
// tensors, ranks and op with errors that name them, describes the call for the desync check
// and for messages, then calls the backend's *_impl; and Work, on its Completion.
#include "tinyddp/comm/process_group.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/tensor/factory.h"

namespace tinyddp::comm {

bool Work::is_completed() const { return completion_.done(); }

bool Work::is_success() const { return completion_.done() && !completion_.error(); }

std::exception_ptr Work::exception() const { return completion_.error(); }

void Work::wait(std::optional<Millis> timeout) {
  if (!completion_.wait(timeout)) {
    throw TimeoutError(fmt::format("Work::wait: {} did not finish within {} ms", description_, timeout->count()));
  }
  if (std::exception_ptr error = completion_.error()) std::rethrow_exception(error);
}

std::optional<std::chrono::steady_clock::time_point> Work::finished_at() const { return completion_.completed_at(); }

void Work::on_finished(std::function<void(const Work&)> callback) {
  completion_.on_done([this, callback = std::move(callback)] { callback(*this); });
}

void Work::finish(std::exception_ptr error) { completion_.complete(std::move(error)); }

void Work::set_result(Tensor result) {
  std::lock_guard<std::mutex> lock(future_mutex_);
  result_ = std::move(result);
}

namespace {
// A collective's Work, told which tensor its Future holds.
std::shared_ptr<Work> with_result(std::shared_ptr<Work> work, const Tensor& result) {
  work->set_result(result);
  return work;
}
}  // namespace

// ---- ProcessGroup: one validation layer for every backend -----------------------------------

ProcessGroup::ProcessGroup(int rank, int size, std::string backend, std::string display_name, TensorRules rules)
    : rank_(rank), size_(size), backend_(std::move(backend)), display_name_(std::move(display_name)), rules_(rules) {
  TDDP_CHECK(size >= 1 && rank >= 0 && rank < size, "{}: rank {} is not in [0, {}) for a group of size {}",
             display_name_, rank, size, size);
}

std::string ProcessGroup::prefix(const char* op) const { return fmt::format("{} {}: ", display_name_, op); }

void ProcessGroup::check_tensor(const Tensor& t, const char* op, const std::string& what, Use use) const {
  TDDP_CHECK(t.defined(), "{}{} is an undefined tensor", prefix(op), what);
  TDDP_CHECK(rules_.accepts(t.device()), "{}{} is on {}; {}", prefix(op), what, t.device().str(), rules_.takes);
  TDDP_CHECK(!rules_.contiguous_only || t.is_contiguous(), "{}{} (shape {}) is not contiguous; pass .contiguous()",
             prefix(op), what, tensor::format_shape(t.sizes()));
  if (t.dtype() == tensor::kBool && use != Use::kPointToPoint) {  // point to point moves bytes
    TDDP_CHECK(!rules_.bool_data || use != Use::kReduce, "{}cannot reduce bool tensors (convert with .to(int64))",
               prefix(op));
    TDDP_CHECK(rules_.bool_data, "{}dtype bool is not supported (float32, float64, float16, bfloat16, int64)",
               prefix(op));
  }
  check_placement(t, op, what);
}

void ProcessGroup::check_like(const Tensor& t, const Tensor& reference, const char* op, const std::string& what) const {
  check_tensor(t, op, what, Use::kMove);
  TDDP_CHECK(t.dtype() == reference.dtype() && t.sizes() == reference.sizes(), "{}{} is {} {} but must be {} {}",
             prefix(op), what, tensor::dtype_name(t.dtype()), tensor::format_shape(t.sizes()),
             tensor::dtype_name(reference.dtype()), tensor::format_shape(reference.sizes()));
}

void ProcessGroup::check_rank(int r, const char* op, const char* role) const {
  TDDP_CHECK(r >= 0 && r < size_, "{}{} {} is not a rank of this group of {}", prefix(op), role, r, size_);
}

void ProcessGroup::check_peer(int peer, int tag, const char* op, const char* role) const {
  TDDP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{}{} {} is not another rank of this group of {}", prefix(op),
             role, peer, size_);
  TDDP_CHECK(tag >= 0, "{}tag must be >= 0, got {}", prefix(op), tag);
}

void ProcessGroup::check_op(ReduceOp op, const Tensor& t, const char* name) const {
  TDDP_CHECK(op != ReduceOp::kAvg || t.is_floating_point(), "{}avg needs floating-point tensors, got {}", prefix(name),
             tensor::dtype_name(t.dtype()));
}

void ProcessGroup::check_root_list(const std::vector<Tensor>& list, const Tensor& mine, int root, const char* op,
                                   bool list_is_output) const {
  const char* list_name = list_is_output ? "outputs" : "inputs";
  if (rank_ != root) {
    TDDP_CHECK(list.empty(), "{}only the root (rank {}) passes {}", prefix(op), root, list_name);
    return;
  }
  TDDP_CHECK(static_cast<int>(list.size()) == size_, "{}the root needs {} {}, got {}", prefix(op), size_, list_name,
             list.size());
  for (size_t r = 0; r < list.size(); ++r) {
    check_like(list[r], mine, op, fmt::format("{} {}", list_is_output ? "output" : "input", r));
  }
}

std::string ProcessGroup::describe(const char* op, const Tensor& t, const std::string& extra) const {
  return fmt::format("{} (rank {} of {}, {} x {}{}{})", op, rank_, size_, t.numel(), tensor::dtype_name(t.dtype()),
                     extra.empty() ? "" : ", ", extra);
}

template <typename Impl>
std::shared_ptr<Work> ProcessGroup::dispatch(Call call, Impl impl) {
  prepare_calls();
  return impl(std::move(call));
}

std::shared_ptr<Work> ProcessGroup::allreduce(const std::vector<Tensor>& tensors, ReduceOp op) {
  TDDP_CHECK(!tensors.empty(), "{}no tensors given", prefix("allreduce"));
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], "allreduce", fmt::format("tensor {}", i), Use::kReduce);
    TDDP_CHECK(tensors[i].dtype() == tensors[0].dtype(), "{}tensors of different dtypes ({} and {})",
               prefix("allreduce"), tensor::dtype_name(tensors[0].dtype()), tensor::dtype_name(tensors[i].dtype()));
    total += tensors[i].numel();
  }
  check_op(op, tensors[0], "allreduce");
  Call call{fmt::format("allreduce (rank {} of {}, {} tensor(s), {} x {}, {})", rank_, size_, tensors.size(), total,
                        tensor::dtype_name(tensors[0].dtype()), reduce_op_name(op)),
            CallSignature{Collective::kAllreduce, tensors[0].dtype(), total, -1, op}};
  return with_result(dispatch(std::move(call), [&](Call c) { return allreduce_impl(tensors, op, std::move(c)); }),
                     tensors.size() == 1 ? tensors[0] : Tensor());
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast", "tensor", Use::kMove);
  check_rank(root, "broadcast", "root");
  Call call{describe("broadcast", tensor, fmt::format("root {}", root)),
            CallSignature{Collective::kBroadcast, tensor.dtype(), tensor.numel(), root, std::nullopt}};
  return with_result(dispatch(std::move(call), [&](Call c) { return broadcast_impl(tensor, root, std::move(c)); }),
                     tensor);
}

std::shared_ptr<Work> ProcessGroup::allgather(const std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor(input, "allgather", "input", Use::kMove);
  TDDP_CHECK(static_cast<int>(outputs.size()) == size_, "{}{} outputs given for a group of {}", prefix("allgather"),
             outputs.size(), size_);
  for (size_t r = 0; r < outputs.size(); ++r) check_like(outputs[r], input, "allgather", fmt::format("output {}", r));
  Call call{describe("allgather", input),
            CallSignature{Collective::kAllgather, input.dtype(), input.numel(), -1, std::nullopt}};
  return dispatch(std::move(call), [&](Call c) { return allgather_impl(outputs, input, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroup::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  check_tensor(input, "gather", "input", Use::kMove);
  check_rank(root, "gather", "root");
  check_root_list(outputs, input, root, "gather", /*list_is_output=*/true);
  Call call{describe("gather", input, fmt::format("root {}", root)),
            CallSignature{Collective::kGather, input.dtype(), input.numel(), root, std::nullopt}};
  return dispatch(std::move(call), [&](Call c) { return gather_impl(outputs, input, root, std::move(c)); });
}

std::shared_ptr<Work> ProcessGroup::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  check_tensor(output, "scatter", "output", Use::kMove);
  check_rank(root, "scatter", "root");
  check_root_list(inputs, output, root, "scatter", /*list_is_output=*/false);
  Call call{describe("scatter", output, fmt::format("root {}", root)),
            CallSignature{Collective::kScatter, output.dtype(), output.numel(), root, std::nullopt}};
  return with_result(
      dispatch(std::move(call), [&](Call c) { return scatter_impl(output, inputs, root, std::move(c)); }), output);
}

std::shared_ptr<Work> ProcessGroup::reduce(const Tensor& tensor, int root, ReduceOp op) {
  check_tensor(tensor, "reduce", "tensor", Use::kReduce);
  check_rank(root, "reduce", "root");
  check_op(op, tensor, "reduce");
  Call call{describe("reduce", tensor, fmt::format("root {}, {}", root, reduce_op_name(op))),
            CallSignature{Collective::kReduce, tensor.dtype(), tensor.numel(), root, op}};
  return with_result(dispatch(std::move(call), [&](Call c) { return reduce_impl(tensor, root, op, std::move(c)); }),
                     tensor);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                   ReduceOp op) {
  check_tensor(output, "reduce_scatter", "output", Use::kReduce);
  TDDP_CHECK(static_cast<int>(inputs.size()) == size_, "{}{} inputs given for a group of {}", prefix("reduce_scatter"),
             inputs.size(), size_);
  for (size_t r = 0; r < inputs.size(); ++r)
    check_like(inputs[r], output, "reduce_scatter", fmt::format("input {}", r));
  check_op(op, output, "reduce_scatter");
  Call call{describe("reduce_scatter", output, reduce_op_name(op)),
            CallSignature{Collective::kReduceScatter, output.dtype(), output.numel(), -1, op}};
  return with_result(
      dispatch(std::move(call), [&](Call c) { return reduce_scatter_impl(output, inputs, op, std::move(c)); }), output);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_widened(const Tensor& sums, const Tensor& values,
                                                           const Widen& widen) {
  check_tensor(sums, "reduce_scatter", "sums", Use::kReduce);
  check_tensor(values, "reduce_scatter", "values", Use::kMove);
  TDDP_CHECK(sums.dim() == 1 && values.dim() == 1 && sums.is_contiguous() && values.is_contiguous() &&
                 sums.numel() == values.numel() && sums.numel() % size_ == 0 && sums.device().type == tensor::kCPU &&
                 values.device().type == tensor::kCPU,
             "{}expected flat contiguous CPU sums and values of one size, {} blocks of it; got {} and {} elements",
             prefix("reduce_scatter"), size_, sums.numel(), values.numel());
  const int64_t block = sums.numel() / size_;
  Call call{describe("reduce_scatter_widened", values, fmt::format("into {}", tensor::dtype_name(sums.dtype()))),
            CallSignature{Collective::kReduceScatterWidened, sums.dtype(), block, -1, ReduceOp::kSum}};
  std::shared_ptr<Work> work =
      dispatch(std::move(call), [&](Call c) { return reduce_scatter_widened_impl(sums, values, widen, std::move(c)); });
  if (work) return with_result(work, sums);
  // The general form: every block widened here, then the sums reduce-scattered in place.
  widen(sums.raw_data_ptr(), values.raw_data_ptr(), static_cast<size_t>(sums.numel()), false);
  std::vector<Tensor> blocks;
  for (int r = 0; r < size_; ++r) blocks.push_back(sums.narrow(0, r * block, block));
  return reduce_scatter(blocks[static_cast<size_t>(rank_)], blocks, ReduceOp::kSum);
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  Call call{fmt::format("barrier (rank {} of {})", rank_, size_),
            CallSignature{Collective::kBarrier, tensor::kInt64, 0, -1, std::nullopt}};
  return dispatch(std::move(call), [&](Call c) { return barrier_impl(std::move(c)); });
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  check_tensor(tensor, "send", "tensor", Use::kPointToPoint);
  check_peer(dst, tag, "send", "destination");
  return send_impl(tensor, dst, tag,
                   Call{describe("send", tensor, fmt::format("to {}, tag {}", dst, tag)), std::nullopt});
}

std::shared_ptr<Work> ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  check_tensor(tensor, "recv", "tensor", Use::kPointToPoint);
  check_peer(src, tag, "recv", "source");
  return with_result(recv_impl(tensor, src, tag,
                               Call{describe("recv", tensor, fmt::format("from {}, tag {}", src, tag)), std::nullopt}),
                     tensor);
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  TDDP_CHECK(!ranks.empty(), "new_group: the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    TDDP_CHECK(ranks[i] >= 0 && ranks[i] < size_, "new_group: rank {} is not in this group of {}", ranks[i], size_);
    TDDP_CHECK(i == 0 || ranks[i] > ranks[i - 1], "new_group: ranks must be sorted and unique, got [{}]",
               fmt::join(ranks, ", "));
  }
  const int id = groups_created_++;  // the same on every rank: new_group is called in the same order
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  return create_subgroup(id, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()));
}

void exchange_records_by_sum(std::vector<CallHook::Record>& records, int rank, Tensor& buffer,
                             const std::function<void(const Tensor&)>& sum) {
  constexpr size_t kWords = std::tuple_size_v<CallHook::Record>;
  const auto numel = static_cast<int64_t>(records.size() * kWords);
  if (!buffer.defined() || buffer.numel() != numel) buffer = tensor::zeros({numel}, tensor::kInt64);
  buffer.zero_();
  const CallHook::Record& mine = records[static_cast<size_t>(rank)];
  std::copy(mine.begin(), mine.end(), buffer.data_ptr<int64_t>() + static_cast<size_t>(rank) * kWords);
  sum(buffer);
  for (size_t r = 0; r < records.size(); ++r)
    std::copy_n(buffer.data_ptr<int64_t>() + r * kWords, kWords, records[r].begin());
}

}  // namespace tinyddp::comm
