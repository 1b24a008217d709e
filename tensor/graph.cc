// record_op, needs_grad and SavedTensor: the tensor side of the autograd seam.
#include "tinyddp/tensor/graph.h"

#include <fmt/format.h>

namespace tinyddp::tensor {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

Tensor live_view_base(const Tensor& self) {
  if (!self.impl()->is_view) return Tensor();
  std::shared_ptr<TensorImpl> base = self.impl()->view_base.lock();
  if (!base || !base->storage.is_same(self.storage())) return Tensor();
  return Tensor(std::move(base));
}

bool writes_into_history(const Tensor& self) {
  if (!GradMode::is_enabled() || !self.defined()) return false;  // (an undefined self: the op's own error)
  if (self.requires_grad()) return true;
  const Tensor base = live_view_base(self);
  return base.defined() && base.requires_grad();
}

namespace {

// `input`, a view in the graph, taken before an in-place write into its storage: its history
// does not hold the change. Rebuilt from its base's, which does (as PyTorch regenerates a
// view's grad_fn); without a live base, an error rather than a wrong gradient.
void check_view_current(const char* name, const Tensor& input) {
  TensorImpl& impl = *input.impl();
  if (!impl.is_view || impl.storage.version() == impl.view_version || !input.autograd_meta()->has_grad_fn()) return;
  if (const Tensor base = live_view_base(input); base.defined() && base.requires_grad()) {
    const Tensor again = base.as_strided(impl.sizes, impl.strides, impl.storage_offset);
    input.set_autograd_meta(again.impl()->autograd_meta);
    impl.view_version = impl.storage.version();
    return;
  }
  throw Error(
      fmt::format("{}: an input ({} {}) is a view taken before its storage was modified by an in-place "
                  "operation; its gradient would miss that change: take the view after the in-place op, or "
                  "clone() it before",
                  name, dtype_name(impl.dtype), format_shape(impl.sizes)));
}

// The metadata of the first input that requires grad (any tracked input's can build the
// node), after each such input's history is brought up to date.
const AutogradMetaInterface& recorder(const char* name, const Tensor* inputs, size_t num_inputs) {
  for (size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) check_view_current(name, inputs[i]);
  }
  for (size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) return *inputs[i].autograd_meta();
  }
  throw Error(fmt::format("record_op({}): no input requires grad", name));
}

void record(const char* name, const Tensor& output, const Tensor* inputs, size_t num_inputs, BackwardFn backward) {
  recorder(name, inputs, num_inputs).record_op(name, output, inputs, num_inputs, std::move(backward));
}

}  // namespace

void record_op(const char* name, const Tensor& output, std::initializer_list<Tensor> inputs, BackwardFn backward) {
  record(name, output, inputs.begin(), inputs.size(), std::move(backward));
}

void record_op(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  record(name, output, inputs.data(), inputs.size(), std::move(backward));
}

void record_multi_op(const char* name, const std::vector<Tensor>& outputs, std::initializer_list<Tensor> inputs,
                     MultiBackwardFn backward) {
  recorder(name, inputs.begin(), inputs.size())
      .record_multi_op(name, outputs, inputs.begin(), inputs.size(), std::move(backward));
}

void record_multi_op(const char* name, const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                     MultiBackwardFn backward) {
  recorder(name, inputs.data(), inputs.size())
      .record_multi_op(name, outputs, inputs.data(), inputs.size(), std::move(backward));
}

namespace {
thread_local const RunningNode* running_node = nullptr;
}  // namespace

RunningNodeScope::RunningNodeScope(const RunningNode* node) : previous_(running_node) { running_node = node; }
RunningNodeScope::~RunningNodeScope() { running_node = previous_; }

namespace {
thread_local const Storage* save_copies_of = nullptr;  // SaveCopiesGuard's storage
}  // namespace

SaveCopiesGuard::SaveCopiesGuard(const Storage& storage) : previous_(save_copies_of) { save_copies_of = &storage; }
SaveCopiesGuard::~SaveCopiesGuard() { save_copies_of = previous_; }

namespace {
thread_local WeightGradientSink* weight_sink = nullptr;
}  // namespace

WeightGradientSinkScope::WeightGradientSinkScope(WeightGradientSink* sink) : previous_(weight_sink) {
  weight_sink = sink;
}
WeightGradientSinkScope::~WeightGradientSinkScope() { weight_sink = previous_; }
WeightGradientSink* weight_gradient_sink() { return weight_sink; }

SavedTensor::SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr) {
  if (!t.defined()) return;
  data_ = is_output ? t.detach() : t;
  if (save_copies_of != nullptr && t.storage().is_same(*save_copies_of)) {
    const Storage* watched = save_copies_of;
    save_copies_of = nullptr;  // the copy's own recording saves nothing of it
    data_ = data_.clone();     // an input's copy keeps its history (CloneBackward)
    save_copies_of = watched;
  }
  version_ = data_.storage().version();
  is_output_ = is_output;
  output_nr_ = output_nr;
}

const Tensor& SavedTensor::get(const char* node) const {
  TDDP_CHECK(!data_.defined() || data_.storage().version() == version_,
             "{}: one of the tensors needed for gradient computation has been modified by an in-place operation: "
             "[{} {}], saved at version {}, is at version {} now; clone() it before modifying it, or use the "
             "out-of-place op",
             node, data_.defined() ? dtype_name(data_.dtype()) : "", data_.defined() ? format_shape(data_.sizes()) : "",
             version_, data_.defined() ? data_.storage().version() : 0);
  if (is_output_ && running_node != nullptr && data_.defined()) return running_node->reattach_output(data_, output_nr_);
  return data_;
}

}  // namespace tinyddp::tensor
