// through_backward_hook (backward_hook.h): the node with one input per tensor, and the
// one-input identity nodes that put each returned tensor in front of it.
#include "tinyddp/autograd/backward_hook.h"

#include <memory>
#include <utility>

#include "tinyddp/autograd/meta.h"
#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::autograd {

namespace {

// The node: input k is the gradient of tensors[k] (for those that require grad), its next
// edge k where tensors[k]'s gradient goes on.
class BackwardHookNode final : public Node {
 public:
  BackwardHookNode(std::vector<Edge> edges, std::vector<size_t> positions, size_t count, GradsHook on_grads)
      : Node("BackwardHookFunctionBackward", std::move(edges), next_sequence_nr()), positions_(std::move(positions)),
        count_(count), on_grads_(std::move(on_grads)) {}
  uint32_t num_inputs() const override { return static_cast<uint32_t>(positions_.size()); }
  std::vector<Tensor> apply(const Tensor& grad) override { return apply_many({grad}); }
  std::vector<Tensor> apply_many(std::vector<Tensor> grads) override {
    std::vector<Tensor> all(count_);  // aligned to the tensors given, undefined for the others
    for (size_t k = 0; k < positions_.size(); ++k) all[positions_[k]] = std::move(grads[k]);
    std::vector<Tensor> out = on_grads_(std::move(all));
    TDDP_CHECK(out.size() == count_, "backward hook: returned {} gradients for {} tensors", out.size(), count_);
    std::vector<Tensor> next;
    for (size_t k = 0; k < positions_.size(); ++k) {
      Tensor& g = out[positions_[k]];
      const Shape& shape = next_edges()[k].shape;
      TDDP_CHECK(!g.defined() || g.sizes() == shape,
                 "backward hook: the gradient returned for tensor {} has shape {} but the tensor has shape {}",
                 positions_[k], tensor::format_shape(g.sizes()), tensor::format_shape(shape));
      next.push_back(std::move(g));
    }
    return next;
  }

 private:
  std::vector<size_t> positions_;  // which of the tensors each input stands for
  size_t count_;
  GradsHook on_grads_;
};

}  // namespace

std::vector<Tensor> through_backward_hook(const std::vector<Tensor>& tensors, GradsHook on_grads) {
  std::vector<Edge> edges;
  std::vector<size_t> positions;
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (!tensor::GradMode::is_enabled() || !tensors[k].defined() || !tensors[k].requires_grad()) continue;
    edges.push_back(gradient_edge(tensors[k]));
    edges.back().shape = tensors[k].sizes();
    positions.push_back(k);
  }
  if (positions.empty()) return tensors;
  auto node = std::make_shared<BackwardHookNode>(std::move(edges), positions, tensors.size(), std::move(on_grads));
  std::vector<Tensor> out = tensors;
  for (size_t k = 0; k < positions.size(); ++k) {
    const Tensor& t = tensors[positions[k]];
    Tensor alias = t.detach();  // the same data, a tensor of its own
    // grad -> input k of the node
    ensure_meta(alias).grad_fn_ =
        identity_node("BackwardHookFunctionBackward", node, static_cast<uint32_t>(k), t.sizes());
    out[positions[k]] = alias;
  }
  return out;
}

}  // namespace tinyddp::autograd
