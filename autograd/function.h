// Custom autograd functions, as libtorch's torch::autograd::Function<T>: a user writes a
// forward and its backward as two static functions and calls T::apply(args...). The forward
// runs with gradient recording off; when any tensor argument requires grad, apply records one
// graph node whose backward is T::backward, so the function composes with every op, DDP's
// hooks and gradcheck.
//
//   struct Cube : autograd::Function<Cube> {
//     static Tensor forward(autograd::FunctionCtx* ctx, const Tensor& x) {
//       ctx->save_for_backward({x});
//       return x * x * x;
//     }
//     // One gradient per forward argument (undefined for non-tensors and unneeded ones).
//     static std::vector<Tensor> backward(autograd::FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
//       const Tensor x = ctx->get_saved_variables()[0];
//       return {grad_outputs[0] * 3 * x * x};
//     }
//   };
//   Tensor y = Cube::apply(x);
//
// A forward that returns a std::vector<Tensor> (libtorch's variable_list) makes apply return
// one too, and backward gets one gradient per output: zeros where an output got none (as
// PyTorch; ctx->set_materialize_grads(false) passes undefined tensors instead). Outputs named
// in ctx->mark_non_differentiable (an argmax, a mask) come out without a history.
#pragma once

#include <any>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::autograd {

using tensor::Tensor;

// FunctionCtx::saved_data: values by name (a scalar, a shape, a flag, a pointer), as
// libtorch's ctx->saved_data. Written as a map (`saved_data["scale"] = 2.0`); read back with
// get<T>(key), which names the function and the key when the key is missing or holds another
// type (at(key) and std::any_cast work too).
class SavedData {
 public:
  std::any& operator[](const std::string& key) { return values_[key]; }
  const std::any& at(const std::string& key) const;
  bool contains(const std::string& key) const { return values_.count(key) != 0; }
  size_t size() const { return values_.size(); }
  template <class T>
  T get(const std::string& key) const {
    const std::any& value = at(key);
    if (const T* held = std::any_cast<T>(&value)) return *held;
    wrong_type(key, value, typeid(T));
  }

 private:
  friend class FunctionCtx;
  [[noreturn]] void wrong_type(const std::string& key, const std::any& value, const std::type_info& asked) const;
  std::map<std::string, std::any> values_;
  std::string function_ = "Function";  // the node's name, for errors
};

// What forward leaves for backward: tensors (checked against in-place changes), other values
// by name, and which arguments need a gradient.
class FunctionCtx {
 public:
  // Tensors backward will need; get_saved_variables() returns them in the same order and
  // throws, naming the function, if one was modified in place after it was saved.
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> get_saved_variables() const;
  // Anything else backward needs (a scalar, a shape, a flag), by name (SavedData above).
  SavedData saved_data;
  // One entry per forward argument: true for a tensor that requires grad (with grad mode
  // on); backward may skip the others and return an undefined tensor for them.
  std::vector<bool> needs_input_grad;
  // Outputs of forward that get no gradient (indices, masks): apply returns them without a
  // history, and backward sees zeros for them (or undefined tensors, below).
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Whether backward gets zeros of an output's shape for an output that received no gradient
  // (true, PyTorch's default) or an undefined tensor.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  bool materialize_grads() const { return materialize_grads_; }
  const std::string& name() const { return name_; }

 private:
  template <class T>
  friend struct Function;
  void set_name(std::string name) {
    name_ = std::move(name);
    saved_data.function_ = name_;
  }
  friend std::vector<bool> mark_outputs(FunctionCtx& ctx, const std::vector<Tensor>& outputs);
  std::vector<Tensor> to_save_, non_differentiable_;
  std::vector<tensor::SavedTensor> saved_;
  std::string name_ = "Function";
  bool materialize_grads_ = true;
};

// Which of forward's outputs are differentiable (not marked otherwise); the saved tensors that
// alias one of those are kept detached (no cycle output -> node -> output) and come back with
// their history under create_graph. Called by apply once forward has returned.
std::vector<bool> mark_outputs(FunctionCtx& ctx, const std::vector<Tensor>& outputs);

namespace detail {

// Argument k of a call, seen as a possible tensor input.
inline const Tensor* as_tensor(const Tensor& t) { return &t; }
template <typename A>
const Tensor* as_tensor(const A&) {
  return nullptr;
}

// The node's name: the function's type name ("Cube") plus "Backward", as PyTorch names them.
std::string function_name(const char* mangled);

// A call's tensor arguments, in order, and where each sits among all its arguments.
struct Arguments {
  std::vector<Tensor> tensors;
  std::vector<size_t> positions;
  size_t count = 0;
  void add(const Tensor* t) {
    if (t != nullptr) {
      tensors.push_back(*t);
      positions.push_back(count);
    }
    ++count;
  }
};

// Fills ctx.needs_input_grad; true when the call records a node (grad mode on and a tensor
// argument requires grad).
bool needs_node(FunctionCtx& ctx, const Arguments& arguments);

using BackwardOf = std::vector<Tensor> (*)(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs);
// Checks forward's outputs, and where the call records, replaces them with fresh handles and
// makes them the results of one node whose backward is `backward` (one output: a node of its
// own; several: tensor::record_multi_op's). `single`: forward returned a Tensor.
void record_outputs(const std::shared_ptr<FunctionCtx>& ctx, const Arguments& arguments, std::vector<Tensor>& outputs,
                    bool single, bool record, BackwardOf backward);

}  // namespace detail

template <class T>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    auto ctx = std::make_shared<FunctionCtx>();
    ctx->set_name(detail::function_name(typeid(T).name()));
    detail::Arguments arguments;
    (arguments.add(detail::as_tensor(args)), ...);
    const bool record = detail::needs_node(*ctx, arguments);
    using Output = decltype(T::forward(ctx.get(), std::forward<Args>(args)...));
    constexpr bool kSingle = std::is_same_v<Output, Tensor>;
    static_assert(kSingle || std::is_same_v<Output, std::vector<Tensor>>,
                  "autograd::Function: forward must return a Tensor or a std::vector<Tensor>");
    std::vector<Tensor> outputs;
    {
      tensor::NoGradGuard no_grad;  // the forward's own ops are not recorded
      if constexpr (kSingle) {
        outputs.push_back(T::forward(ctx.get(), std::forward<Args>(args)...));
      } else {
        outputs = T::forward(ctx.get(), std::forward<Args>(args)...);
      }
    }
    detail::record_outputs(
        ctx, arguments, outputs, kSingle, record,
        [](FunctionCtx* c, const std::vector<Tensor>& grads) -> std::vector<Tensor> { return T::backward(c, grads); });
    if constexpr (kSingle) {
      return outputs.front();
    } else {
      return outputs;
    }
  }
};

}  // namespace tinyddp::autograd
