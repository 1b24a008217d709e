// AccumulateGrad (accumulate_grad.h): the node at a leaf, which checks each gradient that
// reaches it against the leaf and sums it into .grad (adopting the engine's buffer as .grad
// when nothing else holds it); the engine then runs its post-hooks, DDP's among them. Under
// create_graph (grad mode on) .grad is a recorded copy or sum, so it has a graph of its own.
#include "tinyddp/autograd/accumulate_grad.h"

#include "tinyddp/tensor/ops.h"

namespace tinyddp::autograd {

AccumulateGrad::AccumulateGrad(const Tensor& variable)
    : Node("AccumulateGrad", {}, kSequenceNr), variable_(variable.impl_ptr()) {}

Tensor AccumulateGrad::variable() const {
  std::shared_ptr<tensor::TensorImpl> impl = variable_.lock();
  return impl ? Tensor(std::move(impl)) : Tensor();
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& incoming) {
  const Tensor leaf = variable();
  if (!leaf.defined()) return {};
  TDDP_CHECK(incoming.sizes() == leaf.sizes(), "AccumulateGrad: gradient of shape {} for a leaf of shape {}",
             tensor::format_shape(incoming.sizes()), tensor::format_shape(leaf.sizes()));
  TDDP_CHECK(incoming.dtype() == leaf.dtype() && incoming.device() == leaf.device(),
             "AccumulateGrad: gradient is {} on {} but the leaf is {} on {}", tensor::dtype_name(incoming.dtype()),
             incoming.device().str(), tensor::dtype_name(leaf.dtype()), leaf.device().str());
  Tensor& grad = leaf.mutable_grad();
  if (!grad.defined()) {
    // The engine's buffer is the only holder (use_count 1 here), no view shares its storage and
    // it is laid out as the leaf (PyTorch's layout contract: .grad in the leaf's memory
    // format): adopt it as .grad instead of copying.
    const tensor::MemoryFormat layout = leaf.suggest_memory_format();
    const bool stealable = incoming.use_count() == 1 && incoming.storage().use_count() == 1 &&
                           incoming.is_contiguous(layout) && incoming.storage_offset() == 0 &&
                           !incoming.requires_grad();
    grad = stealable ? incoming : incoming.clone(layout);
  } else if (tensor::GradMode::is_enabled()) {
    grad = tensor::add(grad, incoming);  // create_graph: .grad keeps the sum's graph (out of place)
  } else {
    grad.add_(incoming);
  }
  return {};
}

}  // namespace tinyddp::autograd
