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
// One tensor output per function (the library's own ops with several go through
// tensor::record_multi_op).
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
  const std::string& name() const { return name_; }

 private:
  template <class T>
  friend struct Function;
  void set_name(std::string name) {
    name_ = std::move(name);
    saved_data.function_ = name_;
  }
  // Saved tensors that alias the output are kept detached (no cycle output -> node -> output).
  void mark_output(const Tensor& output);
  std::vector<Tensor> to_save_;
  std::vector<tensor::SavedTensor> saved_;
  std::string name_ = "Function";
};

namespace detail {

// Argument k of a call, seen as a possible tensor input.
inline const Tensor* as_tensor(const Tensor& t) { return &t; }
template <typename A>
const Tensor* as_tensor(const A&) {
  return nullptr;
}

// The node's name: the function's type name ("Cube") plus "Backward", as PyTorch names them.
std::string function_name(const char* mangled);

// T::backward, with a std::bad_any_cast from a std::any_cast of saved_data turned into an
// error that names the function and says which read names the key.
[[noreturn]] void rethrow_bad_any_cast(const FunctionCtx& ctx);
template <class T>
std::vector<Tensor> run_backward(FunctionCtx* ctx, const Tensor& grad_output) {
  try {
    return T::backward(ctx, {grad_output});
  } catch (const std::bad_any_cast&) {
    rethrow_bad_any_cast(*ctx);
  }
}

}  // namespace detail

template <class T>
struct Function {
  template <typename... Args>
  static Tensor apply(Args&&... args) {
    auto ctx = std::make_shared<FunctionCtx>();
    ctx->set_name(detail::function_name(typeid(T).name()));
    // The tensor arguments, in order, and where each sits among all the arguments.
    std::vector<Tensor> inputs;
    std::vector<size_t> positions;
    size_t position = 0;
    const auto collect = [&](const auto& arg) {
      if (const Tensor* t = detail::as_tensor(arg)) {
        inputs.push_back(*t);
        positions.push_back(position);
      }
      ++position;
    };
    (collect(args), ...);
    const size_t num_args = position;
    const bool record = tensor::GradMode::is_enabled() && [&] {
      for (const Tensor& t : inputs) {
        if (t.defined() && t.requires_grad()) return true;
      }
      return false;
    }();
    ctx->needs_input_grad.assign(num_args, false);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ctx->needs_input_grad[positions[i]] = record && inputs[i].defined() && inputs[i].requires_grad();
    }
    Tensor output;
    {
      tensor::NoGradGuard no_grad;  // the forward's own ops are not recorded
      output = T::forward(ctx.get(), std::forward<Args>(args)...);
    }
    TDDP_CHECK(output.defined(), "{}: forward returned an undefined tensor", ctx->name());
    if (!record) return output;  // no node: the context is dropped with everything it saved
    output = output.detach();    // a fresh handle: the forward may have returned an input itself
    ctx->mark_output(output);
    const std::string name = ctx->name();
    tensor::record_op(name.c_str(), output, inputs,
                      [ctx, positions, num_args](const Tensor& grad_output) -> std::vector<Tensor> {
                        const std::vector<Tensor> grads = detail::run_backward<T>(ctx.get(), grad_output);
                        TDDP_CHECK(grads.size() == num_args,
                                   "{}: backward returned {} gradients for the {} arguments of forward (one per "
                                   "argument, undefined for non-tensors)",
                                   ctx->name(), grads.size(), num_args);
                        std::vector<Tensor> per_input;
                        per_input.reserve(positions.size());
                        size_t next = 0;
                        for (size_t k = 0; k < num_args; ++k) {
                          if (next < positions.size() && positions[next] == k) {
                            per_input.push_back(grads[k]);
                            ++next;
                          } else {
                            TDDP_CHECK(!grads[k].defined(),
                                       "{}: backward returned a gradient for argument {}, which is not a tensor "
                                       "(return an undefined Tensor() there)",
                                       ctx->name(), k);
                          }
                        }
                        return per_input;
                      });
    return output;
  }
};

}  // namespace tinyddp::autograd
