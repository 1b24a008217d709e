// Engine::backward: dependency counting, a deterministic ready queue, input buffers, and
// final callbacks. A backward may start inside another on the same thread (a node's backward
// calling backward or grad: reentrant checkpointing); the counters and buffers live in the
// nodes, and a nested pass sets aside and restores the enclosing passes' state in the nodes
// they share.
#include "tinyddp/autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <queue>

#include "tinyddp/autograd/meta.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::autograd {

namespace {

struct GraphTask {
  std::vector<std::function<void()>> callbacks;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

thread_local GraphTask* current_task = nullptr;

// Sets current_task for the duration of a backward and restores the enclosing pass's (a
// backward started from inside another: reentrant checkpointing) on any exit.
class TaskScope {
 public:
  explicit TaskScope(GraphTask* task) : previous_(current_task) { current_task = task; }
  ~TaskScope() { current_task = previous_; }
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  GraphTask* previous_;
};

// The passes running on this thread, outermost first: a pass started inside another (a node's
// backward calling backward or grad) finds the enclosing passes' counters and buffers in the
// nodes both reach (a parameter's accumulator), keeps them aside and puts them back when it
// ends, so the enclosing pass goes on as if nothing had run. Bounded, as a recursion.
constexpr size_t kMaxPassDepth = 64;
thread_local std::vector<uint64_t> running_passes;

// Whether `t` may hold the sum of itself and `other` in place: the engine holds the only
// reference to it and to its memory (no view, hook, saved tensor or user shares it), it is
// dense, and the sum keeps its dtype, shape and device.
bool can_sum_into(const Tensor& t, const Tensor& other) {
  return t.use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous() && t.dtype() == other.dtype() &&
         t.sizes() == other.sizes() && t.device() == other.device();
}

// Sums a gradient into a node's input buffer. As PyTorch's InputBuffer, a buffer (or an
// arriving gradient) that nothing else references takes the sum in place instead of a new
// tensor being allocated: the same bits, as a + b == b + a.
// Under create_graph the sum is a recorded op, out of place.
void accumulate(Tensor& buffer, Tensor grad, bool create_graph) {
  if (!buffer.defined()) {
    buffer = std::move(grad);
  } else if (create_graph) {
    buffer = tensor::add(buffer, grad);
  } else if (can_sum_into(buffer, grad)) {
    buffer.add_(grad);
  } else if (can_sum_into(grad, buffer)) {
    grad.add_(buffer);
    buffer = std::move(grad);
  } else {
    buffer = tensor::add(buffer, grad);
  }
}

// Ready nodes ordered by sequence number (higher first), then by the order they became
// ready (earlier first), so that the run order never depends on pointer values.
struct ReadyEntry {
  uint64_t sequence_nr;
  uint64_t arrival;
  Node* node;
  bool operator<(const ReadyEntry& other) const {
    if (sequence_nr != other.sequence_nr) return sequence_nr < other.sequence_nr;
    return arrival > other.arrival;
  }
};

// The gradient for each root: the given one (checked against the root) or 1 for a
// one-element root.
Tensor root_gradient(const Tensor& root, const Tensor& given, size_t index) {
  if (!given.defined()) {
    TDDP_CHECK(root.numel() == 1,
               "backward: a gradient can be created implicitly only for one-element outputs, but root {} has shape {}; "
               "pass the gradient explicitly",
               index, tensor::format_shape(root.sizes()));
    return tensor::ones_like(root);
  }
  TDDP_CHECK(given.sizes() == root.sizes(), "backward: the gradient for root {} has shape {} but the root has shape {}",
             index, tensor::format_shape(given.sizes()), tensor::format_shape(root.sizes()));
  TDDP_CHECK(given.dtype() == root.dtype() && given.device() == root.device(),
             "backward: the gradient for root {} is {} on {} but the root is {} on {}", index,
             tensor::dtype_name(given.dtype()), given.device().str(), tensor::dtype_name(root.dtype()),
             root.device().str());
  return given;
}

// Each root's edge into the graph and its gradient.
std::vector<std::pair<Edge, Tensor>> root_edges(const std::vector<Tensor>& roots,
                                                const std::vector<Tensor>& grad_roots) {
  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    TDDP_CHECK(roots[i].defined(), "backward: root {} is an undefined tensor", i);
    Edge edge = gradient_edge(roots[i]);
    TDDP_CHECK(edge.is_valid(), "backward: root {} (shape {}) does not require grad and has no grad_fn", i,
               tensor::format_shape(roots[i].sizes()));
    seeds.emplace_back(std::move(edge), root_gradient(roots[i], grad_roots.empty() ? Tensor() : grad_roots[i], i));
  }
  return seeds;
}

}  // namespace

// A node's counters and buffers as an enclosing pass left them (count_dependencies).
struct NodeState {
  std::shared_ptr<Node> node;
  uint64_t pass;
  int pending;
  Tensor buffer;
  std::vector<Tensor> extra_buffers;
};

// The buffer of `node`'s input `input_nr`.
bool Engine::take_captured(Capture& capture, Node* node) {
  if (const auto it = capture.at.find(node); it != capture.at.end()) {
    for (const size_t k : it->second) capture.grads[k] = node->buffer_;  // the total gradient of input k
  }
  // A leaf's accumulator would write .grad, and a node that leads to no input is not needed.
  if (capture.needed.count(node) == 0) {
    node->buffer_ = Tensor();
    node->extra_buffers_.clear();
    return false;
  }
  return true;
}

Tensor& Engine::buffer_of(Node* node, uint32_t input_nr) {
  return input_nr == 0 ? node->buffer_ : node->extra_buffers_[input_nr - 1];
}

// Runs a ready node of one input (every op's): its pre-hooks, apply and post-hooks, when a
// gradient arrived. -> one gradient per next edge
std::vector<Tensor> Engine::run_one(Node* node, bool retain_graph) {
  Tensor grad = std::move(node->buffer_);
  node->buffer_ = Tensor();
  if (!grad.defined()) return std::vector<Tensor>(node->next_edges().size());
  grad = node->run_pre_hooks(std::move(grad));
  std::vector<Tensor> outputs = node->apply(grad);
  grad = Tensor();  // let AccumulateGrad's adopted buffer have a single owner
  if (!retain_graph) node->release_saved();
  node->run_post_hooks();
  return outputs;
}

// Runs a ready node of several inputs with all their gradients, when any arrived.
std::vector<Tensor> Engine::run_many(Node* node, bool retain_graph) {
  std::vector<Tensor> grads{std::move(node->buffer_)};
  node->buffer_ = Tensor();
  for (Tensor& b : node->extra_buffers_) grads.push_back(std::move(b));
  node->extra_buffers_.clear();
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return std::vector<Tensor>(node->next_edges().size());
  std::vector<Tensor> outputs = node->apply_many(std::move(grads));
  if (!retain_graph) node->release_saved();
  node->run_post_hooks();
  return outputs;
}

bool Engine::in_backward() { return current_task != nullptr; }

size_t Engine::pass_depth() { return running_passes.size(); }

std::chrono::steady_clock::time_point Engine::backward_started_at() {
  return current_task != nullptr ? current_task->started : std::chrono::steady_clock::now();
}

void Engine::queue_callback(std::function<void()> callback) {
  TDDP_CHECK(current_task != nullptr, "queue_callback: no backward pass is running on this thread");
  current_task->callbacks.push_back(std::move(callback));
}

uint64_t Engine::count_dependencies(const std::vector<std::pair<Edge, Tensor>>& seeds,
                                    std::vector<std::shared_ptr<Node>>& alive, std::vector<NodeState>& set_aside) {
  // Counted in the nodes themselves; pass_ marks which pass the counters belong to.
  static std::atomic<uint64_t> pass_counter{0};
  const uint64_t pass = ++pass_counter;
  thread_local std::vector<Node*> stack;
  alive.clear();
  stack.clear();
  // The enclosing passes (the last entry is this one's, not yet numbered); none, most often.
  const auto enclosing_begin = running_passes.begin();
  const auto enclosing_end = running_passes.end() - 1;
  const bool nested = enclosing_begin != enclosing_end;
  const auto visit = [&](const std::shared_ptr<Node>& node) {
    if (node->pass_ == pass) return;
    if (nested && std::find(enclosing_begin, enclosing_end, node->pass_) != enclosing_end) {
      set_aside.push_back({node, node->pass_, node->pending_, std::move(node->buffer_),
                           std::move(node->extra_buffers_)});  // an enclosing pass's state
    }
    node->pass_ = pass;
    node->pending_ = 0;
    node->buffer_ = Tensor();
    if (const uint32_t inputs = node->num_inputs(); inputs > 1) node->extra_buffers_.assign(inputs - 1, Tensor());
    alive.push_back(node);
    stack.push_back(node.get());
  };
  for (const auto& [edge, grad] : seeds) visit(edge.function);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& next : node->next_edges()) {
      if (!next.is_valid()) continue;
      visit(next.function);
      ++next.function->pending_;
    }
  }
  return pass;
}

void Engine::end_pass(std::vector<NodeState>& set_aside) {
  running_passes.pop_back();
  for (NodeState& s : set_aside) {
    s.node->pass_ = s.pass;
    s.node->pending_ = s.pending;
    s.node->buffer_ = std::move(s.buffer);
    s.node->extra_buffers_ = std::move(s.extra_buffers);
  }
}

void Engine::backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
                      bool create_graph) {
  execute(roots, grad_roots, retain_graph, create_graph, nullptr);
}

std::vector<Tensor> Engine::grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                 const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                                 bool allow_unused) {
  Capture capture;
  for (size_t k = 0; k < inputs.size(); ++k) {
    TDDP_CHECK(inputs[k].defined(), "grad: input {} is an undefined tensor", k);
    TDDP_CHECK(inputs[k].requires_grad(), "grad: input {} (shape {}) does not require grad", k,
               tensor::format_shape(inputs[k].sizes()));
    capture.at[gradient_edge(inputs[k]).function.get()].push_back(k);
  }
  capture.grads.resize(inputs.size());
  execute(outputs, grad_outputs, retain_graph, create_graph, &capture);
  for (size_t k = 0; k < inputs.size(); ++k) {
    TDDP_CHECK(allow_unused || capture.grads[k].defined(),
               "grad: input {} (shape {}) was not used in the graph of the outputs (pass allow_unused = true to get an "
               "undefined gradient for it)",
               k, tensor::format_shape(inputs[k].sizes()));
  }
  return capture.grads;
}

void Engine::mark_needed(Capture& capture, const std::vector<std::shared_ptr<Node>>& alive) {
  // A node must run when one of its next nodes is an input's or must run. Next nodes were made
  // before the node (lower sequence numbers); the leaves' accumulators, made later, lead
  // nowhere and never run.
  std::vector<Node*> order;
  for (const auto& node : alive) {
    if (!node->next_edges().empty()) order.push_back(node.get());
  }
  std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); });
  for (Node* node : order) {
    for (const Edge& next : node->next_edges()) {
      Node* child = next.function.get();
      if (next.is_valid() && (capture.at.count(child) != 0 || capture.needed.count(child) != 0)) {
        capture.needed.insert(node);
        break;
      }
    }
  }
}

void Engine::execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph,
                     bool create_graph, Capture* capture) {
  TDDP_CHECK(running_passes.size() < kMaxPassDepth,
             "backward: {} backward passes nested inside one another on this thread (a node's or hook's backward "
             "starting another, without end?)",
             running_passes.size());
  TDDP_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got {} roots but {} gradients",
             roots.size(), grad_roots.size());
  // Gradient computations are recorded only when a graph of them is asked for.
  const tensor::AutoGradMode grad_mode(create_graph);

  // 1. The root edges and their gradients.
  const std::vector<std::pair<Edge, Tensor>> seeds = root_edges(roots, grad_roots);

  // 2. Dependencies: how many edges of the reachable graph point at each node. `alive`
  //    (scratch kept per nesting depth, reused by the passes on this thread) keeps every node
  //    alive for the duration of the pass. The state of enclosing passes found in those nodes
  //    is put back last (members are destroyed in reverse order: after ClearBuffers).
  struct PassScope {
    std::vector<NodeState> set_aside;
    ~PassScope() { end_pass(set_aside); }
  } pass_scope;
  thread_local std::vector<std::vector<std::shared_ptr<Node>>> alive_by_depth(kMaxPassDepth);
  std::vector<std::shared_ptr<Node>>& alive = alive_by_depth[running_passes.size()];
  running_passes.push_back(0);  // the pass number, once counted
  running_passes.back() = count_dependencies(seeds, alive, pass_scope.set_aside);
  // Whatever happens below, no gradient stays behind in a node's buffer.
  struct ClearBuffers {
    std::vector<std::shared_ptr<Node>>& nodes;
    ~ClearBuffers() {
      for (const auto& node : nodes) {
        node->buffer_ = Tensor();
        node->extra_buffers_.clear();
      }
      nodes.clear();  // drops this pass's references to the graph
    }
  } clear_buffers{alive};
  if (capture != nullptr) mark_needed(*capture, alive);

  // 3. Seed the buffers with the root gradients; roots nothing else points at are ready.
  std::priority_queue<ReadyEntry> ready;
  uint64_t arrivals = 0;
  for (const auto& [edge, grad] : seeds) accumulate(buffer_of(edge.function.get(), edge.input_nr), grad, create_graph);
  for (const auto& [edge, grad] : seeds) {
    Node* node = edge.function.get();
    if (node->pending_ == 0) {
      node->pending_ = -1;  // queued once even if several roots share it
      ready.push({node->sequence_nr(), arrivals++, node});
    }
  }

  // 4. Run ready nodes; a node becomes ready when its last incoming edge has delivered.
  GraphTask task;
  TaskScope scope(&task);
  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    std::vector<Tensor> outputs;
    if (capture != nullptr && !take_captured(*capture, node)) {
      outputs.resize(node->next_edges().size());  // runs nothing: grad() writes no .grad
    } else {
      outputs = node->num_inputs() > 1 ? run_many(node, retain_graph) : run_one(node, retain_graph);
    }
    TDDP_CHECK(outputs.size() == node->next_edges().size(), "{}: returned {} gradients for {} next edges", node->name(),
               outputs.size(), node->next_edges().size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Edge& next = node->next_edges()[i];
      if (!next.is_valid()) continue;
      Node* child = next.function.get();
      if (outputs[i].defined()) accumulate(buffer_of(child, next.input_nr), std::move(outputs[i]), create_graph);
      if (--child->pending_ == 0) ready.push({child->sequence_nr(), arrivals++, child});
    }
  }

  // 5. Callbacks queued by hooks (they may queue more).
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    auto callback = std::move(task.callbacks[i]);
    callback();
  }
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  return Engine::grad(outputs, inputs, grad_outputs, retain_graph.value_or(create_graph), create_graph, allow_unused);
}

}  // namespace tinyddp::autograd
