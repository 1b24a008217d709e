// Module: registration, traversal with dotted names, state dicts, modes and conversions.
#include "tinyddp/nn/module.h"

#include <sstream>

namespace tinyddp::nn {

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

void Module::collect(const std::string& prefix, bool recurse, bool params, OrderedDict<Tensor>& out) const {
  for (const auto& [name, t] : params ? parameters_ : buffers_) out.insert(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, params, out);
}

OrderedDict<Tensor> Module::named_parameters(bool recurse) const {
  OrderedDict<Tensor> out;
  collect("", recurse, true, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }

OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  OrderedDict<Tensor> out;
  collect("", recurse, false, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }

namespace {
// PyTorch's state_dict order: each module's parameters, then its buffers, then its children.
void collect_state(const Module& module, const std::string& prefix, OrderedDict<Tensor>& out) {
  for (const auto& [name, t] : module.named_parameters(false)) out.insert(prefix + name, t.detach());
  for (const auto& [name, t] : module.named_buffers(false)) out.insert(prefix + name, t.detach());
  for (const auto& [name, child] : module.named_children()) collect_state(*child, prefix + name + ".", out);
}
}  // namespace

OrderedDict<Tensor> Module::state_dict() const {
  OrderedDict<Tensor> out;
  collect_state(*this, "", out);
  return out;
}

void Module::load_state_dict(const OrderedDict<Tensor>& state, bool strict) {
  const OrderedDict<Tensor> own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : own) {
    const Tensor* source = state.find(name);
    if (source == nullptr) {
      missing.push_back(name);
    } else if (!source->defined() || source->sizes() != target.sizes()) {
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name,
                                       source->defined() ? tensor::format_shape(source->sizes()) : "undefined",
                                       tensor::format_shape(target.sizes())));
    }
  }
  for (const auto& [name, t] : state) {
    if (!own.contains(name)) unexpected.push_back(name);
  }
  std::string problems;
  const auto list = [](const std::vector<std::string>& names) {
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ", ") + ("\"" + n + "\"");
    return joined;
  };
  if (strict && !missing.empty()) problems += "\n  missing key(s): " + list(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected key(s): " + list(unexpected);
  for (const auto& m : mismatched) problems += "\n  size mismatch for " + m;
  TDDP_CHECK(problems.empty(), "load_state_dict: error(s) loading the state dict of {} (the module is unchanged):{}",
             type_name_, problems);
  tensor::NoGradGuard no_grad;
  for (const auto& [name, target] : own) {
    if (const Tensor* source = state.find(name)) target.copy_(*source);
  }
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
  convert_all(parameters(), dtype);
  convert_all(buffers(), dtype);
}

void Module::to(Device device) {
  convert_all(parameters(), device);
  convert_all(buffers(), device);
}

std::string Module::repr() const {
  std::ostringstream out;
  out << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    out << "\n";
    for (const auto& [name, child] : children_) {
      std::string child_repr = child->repr();
      // Indent the child's continuation lines.
      for (size_t pos = 0; (pos = child_repr.find('\n', pos)) != std::string::npos; pos += 3)
        child_repr.insert(pos + 1, "  ");
      out << "  (" << name << "): " << child_repr << "\n";
    }
  }
  out << ")";
  return out.str();
}

}  // namespace tinyddp::nn
