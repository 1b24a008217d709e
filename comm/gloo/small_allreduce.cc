// SmallAllreduce (small_allreduce.h): one of Gloo's algorithm objects per (dtype, op, element
// count), built once and kept, so that a small allreduce sends into registered buffers with no
// negotiation; and the reductions it calls.
#include "tinyddp/comm/gloo/small_allreduce.h"

#include <gloo/allreduce_ring_chunked.h>
#include <gloo/context.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/gloo/element_types.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::comm::detail {

namespace {

// x[i] = x[i] `Op` y[i]: the form of reduction Gloo's algorithm classes call.
template <ReduceOp Op, typename T>
void reduce_into(T* x, const T* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = combine<Op>(x[i], y[i]);
}

template <typename T>
const gloo::ReductionFunction<T>* reduction(ReduceOp op) {
  return with_reduce_op(op, [](auto tag) -> const gloo::ReductionFunction<T>* {
    constexpr ReduceOp kOp = decltype(tag)::value;
    static const gloo::ReductionFunction<T> function(gloo::CUSTOM, &reduce_into<kOp, T>);
    return &function;
  });
}

}  // namespace

SmallAllreduce::SmallAllreduce(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

SmallAllreduce::~SmallAllreduce() = default;

bool SmallAllreduce::takes(tensor::DType dtype, int64_t numel) {
  return dtype != tensor::kBool && numel * static_cast<int64_t>(tensor::element_size(dtype)) <= kMaxBytes;
}

SmallAllreduce::Entry& SmallAllreduce::entry(tensor::DType dtype, ReduceOp op, int64_t numel) {
  const Key key{static_cast<int>(dtype), static_cast<int>(op), numel};
  if (auto found = index_.find(key); found != index_.end()) {
    entries_.splice(entries_.begin(), entries_, found->second);
    return entries_.front().second;
  }
  if (entries_.size() == kMaxEntries) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
  Entry made;
  made.buffer = tensor::empty({numel}, dtype);
  with_element_type(dtype, "allreduce", [&](auto type_tag) {
    using T = decltype(type_tag);
    const std::vector<T*> pointers{static_cast<T*>(made.buffer.raw_data_ptr())};
    const int count = static_cast<int>(numel);
    made.algorithm = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, pointers, count, reduction<T>(op));
  });
  entries_.emplace_front(key, std::move(made));
  index_[key] = entries_.begin();
  return entries_.front().second;
}

void SmallAllreduce::run(const std::vector<Tensor>& tensors, ReduceOp op, int64_t numel) {
  Entry& e = entry(tensors.front().dtype(), op, numel);
  flatten_into(tensors, e.buffer);
  e.algorithm->run();
  if (op == ReduceOp::kAvg) e.buffer.div_(static_cast<double>(context_->size));
  unflatten_into(e.buffer, tensors);
}

}  // namespace tinyddp::comm::detail
