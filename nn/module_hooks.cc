// Module hooks (module.h): the four lists, their handles, and a call with hooks (keyword
// arguments too), in PyTorch's order: forward pre-hooks, the inputs through a backward-hook
// node, forward, forward hooks, the outputs through a second one. In backward the outputs'
// node runs first (backward pre-hooks, then the gradients of the outputs are kept) and the
// inputs' node last (full backward hooks, with the kept gradients of the outputs); with no
// input requiring grad, the full backward hooks run at the outputs' node, their grad_inputs
// all undefined.
#include <algorithm>
#include <unordered_set>
#include <utility>

#include "tinyddp/autograd/backward_hook.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

template <class H>
using HookList = std::vector<std::pair<uint64_t, H>>;

struct Module::Hooks {
  uint64_t next_id = 0;
  HookList<ForwardPreHookWithKwargs> forward_pre;  // the plain forms wrapped (see register_*)
  HookList<ForwardHookWithKwargs> forward;
  HookList<BackwardPreHook> backward_pre;
  HookList<BackwardHook> backward;
  std::unordered_set<uint64_t> always_called;  // forward hooks that also run when forward throws
  bool empty() const { return forward_pre.empty() && forward.empty() && backward_pre.empty() && backward.empty(); }
};

namespace {

// Adds `hook` to the list `member` of `hooks`; the handle removes it (a no-op once the module
// and its hooks are gone).
template <class H>
autograd::RemovableHandle add_hook(const std::shared_ptr<Module::Hooks>& hooks, HookList<H> Module::Hooks::*member,
                                   H hook, bool prepend, const std::string& module_name, const char* what) {
  TDDP_CHECK(hook != nullptr, "{}: {}: the hook is empty", module_name, what);
  const uint64_t id = hooks->next_id++;
  HookList<H>& list = (*hooks).*member;
  list.insert(prepend ? list.begin() : list.end(), {id, std::move(hook)});
  return autograd::RemovableHandle([weak = std::weak_ptr<Module::Hooks>(hooks), member, id] {
    if (const std::shared_ptr<Module::Hooks> alive = weak.lock()) {
      HookList<H>& entries = (*alive).*member;
      entries.erase(std::remove_if(entries.begin(), entries.end(), [id](const auto& e) { return e.first == id; }),
                    entries.end());
    }
  });
}

// A hook's replacement, checked to be one tensor per one it replaces.
void take(std::optional<Tensors> replacement, Tensors& into, const std::string& module_name, const char* what) {
  if (!replacement) return;
  TDDP_CHECK(replacement->size() == into.size(), "{}: a {} returned {} tensors for {}", module_name, what,
             replacement->size(), into.size());
  into = std::move(*replacement);
}

// The backward half of one call with backward hooks: what the outputs' node leaves for the
// inputs' node.
struct BackwardCall {
  Module* module;
  std::shared_ptr<Module::Hooks> hooks;
  size_t num_inputs = 0;
  bool inputs_hooked = false;  // some input requires grad: the inputs' node runs the full hooks
  Tensors grad_outputs;

  Tensors on_output_grads(Tensors grads) {
    const auto pre_hooks = hooks->backward_pre;  // a copy: hooks may remove hooks
    for (const auto& [id, hook] : pre_hooks)
      take(hook(*module, grads), grads, module->type_name(), "backward pre-hook");
    grad_outputs = grads;
    if (!inputs_hooked) {
      const Tensors none(num_inputs);
      const auto full = hooks->backward;
      for (const auto& [id, hook] : full) {
        const std::optional<Tensors> out = hook(*module, none, grad_outputs);
        TDDP_CHECK(!out || std::none_of(out->begin(), out->end(), [](const Tensor& t) { return t.defined(); }),
                   "{}: a full backward hook returned gradients, but no input of the module requires grad",
                   module->type_name());
      }
    }
    return grads;
  }

  Tensors on_input_grads(Tensors grads) {
    const auto full = hooks->backward;
    for (const auto& [id, hook] : full)
      take(hook(*module, grads, grad_outputs), grads, module->type_name(), "full backward hook");
    return grads;
  }
};

// A kwargs pre-hook's replacement: as many args, and kwargs a dict.
void take(std::optional<std::pair<Tensors, Value>> replacement, Tensors& args, Value& kwargs,
          const std::string& module_name) {
  if (!replacement) return;
  TDDP_CHECK(replacement->second.is_dict(), "{}: a forward pre-hook returned keyword arguments that are {}, not a dict",
             module_name, replacement->second.describe());
  take(std::move(replacement->first), args, module_name, "forward pre-hook");
  kwargs = std::move(replacement->second);
}

// run(inputs, kwargs); if it throws, the always_call forward hooks run (with no outputs)
// before the error goes on, theirs dropped.
Value run_or_always_call(const std::shared_ptr<Module::Hooks>& hooks, Module& module, const Tensors& inputs,
                         const Value& kwargs, const std::function<Value(const Tensors&, const Value&)>& run) {
  try {
    return run(inputs, kwargs);
  } catch (...) {
    const auto forward_hooks = hooks->forward;
    for (const auto& [id, hook] : forward_hooks) {
      if (hooks->always_called.count(id) == 0) continue;
      try {
        hook(module, inputs, kwargs, {});
      } catch (...) {  // forward's error is the one to report
      }
    }
    throw;
  }
}

// Checks that nothing left keyword arguments for a forward that takes none (the one-tensor
// and forward_many calls).
void check_no_kwargs(const Value& kwargs, const std::string& module_name) {
  if (kwargs.is_none() || kwargs.size() == 0) return;
  std::string names;
  for (const auto& [key, value] : kwargs.entries()) names += (names.empty() ? "'" : ", '") + key + "'";
  throw Error(
      fmt::format("{}: forward got keyword arguments it does not take: {} (a module that takes them "
                  "overrides forward_kwargs)",
                  module_name, names));
}

}  // namespace

bool Module::has_hooks() const { return hooks_ != nullptr && !hooks_->empty(); }

autograd::RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook, bool prepend) {
  TDDP_CHECK(hook != nullptr, "{}: register_forward_pre_hook: the hook is empty", type_name_);
  // The plain form: the kwargs pass by unchanged.
  return register_forward_pre_hook(
      [hook = std::move(hook)](Module& module, const Tensors& args,
                               const Value& kwargs) -> std::optional<std::pair<Tensors, Value>> {
        std::optional<Tensors> replaced = hook(module, args);
        if (!replaced) return std::nullopt;
        return std::make_pair(std::move(*replaced), kwargs);
      },
      prepend);
}

autograd::RemovableHandle Module::register_forward_pre_hook(ForwardPreHookWithKwargs hook, bool prepend) {
  if (!hooks_) hooks_ = std::make_shared<Hooks>();
  return add_hook(hooks_, &Hooks::forward_pre, std::move(hook), prepend, type_name_, "register_forward_pre_hook");
}

autograd::RemovableHandle Module::register_forward_hook(ForwardHook hook, bool prepend, bool always_call) {
  TDDP_CHECK(hook != nullptr, "{}: register_forward_hook: the hook is empty", type_name_);
  return register_forward_hook([hook = std::move(hook)](Module& module, const Tensors& args, const Value& /*kwargs*/,
                                                        const Tensors& outputs) { return hook(module, args, outputs); },
                               prepend, always_call);
}

autograd::RemovableHandle Module::register_forward_hook(ForwardHookWithKwargs hook, bool prepend, bool always_call) {
  if (!hooks_) hooks_ = std::make_shared<Hooks>();
  if (always_call) hooks_->always_called.insert(hooks_->next_id);  // the id add_hook gives it
  return add_hook(hooks_, &Hooks::forward, std::move(hook), prepend, type_name_, "register_forward_hook");
}

autograd::RemovableHandle Module::register_full_backward_pre_hook(BackwardPreHook hook, bool prepend) {
  if (!hooks_) hooks_ = std::make_shared<Hooks>();
  return add_hook(hooks_, &Hooks::backward_pre, std::move(hook), prepend, type_name_,
                  "register_full_backward_pre_hook");
}

autograd::RemovableHandle Module::register_full_backward_hook(BackwardHook hook, bool prepend) {
  if (!hooks_) hooks_ = std::make_shared<Hooks>();
  return add_hook(hooks_, &Hooks::backward, std::move(hook), prepend, type_name_, "register_full_backward_hook");
}

std::vector<Tensor> Module::call(const std::vector<Tensor>& inputs) {
  if (!has_hooks()) return forward_many(inputs);
  return call_with_hooks(inputs, Value::dict(),
                         [this](const Tensors& in, const Value& kwargs) {
                           check_no_kwargs(kwargs, type_name_);
                           const Tensors out = forward_many(in);
                           return Value::list({out.begin(), out.end()});
                         })
      .tensors();
}

Value Module::forward_nested(const std::vector<Tensor>& inputs) {
  const std::vector<Tensor> outputs = forward_many(inputs);
  if (outputs.size() == 1) return Value(outputs.front());
  return Value::list({outputs.begin(), outputs.end()});
}

Value Module::forward_kwargs(const std::vector<Tensor>& args, const Value& kwargs) {
  check_no_kwargs(kwargs, type_name_);
  return forward_nested(args);
}

Value Module::call_kwargs(const std::vector<Tensor>& args, const Value& kwargs) {
  TDDP_CHECK(kwargs.is_dict() || kwargs.is_none(), "{}: keyword arguments must be a dict, got {}", type_name_,
             kwargs.describe());
  if (!has_hooks()) return forward_kwargs(args, kwargs);
  return call_with_hooks(args, kwargs, [this](const Tensors& in, const Value& kw) { return forward_kwargs(in, kw); });
}

Tensor Module::call_one_with_hooks(const Tensor& input) {
  return call_with_hooks({input}, Value::dict(),
                         [this](const Tensors& in, const Value& kwargs) {
                           TDDP_CHECK(in.size() == 1, "{}: called with one input, but its forward pre-hooks left {}",
                                      type_name_, in.size());
                           check_no_kwargs(kwargs, type_name_);
                           return Value(forward(in.front()));
                         })
      .tensor();
}

Value Module::call_with_hooks(std::vector<Tensor> inputs, Value kwargs,
                              const std::function<Value(const std::vector<Tensor>&, const Value&)>& run) {
  const std::shared_ptr<Hooks> hooks = hooks_;   // alive through the call, whatever the hooks remove
  if (kwargs.is_none()) kwargs = Value::dict();  // what the kwargs hooks see: a dict, maybe empty
  const auto forward_pre = hooks->forward_pre;
  for (const auto& [id, hook] : forward_pre) take(hook(*this, inputs, kwargs), inputs, kwargs, type_name_);
  std::shared_ptr<BackwardCall> state;
  if ((!hooks->backward.empty() || !hooks->backward_pre.empty()) && tensor::GradMode::is_enabled()) {
    state = std::make_shared<BackwardCall>();
    state->module = this;
    state->hooks = hooks;
    state->num_inputs = inputs.size();
    state->inputs_hooked =
        std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
    inputs = autograd::through_backward_hook(
        inputs, [state](Tensors grads) { return state->on_input_grads(std::move(grads)); });
  }
  const Value result = run_or_always_call(hooks, *this, inputs, kwargs, run);
  // The hooks see the output's tensors, depth first; their replacements go back in place.
  std::vector<Tensor> outputs = result.tensors();
  const auto forward_hooks = hooks->forward;
  for (const auto& [id, hook] : forward_hooks) {
    take(hook(*this, inputs, kwargs, outputs), outputs, type_name_, "forward hook");
  }
  if (state) {
    outputs = autograd::through_backward_hook(
        outputs, [state](Tensors grads) { return state->on_output_grads(std::move(grads)); });
  }
  return result.with_tensors(outputs);
}

}  // namespace tinyddp::nn
