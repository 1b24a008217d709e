// The graph: Node (a backward function with next_edges, a sequence number and a name),
// Edge (node + input index), hooks with removable handles, FunctionNode, the node that tensor
// ops record (tensor/graph.h) with their backward closure, and MultiOutputNode, the one node
// of an op with several outputs.
#pragma once

#include <cstdint>
#include <forward_list>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

using tensor::Shape;
using tensor::Tensor;

class Node;

// Where a gradient goes next: input `input_nr` of `function` (an op's node has one input, the
// gradient of its single output, so input_nr is 0; only the node of a module's backward hooks,
// autograd/backward_hook.h, and that of an op with several outputs, MultiOutputNode below,
// have several). Invalid when the tensor it stands for does not require grad. `shape` is that
// tensor's shape, which the gradient sent along the edge must have (FunctionNode checks it).
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  Shape shape;
  bool is_valid() const { return function != nullptr; }
};

// Removes the hook it was returned for; remove() is idempotent and safe after the node died.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove();

 private:
  std::function<void()> remover_;
};

// A pre-hook sees the gradient flowing into a node and may return a replacement (an
// undefined return keeps it). A post-hook runs after the node has run (AccumulateGrad's
// post-hooks therefore see the new .grad): DDP's "this parameter's gradient is ready".
using PreHook = std::function<Tensor(const Tensor& grad)>;
using PostHook = std::function<void()>;

class Engine;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(std::string name, std::vector<Edge> next_edges, uint64_t sequence_nr);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  // Creation order; the engine runs ready nodes with higher numbers first.
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }

  // Gradient of this node's output -> one gradient per next edge (undefined where none).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // A node with several inputs (the gradients of several tensors at once) says how many and
  // gets them all in one call, undefined where none arrived; every other node has one.
  virtual uint32_t num_inputs() const { return 1; }
  virtual std::vector<Tensor> apply_many(std::vector<Tensor> grads) { return apply(grads.front()); }
  // Frees the tensors saved for backward (after a backward without retain_graph).
  virtual void release_saved() {}

  RemovableHandle add_pre_hook(PreHook hook);
  RemovableHandle add_post_hook(PostHook hook);
  bool has_pre_hooks() const { return !pre_hooks_.empty(); }
  // Used by the engine: pre-hooks in registration order, each seeing the previous result.
  Tensor run_pre_hooks(Tensor grad);
  void run_post_hooks();

 private:
  std::string name_;
  std::vector<Edge> next_edges_;
  uint64_t sequence_nr_;
  uint64_t next_hook_id_ = 0;
  std::vector<std::pair<uint64_t, PreHook>> pre_hooks_;
  std::vector<std::pair<uint64_t, PostHook>> post_hooks_;

  // Scratch state of the backward pass running through this node (engine.cc), kept here
  // rather than in per-pass hash maps: one pass at a time may run through a given node.
  friend class Engine;
  uint64_t pass_ = 0;                  // the pass that last initialised the fields below
  int pending_ = 0;                    // incoming edges that have not delivered yet
  Tensor buffer_;                      // sum of the gradients delivered so far (input 0)
  std::vector<Tensor> extra_buffers_;  // inputs 1.. of a node with several
};

// A fresh sequence number (monotonic across the process).
uint64_t next_sequence_nr();

// The node a differentiable tensor op records: its backward closure (checked against the
// input shapes on its edges) and a flag once its saved tensors are freed. With grad mode on
// (a backward with create_graph) the closure's own ops are recorded: the gradients it returns
// get a graph of their own, and its saved output comes back with this node as grad_fn.
class FunctionNode final : public Node, public tensor::RunningNode {
 public:
  FunctionNode(std::string name, std::vector<Edge> next_edges, tensor::BackwardFn backward);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release_saved() override;
  const Tensor& reattach_output(const Tensor& output_data, uint32_t output_nr) const override;

 private:
  tensor::BackwardFn backward_;
  bool released_ = false;
  // The saved outputs given back with this node as grad_fn while the formula runs under
  // create_graph (a list: references to them stay valid as more are added, and an empty one
  // allocates nothing); cleared after.
  mutable std::forward_list<Tensor> reattached_;
};

// A one-input node `name` that hands its gradient, unchanged, to input `input_nr` of `target`
// (checked against `shape`): the grad_fn of each tensor a node of several inputs stands for.
std::shared_ptr<FunctionNode> identity_node(std::string name, std::shared_ptr<Node> target, uint32_t input_nr,
                                            Shape shape);

// The node of an op with several outputs (split, unbind, a user's Function; tensor::record_multi_op):
// input k is the gradient of output k, and the formula runs once with all of them (undefined
// where none arrived). Each output's grad_fn is a one-input identity node, named as the op, whose
// edge leads to input k here, so a hook or retain_grad() on one output sees that output's
// gradient alone. Under create_graph a saved output k comes back behind such an identity node.
class MultiOutputNode final : public Node, public tensor::RunningNode {
 public:
  MultiOutputNode(std::string name, std::vector<Edge> next_edges, uint32_t num_outputs,
                  tensor::MultiBackwardFn backward);
  uint32_t num_inputs() const override { return num_outputs_; }
  std::vector<Tensor> apply(const Tensor& grad_output) override { return apply_many({grad_output}); }
  std::vector<Tensor> apply_many(std::vector<Tensor> grads) override;
  void release_saved() override;
  const Tensor& reattach_output(const Tensor& output_data, uint32_t output_nr) const override;

 private:
  uint32_t num_outputs_;
  tensor::MultiBackwardFn backward_;
  bool released_ = false;
  mutable std::forward_list<Tensor> reattached_;  // as FunctionNode's
};

}  // namespace tinyddp::autograd
