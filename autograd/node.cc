// Node (node.h): its pre- and post-hooks and the handles that remove them, FunctionNode, the
// node an op's backward closure becomes (it runs the closure, then frees what it saved), and
// MultiOutputNode, the same for an op with several outputs.
#include "tinyddp/autograd/node.h"

#include <atomic>

#include "tinyddp/autograd/meta.h"
#include "tinyddp/base/error.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/shape.h"

namespace tinyddp::autograd {

void RemovableHandle::remove() {
  if (remover_) {
    auto remover = std::move(remover_);
    remover_ = nullptr;
    remover();
  }
}

Node::Node(std::string name, std::vector<Edge> next_edges, uint64_t sequence_nr)
    : name_(std::move(name)), next_edges_(std::move(next_edges)), sequence_nr_(sequence_nr) {}

RemovableHandle Node::add_pre_hook(PreHook hook) {
  const uint64_t id = next_hook_id_++;
  pre_hooks_.emplace_back(id, std::move(hook));
  return RemovableHandle([weak = weak_from_this(), id] {
    if (const std::shared_ptr<Node> node = weak.lock()) {
      std::erase_if(node->pre_hooks_, [id](const auto& entry) { return entry.first == id; });
    }
  });
}

RemovableHandle Node::add_post_hook(PostHook hook) {
  const uint64_t id = next_hook_id_++;
  post_hooks_.emplace_back(id, std::move(hook));
  return RemovableHandle([weak = weak_from_this(), id] {
    if (const std::shared_ptr<Node> node = weak.lock()) {
      std::erase_if(node->post_hooks_, [id](const auto& entry) { return entry.first == id; });
    }
  });
}

Tensor Node::run_pre_hooks(Tensor grad) {
  // Copy first: a hook may remove itself (or others) while running.
  const auto hooks = pre_hooks_;
  for (const auto& [id, hook] : hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) {
      TDDP_CHECK(replaced.sizes() == grad.sizes(),
                 "hook on {}: the replacement gradient has shape {} but the gradient has shape {}", name_,
                 tensor::format_shape(replaced.sizes()), tensor::format_shape(grad.sizes()));
      grad = std::move(replaced);
    }
  }
  return grad;
}

void Node::run_post_hooks() {
  const auto hooks = post_hooks_;
  for (const auto& [id, hook] : hooks) hook();
}

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

FunctionNode::FunctionNode(std::string name, std::vector<Edge> next_edges, tensor::BackwardFn backward)
    : Node(std::move(name), std::move(next_edges), next_sequence_nr()), backward_(std::move(backward)) {}

namespace {

void check_not_released(bool released, const Node& node) {
  TDDP_CHECK(!released,
             "{}: trying to backward through the graph a second time, but its saved tensors were freed after the first "
             "backward; pass retain_graph=true to the first backward if you need to run it twice",
             node.name());
}

// What a formula returned for `node`: one gradient per next edge, each of its input's shape,
// and, under create_graph with `grads_have_graph` (a gradient arriving with a graph), with a
// graph of its own.
void check_formula_grads(const Node& node, const std::vector<Tensor>& grads, bool create_graph, bool grads_have_graph) {
  const std::vector<Edge>& edges = node.next_edges();
  TDDP_CHECK(grads.size() == edges.size(), "{}: the backward formula returned {} gradients for {} inputs", node.name(),
             grads.size(), edges.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Shape& expected = edges[i].shape;
    TDDP_CHECK(!grads[i].defined() || grads[i].sizes() == expected,
               "{}: the gradient for input {} has shape {} but the input has shape {}", node.name(), i,
               tensor::format_shape(grads[i].sizes()), tensor::format_shape(expected));
    // A gradient is linear in grad_output: when that has a graph, so must the result, or the
    // formula ran a kernel autograd cannot see and a second derivative would be silently wrong.
    TDDP_CHECK(
        !create_graph || !grads_have_graph || !grads[i].defined() || grads[i].requires_grad() || !edges[i].is_valid(),
        "{}: double backward is not supported (its gradient for input {} was computed without a graph; "
        "create_graph=true needs every backward formula on the path to be differentiable)",
        node.name(), i);
  }
}

// Runs a node's backward formula; under create_graph with `node` running (its saved outputs
// rejoin it through reattach_output), the aliases it handed out dropped once the formula returns.
template <typename Formula>
std::vector<Tensor> run_formula(const tensor::RunningNode* node, std::forward_list<Tensor>& reattached,
                                bool create_graph, const Formula& formula) {
  if (!create_graph) return formula();
  const tensor::RunningNodeScope scope(node);
  struct Clear {
    std::forward_list<Tensor>& list;
    ~Clear() { list.clear(); }
  } clear{reattached};
  return formula();
}

}  // namespace

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  check_not_released(released_, *this);
  const bool create_graph = tensor::GradMode::is_enabled();
  const std::vector<Tensor> grads =
      run_formula(this, reattached_, create_graph, [&] { return backward_(grad_output); });
  check_formula_grads(*this, grads, create_graph, grad_output.requires_grad());
  return grads;
}

const Tensor& FunctionNode::reattach_output(const Tensor& output_data, uint32_t /*output_nr*/) const {
  Tensor alias = output_data.detach();
  ensure_meta(alias).grad_fn_ = std::const_pointer_cast<Node>(shared_from_this());
  return reattached_.emplace_front(std::move(alias));
}

void FunctionNode::release_saved() {
  backward_ = nullptr;  // drops the closure and the SavedTensors it captured
  released_ = true;
}

std::shared_ptr<FunctionNode> identity_node(std::string name, std::shared_ptr<Node> target, uint32_t input_nr,
                                            Shape shape) {
  return std::make_shared<FunctionNode>(std::move(name),
                                        std::vector<Edge>{Edge{std::move(target), input_nr, std::move(shape)}},
                                        [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

MultiOutputNode::MultiOutputNode(std::string name, std::vector<Edge> next_edges, uint32_t num_outputs,
                                 tensor::MultiBackwardFn backward)
    : Node(std::move(name), std::move(next_edges), next_sequence_nr()), num_outputs_(num_outputs),
      backward_(std::move(backward)) {}

std::vector<Tensor> MultiOutputNode::apply_many(std::vector<Tensor> grads) {
  check_not_released(released_, *this);
  bool have_graph = false;
  for (const Tensor& g : grads) have_graph = have_graph || (g.defined() && g.requires_grad());
  const bool create_graph = tensor::GradMode::is_enabled();
  std::vector<Tensor> out = run_formula(this, reattached_, create_graph, [&] { return backward_(grads); });
  check_formula_grads(*this, out, create_graph, have_graph);
  return out;
}

const Tensor& MultiOutputNode::reattach_output(const Tensor& output_data, uint32_t output_nr) const {
  Tensor alias = output_data.detach();
  ensure_meta(alias).grad_fn_ =
      identity_node(name(), std::const_pointer_cast<Node>(shared_from_this()), output_nr, output_data.sizes());
  return reattached_.emplace_front(std::move(alias));
}

void MultiOutputNode::release_saved() {
  backward_ = nullptr;
  released_ = true;
}

}  // namespace tinyddp::autograd
