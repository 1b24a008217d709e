// The autograd methods of tensor::Tensor (declared in tensor/tensor.h, defined here so that
// the tensor layer never depends on the engine), as libtorch defines them in its autograd.
#include "tinyddp/autograd/accumulate_grad.h"
#include "tinyddp/autograd/engine.h"
#include "tinyddp/autograd/meta.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using autograd::AutogradMeta;
using autograd::ensure_meta;
using autograd::meta_of;

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  TDDP_CHECK(is_leaf(),
             "requires_grad_: only leaf tensors can change requires_grad (this one was produced by {}); use detach() "
             "to get a leaf",
             grad_fn()->name());
  TDDP_CHECK(!requires_grad || is_floating_point(),
             "requires_grad_: only floating-point tensors can require gradients, got dtype {}", dtype_name(dtype()));
  if (requires_grad || meta_of(*this) != nullptr) ensure_meta(*this).requires_grad_ = requires_grad;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  const AutogradMeta* meta = meta_of(*this);
  return meta != nullptr ? meta->grad_ : undefined;
}

Tensor& Tensor::mutable_grad() const { return ensure_meta(*this).grad_; }

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* meta = meta_of(*this);
  return meta != nullptr ? meta->grad_fn_ : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::retain_grad() const {
  TDDP_CHECK(requires_grad(), "retain_grad: cannot retain the gradient of a tensor that does not require grad");
  if (is_leaf()) return;  // leaves always keep theirs
  AutogradMeta& meta = ensure_meta(*this);
  if (meta.retains_grad_) return;
  meta.retains_grad_ = true;
  // A pre-hook on grad_fn sees the total gradient of this tensor; keep (accumulate) it in
  // .grad. Weak: the tensor owns grad_fn, which owns this hook.
  meta.grad_fn_->add_pre_hook([weak = std::weak_ptr<TensorImpl>(impl_ptr())](const Tensor& g) {
    if (std::shared_ptr<TensorImpl> impl = weak.lock()) {
      Tensor& slot = meta_of(Tensor(impl))->grad_;
      slot = slot.defined() ? tensor::add(slot, g) : g.clone();
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::Engine::backward({*this}, {gradient}, retain_graph.value_or(create_graph), create_graph);
}

std::shared_ptr<autograd::AccumulateGrad> Tensor::grad_accumulator() const {
  TDDP_CHECK(is_leaf(), "grad_accumulator: only leaf tensors have one (this tensor was produced by {})",
             grad_fn()->name());
  TDDP_CHECK(requires_grad(), "grad_accumulator: the tensor does not require grad (call requires_grad_() first)");
  AutogradMeta& meta = ensure_meta(*this);
  if (!meta.grad_accumulator_) meta.grad_accumulator_ = std::make_shared<autograd::AccumulateGrad>(*this);
  return meta.grad_accumulator_;
}

autograd::RemovableHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  TDDP_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  const std::shared_ptr<autograd::Node> node =
      is_leaf() ? std::static_pointer_cast<autograd::Node>(grad_accumulator()) : grad_fn();
  return node->add_pre_hook(std::move(hook));
}

}  // namespace tinyddp::tensor
