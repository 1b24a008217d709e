// The backward engine: runs the graph from some roots, calling each node once all the
// gradients flowing into it have arrived, and then the callbacks queued during the pass.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

struct Edge;
class Node;
struct NodeState;

class Engine {
 public:
  // For each root (a tensor that requires grad) with its gradient (undefined: 1 for a
  // one-element root): counts the dependencies of every node reachable from the roots, then
  // runs ready nodes, highest sequence number first (gradient accumulators first of all),
  // summing gradients that meet at a node (in place into one of them when nothing else holds
  // it, as PyTorch). Saved tensors are freed unless retain_graph.
  // Runs with grad mode off, or on with create_graph: then every gradient computed (and .grad)
  // has a graph of its own, for double backward. Reentrant: a node's backward (or a hook) may
  // run another backward or grad to completion (utils::checkpoint does), up to 64 deep.
  static void backward(const std::vector<tensor::Tensor>& roots, const std::vector<tensor::Tensor>& grad_roots,
                       bool retain_graph = false, bool create_graph = false);
  // torch.autograd.grad: the gradients of `outputs` (weighted by grad_outputs, as backward's
  // roots) with respect to `inputs`, returned instead of accumulated: no .grad is written and
  // only the nodes on a path to an input run. An input the outputs do not reach is an error,
  // or (allow_unused) an undefined gradient. create_graph as backward's.
  static std::vector<tensor::Tensor> grad(const std::vector<tensor::Tensor>& outputs,
                                          const std::vector<tensor::Tensor>& inputs,
                                          const std::vector<tensor::Tensor>& grad_outputs = {},
                                          bool retain_graph = false, bool create_graph = false,
                                          bool allow_unused = false);

  // Queues `callback` to run once after every node of the current backward pass has run (in
  // queueing order; callbacks may queue more). Only callable during backward, e.g. from a
  // hook: this is where DDP's Reducer finishes its work.
  static void queue_callback(std::function<void()> callback);

  // True while a backward pass runs on this thread.
  static bool in_backward();
  // The backward passes running on this thread: 0 outside backward, 1 in one, 2 in a pass a
  // node's backward started inside another (reentrant checkpointing), and so on.
  static size_t pass_depth();
  // When the backward pass running on this thread started (for DDP's statistics).
  static std::chrono::steady_clock::time_point backward_started_at();

 private:
  // grad()'s inputs: which node's total gradient is input k's, the results, and the nodes
  // that lead to one of them (only those run).
  struct Capture {
    std::unordered_map<Node*, std::vector<size_t>> at;
    std::vector<tensor::Tensor> grads;
    std::unordered_set<Node*> needed;
  };
  // The pass of backward and grad (capture: grad's).
  static void execute(const std::vector<tensor::Tensor>& roots, const std::vector<tensor::Tensor>& grad_roots,
                      bool retain_graph, bool create_graph, Capture* capture);
  static void mark_needed(Capture& capture, const std::vector<std::shared_ptr<Node>>& alive);
  // Takes a ready node's gradient where it is an input's; false when the node must not run.
  static bool take_captured(Capture& capture, Node* node);
  // A node's input buffer; a ready node run (one input: pre-hooks, apply, post-hooks; several:
  // apply_many with all of them), returning one gradient per next edge.
  static tensor::Tensor& buffer_of(Node* node, uint32_t input_nr);
  static std::vector<tensor::Tensor> run_one(Node* node, bool retain_graph);
  static std::vector<tensor::Tensor> run_many(Node* node, bool retain_graph);
  // backward's step 2: sets each node's count of incoming edges reachable from the seeds
  // (the root edges with their gradients) and collects the nodes into `alive`.
  // A pass's end: the enclosing passes' state set aside by count_dependencies put back.
  static void end_pass(std::vector<NodeState>& set_aside);
  // Returns the pass's number; the state of enclosing passes found in the nodes goes to
  // `set_aside` (engine.cc's NodeState).
  static uint64_t count_dependencies(const std::vector<std::pair<Edge, tensor::Tensor>>& seeds,
                                     std::vector<std::shared_ptr<Node>>& alive, std::vector<NodeState>& set_aside);
};

// torch::autograd::grad, as libtorch spells it: Engine::grad, retain_graph defaulting to
// create_graph. With create_graph the gradients returned have a graph of their own (double
// backward: a gradient penalty, a Hessian-vector product).
std::vector<tensor::Tensor> grad(const std::vector<tensor::Tensor>& outputs, const std::vector<tensor::Tensor>& inputs,
                                 const std::vector<tensor::Tensor>& grad_outputs = {},
                                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                                 bool allow_unused = false);

}  // namespace tinyddp::autograd
