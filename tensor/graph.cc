// record_op, needs_grad and SavedTensor: the tensor side of the autograd seam.
#include "tinyddp/tensor/graph.h"

namespace tinyddp::tensor {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

namespace {

void record(const char* name, const Tensor& output, const Tensor* inputs, size_t num_inputs, BackwardFn backward) {
  for (size_t i = 0; i < num_inputs; ++i) {
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      // Any tracked input's metadata can build the node; the first one does.
      inputs[i].autograd_meta()->record_op(name, output, inputs, num_inputs, std::move(backward));
      return;
    }
  }
  throw Error(fmt::format("record_op({}): no input requires grad", name));
}

}  // namespace

void record_op(const char* name, const Tensor& output, std::initializer_list<Tensor> inputs, BackwardFn backward) {
  record(name, output, inputs.begin(), inputs.size(), std::move(backward));
}

void record_op(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  record(name, output, inputs.data(), inputs.size(), std::move(backward));
}

namespace {
thread_local const RunningNode* running_node = nullptr;
}  // namespace

RunningNodeScope::RunningNodeScope(const RunningNode* node) : previous_(running_node) { running_node = node; }
RunningNodeScope::~RunningNodeScope() { running_node = previous_; }

SavedTensor::SavedTensor(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  data_ = is_output ? t.detach() : t;
  version_ = t.storage().version();
  is_output_ = is_output;
}

const Tensor& SavedTensor::get(const char* node) const {
  TDDP_CHECK(!data_.defined() || data_.storage().version() == version_,
             "{}: one of the tensors needed for gradient computation has been modified by an in-place operation "
             "(storage version {} when saved, {} now); clone() it before modifying it",
             node, version_, data_.defined() ? data_.storage().version() : 0);
  if (is_output_ && running_node != nullptr && data_.defined()) return running_node->reattach_output(data_);
  return data_;
}

}  // namespace tinyddp::tensor
