// A tensor's autograd metadata (meta.h): made on first use, the edge a gradient flows along
// (the producing node, or the leaf's AccumulateGrad), and record_op, which turns an op's
// backward closure (tensor/graph.h) into a node of the graph.
#include "tinyddp/autograd/meta.h"

#include <span>

namespace tinyddp::autograd {

AutogradMeta* meta_of(const Tensor& t) {
  // Only autograd creates metadata, so the cast is safe.
  return static_cast<AutogradMeta*>(t.autograd_meta());
}

AutogradMeta& ensure_meta(const Tensor& t) {
  if (AutogradMeta* meta = meta_of(t)) return *meta;
  auto meta = std::make_shared<AutogradMeta>();
  AutogradMeta& ref = *meta;
  t.set_autograd_meta(std::move(meta));
  return ref;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  const AutogradMeta* meta = meta_of(t);
  if (meta == nullptr) return {};
  if (meta->grad_fn_) return {meta->grad_fn_, 0, {}};
  if (meta->requires_grad_) return {t.grad_accumulator(), 0, {}};
  return {};
}

namespace {

// The edges of a node over `inputs`, each carrying its input's shape.
std::vector<Edge> edges_to(const Tensor* inputs, size_t num_inputs) {
  std::vector<Edge> edges;
  edges.reserve(num_inputs);
  for (const Tensor& input : std::span<const Tensor>(inputs, num_inputs)) {
    edges.push_back(gradient_edge(input));
    if (input.defined()) edges.back().shape = input.sizes();
  }
  return edges;
}

}  // namespace

void AutogradMeta::record_op(const char* name, const Tensor& output, const Tensor* inputs, size_t num_inputs,
                             tensor::BackwardFn backward) const {
  auto node = std::make_shared<FunctionNode>(name, edges_to(inputs, num_inputs), std::move(backward));
  ensure_meta(output).grad_fn_ = std::move(node);
}

void AutogradMeta::record_multi_op(const char* name, const std::vector<Tensor>& outputs, const Tensor* inputs,
                                   size_t num_inputs, tensor::MultiBackwardFn backward) const {
  auto node = std::make_shared<MultiOutputNode>(name, edges_to(inputs, num_inputs),
                                                static_cast<uint32_t>(outputs.size()), std::move(backward));
  for (size_t k = 0; k < outputs.size(); ++k) {
    // output k's gradient -> input k of the node
    ensure_meta(outputs[k]).grad_fn_ = identity_node(name, node, static_cast<uint32_t>(k), outputs[k].sizes());
  }
}

}  // namespace tinyddp::autograd
