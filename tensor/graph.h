// How tensor ops join the autograd graph without knowing the engine. An op whose inputs
// require grad (and grad mode is on) calls record_op() with a backward closure written right
// beside its forward; the input's autograd metadata (autograd/meta.cc) turns it into a Node.
// SavedTensor keeps data for the backward and catches in-place changes made after saving.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

// True when grad mode is on and any of `inputs` requires grad: the op must record.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
inline bool needs_grad(const Tensor& a) { return needs_grad({&a}); }
inline bool needs_grad(const Tensor& a, const Tensor& b) { return needs_grad({&a, &b}); }
// True when grad mode is on and an in-place write into `self` must be recorded even if what is
// written does not require grad: self requires grad, or it is a view of a tensor that does.
bool writes_into_history(const Tensor& self);
// The tensor `self` is a view of (TensorImpl::view_base), when self is a view whose base is
// alive and still over the same storage; else undefined.
Tensor live_view_base(const Tensor& self);

// Makes `output` the result of op `name` (e.g. "MulBackward") applied to `inputs`. During
// backward, `backward(grad_output)` returns one gradient per input, in order (an undefined
// tensor where an input gets none). Call only when needs_grad(...) is true.
void record_op(const char* name, const Tensor& output, std::initializer_list<Tensor> inputs, BackwardFn backward);
// The same for a number of inputs known only at run time (autograd::Function).
void record_op(const char* name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward);
// Makes `outputs` the results of one op (split, unbind, a user's autograd::Function): one node
// whose backward runs once, with the gradients of all the outputs that got one (undefined for
// the others), instead of one node per output each writing its gradient into a tensor of the
// input's shape. A saved output (SavedTensor(out_k, true, k)) comes back with its history under
// create_graph, as a one-output op's.
void record_multi_op(const char* name, const std::vector<Tensor>& outputs, std::initializer_list<Tensor> inputs,
                     MultiBackwardFn backward);
void record_multi_op(const char* name, const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                     MultiBackwardFn backward);

// A tensor kept for the backward pass, plus its storage version at save time. An op's own
// output is kept as a detached alias (its data without its history): holding the output
// itself would make a cycle output -> grad_fn -> saved output. Inputs are kept as they are.
class SavedTensor {
 public:
  SavedTensor() = default;
  // `output_nr`: which of its op's outputs `t` is, when is_output (0 for a one-output op).
  explicit SavedTensor(const Tensor& t, bool is_output = false, uint32_t output_nr = 0);
  // The saved data; throws naming `node` if it was modified in place since it was saved. While
  // a backward that builds a graph of the gradients runs (create_graph), a saved output comes
  // back with its history: the node running now (RunningNode below) as its grad_fn, as
  // PyTorch's SavedVariable, so that d(gradient)/d(input) also flows through the output.
  const Tensor& get(const char* node) const;

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
};

// While one lives on this thread, a SavedTensor of a tensor in `storage` keeps a copy of it,
// taken when saved, instead of the tensor: an in-place op computes its result from the tensor
// it then overwrites (write_in_place), and its backward needs the values from before. Only
// what a formula saves is copied.
class SaveCopiesGuard {
 public:
  explicit SaveCopiesGuard(const Storage& storage);
  ~SaveCopiesGuard();
  SaveCopiesGuard(const SaveCopiesGuard&) = delete;
  SaveCopiesGuard& operator=(const SaveCopiesGuard&) = delete;

 private:
  const Storage* previous_;
};

// The node whose backward formula runs now on this thread, set by the autograd engine only
// while it builds a graph of the gradients (create_graph). The tensor layer cannot see graph
// nodes; this is the one question it asks of one.
struct RunningNode {
  virtual ~RunningNode() = default;
  // An alias of `output_data`, the node's output `output_nr`, whose gradient flows back into
  // this node (its own output again), kept by the node until its backward formula returns.
  virtual const Tensor& reattach_output(const Tensor& output_data, uint32_t output_nr) const = 0;
};

// Makes `node` the running node for its lifetime (null: none), restoring the previous one.
class RunningNodeScope {
 public:
  explicit RunningNodeScope(const RunningNode* node);
  ~RunningNodeScope();
  RunningNodeScope(const RunningNodeScope&) = delete;
  RunningNodeScope& operator=(const RunningNodeScope&) = delete;

 private:
  const RunningNode* previous_;
};

// While one is installed on this thread (WeightGradientSinkScope), linear()'s backward offers
// it each weight gradient as the product it would compute, grad_out^T @ input (both 2-D, their
// rows the product's terms), before computing it. When take() returns true the sink keeps the
// factors and the weight gets no gradient from that call (its accumulator does not run for it):
// DDP's deterministic option folds each chunk's product from registers into its integer sums
// (ddp/exact_sum.h), no float32 gradient written and read back. `weight` only identifies the
// parameter: the sink compares it with its own.
struct WeightGradientSink {
  virtual ~WeightGradientSink() = default;
  virtual bool take(const TensorImpl* weight, const Tensor& grad_out, const Tensor& input) = 0;
};

// Installs `sink` on this thread for its lifetime (null: none), restoring the previous one.
class WeightGradientSinkScope {
 public:
  explicit WeightGradientSinkScope(WeightGradientSink* sink);
  ~WeightGradientSinkScope();
  WeightGradientSinkScope(const WeightGradientSinkScope&) = delete;
  WeightGradientSinkScope& operator=(const WeightGradientSinkScope&) = delete;

 private:
  WeightGradientSink* previous_;
};

// This thread's sink, or null.
WeightGradientSink* weight_gradient_sink();

}  // namespace tinyddp::tensor
