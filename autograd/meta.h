// AutogradMeta: the per-tensor autograd state behind tensor::AutogradMetaInterface
// (requires_grad flag, .grad, grad_fn, the leaf's AccumulateGrad), and how a tensor becomes
// an edge of the graph.
#pragma once

#include <memory>

#include "tinyddp/autograd/accumulate_grad.h"
#include "tinyddp/autograd/node.h"

namespace tinyddp::autograd {

class AutogradMeta final : public tensor::AutogradMetaInterface {
 public:
  bool requires_grad() const override { return requires_grad_ || grad_fn_ != nullptr; }
  bool has_grad_fn() const override { return grad_fn_ != nullptr; }
  // Creates the FunctionNode for `output` = op(inputs) and makes it output's grad_fn.
  void record_op(const char* name, const Tensor& output, const Tensor* inputs, size_t num_inputs,
                 tensor::BackwardFn backward) const override;
  // One MultiOutputNode for all of `outputs`, each with an identity node in front of it.
  void record_multi_op(const char* name, const std::vector<Tensor>& outputs, const Tensor* inputs, size_t num_inputs,
                       tensor::MultiBackwardFn backward) const override;

  bool requires_grad_ = false;  // set on leaves by requires_grad_()
  Tensor grad_;
  std::shared_ptr<Node> grad_fn_;                     // non-leaves
  std::shared_ptr<AccumulateGrad> grad_accumulator_;  // leaves, created on first use
  bool retains_grad_ = false;
};

// The metadata of `t`, or null for a tensor autograd has never touched.
AutogradMeta* meta_of(const Tensor& t);
// The metadata of `t`, created when missing.
AutogradMeta& ensure_meta(const Tensor& t);
// The edge through which gradient flows into `t`: its grad_fn, its leaf accumulator, or an
// invalid edge when it does not require grad.
Edge gradient_edge(const Tensor& t);

}  // namespace tinyddp::autograd
