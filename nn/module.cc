// Module: registration, traversal with dotted names, state dicts, modes and conversions.
#include "tinyddp/nn/module.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <mutex>
#include <sstream>
#include <typeinfo>
#include <unordered_map>

namespace tinyddp::nn {

namespace {
thread_local bool skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool SkipInitGuard::active() { return skip_init; }

Tensor Module::forward(const Tensor& /*input*/) {
  throw Error(
      fmt::format("{}: forward(const Tensor&) is not implemented for this module (one with several inputs "
                  "or outputs implements forward_many)",
                  type_name_));
}

std::vector<Tensor> Module::forward_many(const std::vector<Tensor>& inputs) {
  TDDP_CHECK(inputs.size() == 1,
             "{}: forward takes one input tensor, got {} (a module with several inputs overrides forward_many)",
             type_name_, inputs.size());
  return {forward(inputs[0])};
}

void Module::check_new_name(const std::string& name, const char* op) const {
  TDDP_CHECK(!name.empty() && name.find('.') == std::string::npos,
             "{}: invalid name '{}' (names must be non-empty and contain no '.')", op, name);
  TDDP_CHECK(!parameters_.contains(name) && !buffers_.contains(name) && !children_.contains(name),
             "{}: '{}' is already registered in {}", op, name, type_name_);
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  TDDP_CHECK(tensor.defined(), "register_parameter: parameter '{}' is an undefined tensor", name);
  TDDP_CHECK(tensor.is_leaf(),
             "register_parameter: parameter '{}' must be a leaf (it was produced by {}); pass detach()", name,
             tensor.is_leaf() ? "" : tensor.grad_fn()->name());
  if (requires_grad) tensor.requires_grad_(true);
  parameters_.insert(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "register_buffer");
  TDDP_CHECK(tensor.defined(), "register_buffer: buffer '{}' is an undefined tensor", name);
  buffers_.insert(name, tensor);
  return tensor;
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  TDDP_CHECK(children_.contains(name), "replace_module: {} has no child module '{}'", type_name_, name);
  TDDP_CHECK(module != nullptr, "replace_module: module '{}' is null", name);
  children_.set(name, std::move(module));
}

Tensor Module::replace_parameter(const std::string& name, Tensor tensor) {
  TDDP_CHECK(parameters_.contains(name), "replace_parameter: {} has no parameter '{}'", type_name_, name);
  TDDP_CHECK(tensor.defined() && tensor.is_leaf(), "replace_parameter: parameter '{}' must be a defined leaf tensor",
             name);
  parameters_.set(name, tensor);
  stand_ins_.erase(name);
  return tensor;
}

namespace {
// The placeholders and stand-ins of every module (is_placeholder, is_stand_in), each by its
// impl, held weakly: an entry whose tensor is gone (its address maybe reused) counts as absent.
struct StandInRegistry {
  std::mutex mutex;
  std::unordered_map<const tensor::TensorImpl*, std::weak_ptr<tensor::TensorImpl>> placeholders, stand_ins;
};
StandInRegistry& stand_in_registry() {
  static StandInRegistry r;
  return r;
}
bool registered_in(std::unordered_map<const tensor::TensorImpl*, std::weak_ptr<tensor::TensorImpl>>& entries,
                   const Tensor& t) {
  if (!t.defined()) return false;
  StandInRegistry& r = stand_in_registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = entries.find(t.impl());
  if (it == entries.end()) return false;
  if (it->second.lock() == t.impl_ptr()) return true;
  entries.erase(it);  // a tensor that has gone, at the same address
  return false;
}
}  // namespace

bool is_placeholder(const Tensor& t) { return registered_in(stand_in_registry().placeholders, t); }
bool is_stand_in(const Tensor& t) { return registered_in(stand_in_registry().stand_ins, t); }

void Module::set_parameter_stand_in(const std::string& name, Tensor stand_in) {
  const Tensor* registered = parameters_.find(name);
  TDDP_CHECK(registered != nullptr, "set_parameter_stand_in: {} has no parameter '{}'", type_name_, name);
  TDDP_CHECK(stand_in.defined() && stand_in.is_leaf(),
             "set_parameter_stand_in: the stand-in of '{}' must be a defined leaf tensor", name);
  {
    StandInRegistry& r = stand_in_registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.placeholders[registered->impl()] = registered->impl_ptr();
    r.stand_ins[stand_in.impl()] = stand_in.impl_ptr();
  }
  stand_ins_[name] = std::move(stand_in);
}

void Module::collect(const std::string& prefix, bool recurse, Collect what,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : what == Collect::kBuffers ? buffers_ : parameters_) {
    const auto stand_in = what == Collect::kParameters ? stand_ins_.find(name) : stand_ins_.end();
    out.emplace_back(prefix + name, stand_in == stand_ins_.end() ? t : stand_in->second);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, what, out);
}

namespace {
using Named = std::vector<std::pair<std::string, Tensor>>;

// Each tensor once, under its first name; `aliases` (if given) gets the later names.
OrderedDict<Tensor> first_names(const Named& all, std::vector<std::pair<std::string, std::string>>* aliases = nullptr) {
  OrderedDict<Tensor> out;
  std::unordered_map<const tensor::TensorImpl*, std::string> seen;
  for (const auto& [name, t] : all) {
    const auto [it, fresh] = seen.emplace(t.impl(), name);
    if (fresh) {
      out.insert(name, t);
    } else if (aliases != nullptr) {
      aliases->emplace_back(name, it->second);
    }
  }
  return out;
}

// The state entries of `module` in PyTorch's state_dict order (each module's parameters, then
// its buffers, then its children), tied tensors under every name. The module's own tensors,
// not detached aliases: those are new impls, in which ties would not show.
void collect_state_tensors(const Module& module, const std::string& prefix, Named& out) {
  for (const auto& [name, t] : module.named_registered_parameters(false)) out.emplace_back(prefix + name, t);
  for (const auto& [name, t] : module.named_buffers(false)) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : module.named_children()) collect_state_tensors(*child, prefix + name + ".", out);
}
}  // namespace

OrderedDict<Tensor> Module::named_parameters(bool recurse) const {
  Named all;
  collect("", recurse, Collect::kParameters, all);
  return first_names(all);
}

OrderedDict<Tensor> Module::named_registered_parameters(bool recurse) const {
  Named all;
  collect("", recurse, Collect::kRegisteredParameters, all);
  return first_names(all);
}

std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }

OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  Named all;
  collect("", recurse, Collect::kBuffers, all);
  return first_names(all);
}

std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

OrderedDict<Tensor> Module::state_dict() const {
  Named all;
  collect_state_tensors(*this, "", all);
  OrderedDict<Tensor> out;
  for (const auto& [name, t] : first_names(all)) out.insert(name, t.detach());
  return out;
}

std::vector<std::pair<std::string, std::string>> Module::tied_names() const {
  Named all;
  collect_state_tensors(*this, "", all);
  std::vector<std::pair<std::string, std::string>> aliases;
  first_names(all, &aliases);
  return aliases;
}

namespace {

// Whether every name of `longer` is a name of `shorter` with "module." in front.
bool differ_by_module_prefix(const std::vector<std::string>& longer, const std::vector<std::string>& shorter) {
  if (longer.empty() || longer.size() != shorter.size()) return false;
  for (size_t i = 0; i < longer.size(); ++i) {
    if (longer[i] != "module." + shorter[i]) return false;
  }
  return true;
}

// The hint for keys that differ only by DDP's "module." prefix, either way round.
std::string prefix_hint(const std::vector<std::string>& missing, const std::vector<std::string>& unexpected) {
  if (differ_by_module_prefix(unexpected, missing)) {
    return "\n  every unexpected key is a missing one with \"module.\" in front: the state dict was saved from "
           "DistributedDataParallel (or DataParallel). Save ddp.module()->state_dict() instead, or strip the prefix "
           "with nn::consume_prefix_in_state_dict_if_present(state, \"module.\")";
  }
  if (differ_by_module_prefix(missing, unexpected)) {
    return "\n  every missing key is an unexpected one with \"module.\" in front: the state dict is a plain "
           "model's, loaded into DistributedDataParallel. Load it into ddp.module() instead";
  }
  return "";
}

}  // namespace

void consume_prefix_in_state_dict_if_present(OrderedDict<Tensor>& state, const std::string& prefix) {
  OrderedDict<Tensor> renamed;
  for (const auto& [name, t] : state) renamed.insert(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name, t);
  state = std::move(renamed);
}

void Module::load_state_dict(const OrderedDict<Tensor>& state, bool strict) {
  Named all;
  collect_state_tensors(*this, "", all);
  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<std::pair<std::string, std::string>> aliases;
  const OrderedDict<Tensor> own = first_names(all, &aliases);
  const auto target_of = [&](const std::string& name) -> const Tensor* {
    if (const Tensor* t = own.find(name)) return t;
    for (const auto& [alias, first] : aliases) {
      if (alias == name) return own.find(first);
    }
    return nullptr;
  };
  for (const auto& [name, target] : own) {
    const Tensor* source = state.find(name);
    bool via_alias = false;
    for (const auto& [alias, first] : aliases) via_alias = via_alias || (first == name && state.contains(alias));
    if (source == nullptr && !via_alias) missing.push_back(name);
  }
  for (const auto& [name, source] : state) {
    const Tensor* target = target_of(name);
    if (target == nullptr) {
      unexpected.push_back(name);
    } else if (!source.defined() || source.sizes() != target->sizes()) {
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name,
                                       source.defined() ? tensor::format_shape(source.sizes()) : "undefined",
                                       tensor::format_shape(target->sizes())));
    }
  }
  std::string problems;
  const auto list = [](const std::vector<std::string>& names) {
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ", ") + ("\"" + n + "\"");
    return joined;
  };
  if (strict && !missing.empty()) problems += "\n  missing key(s): " + list(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected key(s): " + list(unexpected);
  if (strict) problems += prefix_hint(missing, unexpected);
  for (const auto& m : mismatched) problems += "\n  size mismatch for " + m;
  TDDP_CHECK(problems.empty(), "load_state_dict: error(s) loading the state dict of {} (the module is unchanged):{}",
             type_name_, problems);
  tensor::NoGradGuard no_grad;
  for (const auto& [name, t] : all) {  // every name in module order, so a tie's last name wins
    if (const Tensor* source = state.find(name)) t.detach().copy_(*source);
  }
}

std::shared_ptr<Module> Module::clone_structure() const {
  TDDP_CHECK(typeid(*this) == typeid(Module),
             "{} cannot be replicated: its class does not override Module::clone_structure() (DataParallel's "
             "replicate needs a copy of the module for each device)",
             type_name_);
  auto copy = std::make_shared<Module>(type_name_);
  for (const auto& [name, t] : parameters_) copy->register_parameter(name, t.detach().clone(), t.requires_grad());
  for (const auto& [name, t] : buffers_) copy->register_buffer(name, t.detach().clone());
  for (const auto& [name, child] : children_) copy->register_module(name, child->clone_structure());
  copy->training_ = training_;
  return copy;
}

OrderedDict<std::shared_ptr<Module>> Module::named_modules(const std::string& prefix, bool include_self) const {
  OrderedDict<std::shared_ptr<Module>> out;
  std::vector<const Module*> seen{this};
  if (include_self) {
    std::shared_ptr<Module> self = std::const_pointer_cast<Module>(weak_from_this().lock());
    TDDP_CHECK(self != nullptr,
               "named_modules: this {} is not held by a std::shared_ptr (make it with std::make_shared), so it "
               "cannot list itself; pass include_self = false",
               type_name_);
    out.insert(prefix, self);
  }
  // Depth first, children in registration order, each module once.
  std::function<void(const Module&, const std::string&)> visit = [&](const Module& m, const std::string& path) {
    for (const auto& [name, child] : m.children_) {
      if (std::find(seen.begin(), seen.end(), child.get()) != seen.end()) continue;
      seen.push_back(child.get());
      const std::string full = path.empty() ? name : path + "." + name;
      out.insert(full, child);
      visit(*child, full);
    }
  };
  visit(*this, prefix);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const {
  return named_modules("", include_self).values();
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

std::shared_ptr<Module> Module::get_submodule(const std::string& target) const {
  if (target.empty()) {
    std::shared_ptr<Module> self = std::const_pointer_cast<Module>(weak_from_this().lock());
    TDDP_CHECK(self != nullptr,
               "get_submodule(''): this {} is not held by a std::shared_ptr (make it with std::make_shared)",
               type_name_);
    return self;
  }
  const Module* at = this;
  std::shared_ptr<Module> found;
  for (size_t start = 0;;) {
    const size_t dot = target.find('.', start);
    const std::string atom = target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const std::shared_ptr<Module>* child = at->children_.find(atom);
    TDDP_CHECK(child != nullptr, "get_submodule('{}'): {} has no attribute `{}`", target, at->type_name_, atom);
    found = *child;
    at = found.get();
    if (dot == std::string::npos) return found;
    start = dot + 1;
  }
}

namespace {
// The module path and the last name of a dotted target ("0.weight" -> "0", "weight").
std::pair<std::string, std::string> split_target(const std::string& target) {
  const size_t dot = target.rfind('.');
  if (dot == std::string::npos) return {"", target};
  return {target.substr(0, dot), target.substr(dot + 1)};
}
}  // namespace

Tensor Module::get_parameter(const std::string& target) const {
  const auto [path, name] = split_target(target);
  const Module& owner = path.empty() ? *this : *get_submodule(path);
  const Tensor* p = owner.named_parameters(/*recurse=*/false).find(name);
  TDDP_CHECK(p != nullptr, "get_parameter('{}'): {} has no parameter `{}`", target, owner.type_name_, name);
  return *p;
}

Tensor Module::get_buffer(const std::string& target) const {
  const auto [path, name] = split_target(target);
  const Module& owner = path.empty() ? *this : *get_submodule(path);
  const Tensor* b = owner.buffers_.find(name);
  TDDP_CHECK(b != nullptr, "get_buffer('{}'): {} has no buffer `{}`", target, owner.type_name_, name);
  return *b;
}

Module& Module::requires_grad_(bool requires_grad) {
  for (const Tensor& p : parameters()) p.requires_grad_(requires_grad);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  tensor::NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = Tensor();
    } else {
      p.grad().zero_();
    }
  }
}

void Module::zero_grad(bool set_to_none) { nn::zero_grad(parameters(), set_to_none); }

namespace {
template <typename Target>
void convert_all(const std::vector<Tensor>& tensors, Target target) {
  tensor::NoGradGuard no_grad;
  for (const Tensor& t : tensors) {
    if constexpr (std::is_same_v<Target, DType>) {
      if (!t.is_floating_point()) continue;  // as PyTorch: integer buffers keep their dtype
    }
    t.set_data(t.to(target));
    if (t.grad().defined()) t.mutable_grad() = t.grad().to(target);
  }
}
}  // namespace

void Module::to(DType dtype) {
  TDDP_CHECK(tensor::is_floating_point(dtype), "Module::to: expected a floating-point dtype, got {}",
             tensor::dtype_name(dtype));
  convert_all(named_registered_parameters().values(), dtype);
  convert_all(buffers(), dtype);
}

void Module::to(Device device) {
  convert_all(named_registered_parameters().values(), device);
  convert_all(buffers(), device);
}

void Module::to(tensor::MemoryFormat format) {
  tensor::NoGradGuard no_grad;
  for (const std::vector<Tensor>& tensors : {named_registered_parameters().values(), buffers()}) {
    for (const Tensor& t : tensors) {
      if (t.dim() == 4) t.set_data(t.contiguous(format));  // as PyTorch: the 4-D ones (convolution weights)
    }
  }
}

std::string repr_float(double value) {
  std::string s = fmt::format("{}", value);
  if (std::isfinite(value) && s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string Module::repr() const {
  // PyTorch's layout: extra_repr's lines, then the children's, two spaces in (or one line).
  const std::string extra = extra_repr();
  if (!extra.empty() && extra.find('\n') == std::string::npos && children_.empty())
    return type_name_ + "(" + extra + ")";
  std::string out = type_name_ + "(";
  std::istringstream extra_lines(extra);
  for (std::string line; !extra.empty() && std::getline(extra_lines, line);) out += "\n  " + line;
  for (const auto& [name, child] : children_) {
    std::string child_repr = child->repr();
    for (size_t pos = 0; (pos = child_repr.find('\n', pos)) != std::string::npos; pos += 3)
      child_repr.insert(pos + 1, "  ");
    out += "\n  (" + name + "): " + child_repr;
  }
  return out + (out.size() > type_name_.size() + 1 ? "\n)" : ")");
}

}  // namespace tinyddp::nn
