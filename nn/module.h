// Module: the base of every layer and model. It owns named parameters, buffers and child
// modules in registration order and derives from them everything PyTorch's nn.Module offers:
// (named_)parameters with dotted names, state_dict / load_state_dict, train/eval, zero_grad,
// to(dtype/device). Modules are held by std::shared_ptr.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/ordered_dict.h"
#include "tinyddp/nn/value.h"

namespace tinyddp::nn {

using tensor::Device;
using tensor::DType;
using tensor::Tensor;

// While one lives on this thread, layer constructors leave their parameters' values
// unwritten (no random draws): clone_structure()'s copies, whose values the caller sets, cost
// allocations only. Nests.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  static bool active();  // whether one lives on this thread

 private:
  bool previous_;
};

class Module;

// Module hooks, as torch.nn.Module's (run when a module is called, model(x), not by forward()
// itself). Each may return replacements (std::nullopt: keep what it was given).
//   forward pre-hook: (module, inputs) -> new inputs
//   forward hook: (module, inputs, outputs) -> new outputs
//   full backward pre-hook: (module, grad_outputs) -> new grad_outputs
//   full backward hook: (module, grad_inputs, grad_outputs) -> new grad_inputs
// The gradients line up with the tensors (undefined where one does not require grad).
// The forward hooks' kwargs forms (PyTorch's with_kwargs=True; registered by the same names,
// told apart by their parameters) also see the call's keyword arguments (a dict Value):
//   forward pre-hook: (module, args, kwargs) -> new (args, kwargs)
//   forward hook: (module, args, kwargs, outputs) -> new outputs
using Tensors = std::vector<Tensor>;
using ForwardPreHook = std::function<std::optional<Tensors>(Module& module, const Tensors& inputs)>;
using ForwardHook =
    std::function<std::optional<Tensors>(Module& module, const Tensors& inputs, const Tensors& outputs)>;
using ForwardPreHookWithKwargs =
    std::function<std::optional<std::pair<Tensors, Value>>(Module& module, const Tensors& args, const Value& kwargs)>;
using ForwardHookWithKwargs = std::function<std::optional<Tensors>(Module& module, const Tensors& args,
                                                                   const Value& kwargs, const Tensors& outputs)>;
using BackwardPreHook = std::function<std::optional<Tensors>(Module& module, const Tensors& grad_outputs)>;
using BackwardHook =
    std::function<std::optional<Tensors>(Module& module, const Tensors& grad_inputs, const Tensors& grad_outputs)>;

// Clears the gradients of `params`: set_to_none makes .grad undefined (PyTorch's default),
// else it is zeroed in place. Module::zero_grad and Optimizer::zero_grad both call it.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

class Module : public std::enable_shared_from_this<Module> {
 public:
  // `type_name` is what repr() and error messages call this module ("Linear").
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The forward pass of modules that map one tensor to one tensor (every built-in layer).
  virtual Tensor forward(const Tensor& input);
  // Calling the module: forward(input) with the module's hooks around it (none: forward alone).
  Tensor operator()(const Tensor& input) { return has_hooks() ? call_one_with_hooks(input) : forward(input); }
  // The forward pass of modules with several inputs or outputs (a model of (ids, mask) that
  // returns (logits, loss)): they override this one. By default it takes exactly one input,
  // passes it to forward() and returns its one output. model(a, b, ...) and call(inputs) call
  // it, with the module's hooks around it.
  virtual std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs);
  template <typename... Rest>
  std::vector<Tensor> operator()(const Tensor& first, const Tensor& second, const Rest&... rest) {
    return call({first, second, rest...});
  }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs);
  // The forward pass of modules whose outputs nest (tuples, lists and dicts of tensors, as a
  // PyTorch forward may return): they override this one. By default forward_many's outputs:
  // the one tensor, or a list of them. call_nested(inputs) calls it with the hooks around it
  // (the hooks see the output's tensors, depth first, and may replace them).
  virtual Value forward_nested(const std::vector<Tensor>& inputs);
  Value call_nested(const std::vector<Tensor>& inputs) { return call_kwargs(inputs, Value::dict()); }
  // The forward pass of modules that take keyword arguments (PyTorch's forward(x, bias=None)):
  // they override this one, `kwargs` a dict Value (empty when none were given). By default it
  // takes none (naming any it gets, as Python's "unexpected keyword argument") and returns
  // forward_nested(args). call_kwargs(args, kwargs), PyTorch's model(*args, **kwargs), calls
  // it with the module's hooks around it; call_nested(args) is call_kwargs with none.
  virtual Value forward_kwargs(const std::vector<Tensor>& args, const Value& kwargs);
  Value call_kwargs(const std::vector<Tensor>& args, const Value& kwargs);

  // Hooks (see ForwardPreHook above), run in registration order (prepend: before the others),
  // each removed by its handle's remove(). Backward hooks see the gradients of the module's
  // tensor inputs and outputs of one call, all at once, as PyTorch's full backward hooks.
  autograd::RemovableHandle register_forward_pre_hook(ForwardPreHook hook, bool prepend = false);
  // always_call: it also runs when forward throws (with no outputs; anything it throws then is
  // dropped for forward's error, which goes on), as PyTorch's always_call.
  autograd::RemovableHandle register_forward_hook(ForwardHook hook, bool prepend = false, bool always_call = false);
  // The kwargs forms, in the same lists (prepend orders them among all the forward hooks).
  autograd::RemovableHandle register_forward_pre_hook(ForwardPreHookWithKwargs hook, bool prepend = false);
  autograd::RemovableHandle register_forward_hook(ForwardHookWithKwargs hook, bool prepend = false,
                                                  bool always_call = false);
  autograd::RemovableHandle register_full_backward_pre_hook(BackwardPreHook hook, bool prepend = false);
  autograd::RemovableHandle register_full_backward_hook(BackwardHook hook, bool prepend = false);
  struct Hooks;  // the four lists (module_hooks.cc)
  // Runs `other`'s hooks from now on: the same lists, so a hook added to or removed from either
  // shows on both (DataParallel's replicas, as PyTorch's replicate shares them).
  void share_hooks(const Module& other) { hooks_ = other.hooks_; }

  // Registration returns the registered object. Names may not contain '.' or repeat.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_new_name(name, "register_module");
    TDDP_CHECK(module != nullptr, "register_module: module '{}' is null", name);
    children_.insert(name, module);
    return module;
  }

  // Puts `module` where the child `name` was (the same position in children() and in every
  // name), as assigning to an attribute of a torch.nn.Module does; `name` must be a child.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Puts `tensor` where the parameter `name` was, as assigning to a parameter attribute does;
  // returns it. Giving a module another module's parameter ties the two (GPT's lm_head.weight
  // is its wte.weight): one tensor, used twice, listed once (below).
  Tensor replace_parameter(const std::string& name, Tensor tensor);

  // Own entries first, then each child's (depth first), names joined with '.'. A tensor
  // registered under several names (tied weights) is listed once, under the first name met,
  // as PyTorch's named_parameters() does: optimizers, DDP and clipping see it once. A
  // parameter with a stand-in (below) is listed as its stand-in.
  std::vector<Tensor> parameters(bool recurse = true) const;
  OrderedDict<Tensor> named_parameters(bool recurse = true) const;
  // Stand-ins, as FSDP2's sharded parameters: ddp::fully_shard keeps each parameter's local
  // shard here, so that parameters(), named_parameters() and zero_grad() give the shards (what
  // an optimizer built from model.parameters() must step), while the module's own code keeps
  // computing with its registered tensor, which holds the gathered value around each use and
  // is otherwise a placeholder without elements (is_placeholder: optimizers refuse one).
  // state_dict(), load_state_dict() and to() keep to the registered tensors, which
  // named_registered_parameters() lists. `name` must be a parameter of this module; the stand-in
  // goes when replace_parameter replaces it.
  void set_parameter_stand_in(const std::string& name, Tensor stand_in);
  OrderedDict<Tensor> named_registered_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const { return children_.values(); }
  const OrderedDict<std::shared_ptr<Module>>& named_children() const { return children_; }
  // Every module of the tree, depth first, each once (a module reached twice is listed under
  // its first name), as torch's named_modules(): this module first under `prefix` ("" by
  // default) when include_self, the others by dotted name. Listing itself needs the module
  // to be held by a std::shared_ptr (std::make_shared); otherwise pass include_self = false.
  OrderedDict<std::shared_ptr<Module>> named_modules(const std::string& prefix = "", bool include_self = true) const;
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  // Calls fn on every child's tree, then on this module, as torch's apply (the way an
  // initialiser is run over a model: model.apply([](nn::Module& m) { ... })).
  void apply(const std::function<void(Module&)>& fn);
  // As torch's: the module, parameter or buffer at a dotted path ("transformer.h.0.attn",
  // "0.weight"); get_submodule("") is this module (held by a std::shared_ptr). A missing name
  // throws, naming the module that lacks it. get_parameter gives what named_parameters() lists
  // (a stand-in where there is one).
  std::shared_ptr<Module> get_submodule(const std::string& target) const;
  Tensor get_parameter(const std::string& target) const;
  Tensor get_buffer(const std::string& target) const;
  // requires_grad_ on every parameter (freezing a model: model.requires_grad_(false)); returns
  // this module, as torch's.
  Module& requires_grad_(bool requires_grad = true);

  // Parameters and buffers by dotted name (detached aliases of the module's own tensors). A
  // tied tensor is saved once, under its first name (PyTorch saves it under every name).
  OrderedDict<Tensor> state_dict() const;
  // Its other names: alias -> the name state_dict() uses ("lm_head.weight" ->
  // "transformer.wte.weight").
  std::vector<std::pair<std::string, std::string>> tied_names() const;
  // Copies `state` into the module's tensors in place (so optimizers keep their references).
  // Everything is checked first: missing or unexpected keys (strict) and shape mismatches
  // throw one error listing all problems, and the module is left unchanged. A tied tensor's
  // other names are accepted too (PyTorch's checkpoints carry them) and loaded in order, as
  // PyTorch does, so the last of its names in `state` wins. When the keys differ only by a
  // "module." prefix (a DDP or DataParallel state dict and a plain model, or the other way),
  // the error says so and how to fix it.
  void load_state_dict(const OrderedDict<Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // set_to_none: .grad becomes undefined (PyTorch's default); else it is zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Converts every parameter and buffer in place (the tensor handles stay the same).
  void to(DType dtype);
  void to(Device device);
  // model.to(memory_format=...): the 4-D parameters and buffers stored in `format`.
  void to(tensor::MemoryFormat format);

  // A new module of the same type and configuration with parameters and buffers of its own
  // (their values not copied; the default generator may be drawn), children included: what
  // DataParallel's replicate() builds each replica from. Built-in layers override it; a plain
  // Module (a container, as GPT's "transformer") copies its structure; any other module type
  // throws, naming itself, until it overrides this.
  virtual std::shared_ptr<Module> clone_structure() const;

  const std::string& type_name() const { return type_name_; }
  // "Linear(in_features=10, out_features=5, bias=True)" style, children indented.
  std::string repr() const;
  virtual std::string extra_repr() const { return ""; }

 private:
  void check_new_name(const std::string& name, const char* op) const;
  // Every (name, tensor) in order, tied tensors under each of their names.
  enum class Collect { kParameters, kRegisteredParameters, kBuffers };
  void collect(const std::string& prefix, bool recurse, Collect what,
               std::vector<std::pair<std::string, Tensor>>& out) const;

  bool has_hooks() const;
  Tensor call_one_with_hooks(const Tensor& input);
  // run(args, kwargs) with the hooks around it.
  Value call_with_hooks(std::vector<Tensor> inputs, Value kwargs,
                        const std::function<Value(const std::vector<Tensor>&, const Value&)>& run);
  std::shared_ptr<Hooks> hooks_;  // made by the first register_*_hook

  std::string type_name_;
  OrderedDict<Tensor> parameters_;
  OrderedDict<Tensor> buffers_;
  std::unordered_map<std::string, Tensor> stand_ins_;  // by parameter name: what parameters() lists in its place
  OrderedDict<std::shared_ptr<Module>> children_;
  bool training_ = true;
};

// Whether `t` is a registered parameter some module lists by a stand-in (a placeholder that
// fully_shard fills only around its module's forward and backward), and whether `t` is such a
// stand-in (a shard: its norm needs the other ranks' shards).
bool is_placeholder(const Tensor& t);
bool is_stand_in(const Tensor& t);

// Removes `prefix` from the keys of `state` that start with it, as PyTorch's
// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: a state dict saved from
// DistributedDataParallel ("module.fc.weight") then loads into the plain model.
void consume_prefix_in_state_dict_if_present(OrderedDict<Tensor>& state, const std::string& prefix);

// A float as Python's repr writes it in a module's repr: "1.0", "0.25", "1e-05".
std::string repr_float(double value);

}  // namespace tinyddp::nn
