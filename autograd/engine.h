// The backward engine: runs the graph from some roots, calling each node once all the
// gradients flowing into it have arrived, and then the callbacks queued during the pass.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

struct Edge;
class Node;

class Engine {
 public:
  // For each root (a tensor that requires grad) with its gradient (undefined: 1 for a
  // one-element root): counts the dependencies of every node reachable from the roots, then
  // runs ready nodes, highest sequence number first (gradient accumulators first of all),
  // summing gradients that meet at a node (in place into one of them when nothing else holds
  // it, as PyTorch). Saved tensors are freed unless retain_graph.
  // Runs with grad mode off. Not reentrant: a hook may not start another backward.
  static void backward(const std::vector<tensor::Tensor>& roots, const std::vector<tensor::Tensor>& grad_roots,
                       bool retain_graph = false);

  // Queues `callback` to run once after every node of the current backward pass has run (in
  // queueing order; callbacks may queue more). Only callable during backward, e.g. from a
  // hook: this is where DDP's Reducer finishes its work.
  static void queue_callback(std::function<void()> callback);

  // True while a backward pass runs on this thread.
  static bool in_backward();
  // When the backward pass running on this thread started (for DDP's statistics).
  static std::chrono::steady_clock::time_point backward_started_at();

 private:
  // backward's step 2: sets each node's count of incoming edges reachable from the seeds
  // (the root edges with their gradients) and collects the nodes into `alive`.
  // A node's input buffer; a ready node run (one input: pre-hooks, apply, post-hooks; several:
  // apply_many with all of them), returning one gradient per next edge.
  static tensor::Tensor& buffer_of(Node* node, uint32_t input_nr);
  static std::vector<tensor::Tensor> run_one(Node* node, bool retain_graph);
  static std::vector<tensor::Tensor> run_many(Node* node, bool retain_graph);
  static void count_dependencies(const std::vector<std::pair<Edge, tensor::Tensor>>& seeds,
                                 std::vector<std::shared_ptr<Node>>& alive);
};

}  // namespace tinyddp::autograd
