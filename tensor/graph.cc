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

void record_op(const char* name, const Tensor& output, std::initializer_list<Tensor> inputs, BackwardFn backward) {
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      // Any tracked input's metadata can build the node; the first one does.
      input.autograd_meta()->record_op(name, output, inputs.begin(), inputs.size(), std::move(backward));
      return;
    }
  }
  throw Error(fmt::format("record_op({}): no input requires grad", name));
}

SavedTensor::SavedTensor(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  data_ = is_output ? t.detach() : t;
  version_ = t.storage().version();
}

const Tensor& SavedTensor::get(const char* node) const {
  TDDP_CHECK(!data_.defined() || data_.storage().version() == version_,
             "{}: one of the tensors needed for gradient computation has been modified by an in-place operation "
             "(storage version {} when saved, {} now); clone() it before modifying it",
             node, version_, data_.defined() ? data_.storage().version() : 0);
  return data_;
}

}  // namespace tinyddp::tensor
