// ModuleList and ModuleDict (containers.h): children registered under their index or key;
// ParameterList and ParameterDict: parameters registered the same way.
#include "tinyddp/nn/containers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tinyddp::nn {

ModuleList::ModuleList(const std::vector<std::shared_ptr<Module>>& modules) : ModuleList() { extend(modules); }

void ModuleList::append(std::shared_ptr<Module> module) {
  TDDP_CHECK(module != nullptr, "ModuleList: append of a null module (at index {})", size());
  register_module(std::to_string(size()), std::move(module));
}

void ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) append(m);
}

std::shared_ptr<Module> ModuleList::operator[](int64_t index) const {
  const auto n = static_cast<int64_t>(size());
  TDDP_CHECK(index >= -n && index < n, "ModuleList: index {} is out of range for {} modules", index, n);
  return named_children().at(std::to_string(index < 0 ? index + n : index));
}

Tensor ModuleList::forward(const Tensor& /*input*/) {
  throw Error(fmt::format(
      "ModuleList has no forward (as torch.nn.ModuleList): call its {} modules in your module's forward", size()));
}

std::shared_ptr<Module> ModuleList::clone_structure() const {
  auto copy = std::make_shared<ModuleList>();
  for (const auto& m : *this) copy->append(m->clone_structure());
  copy->train(is_training());
  return copy;
}

ModuleDict::ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) : ModuleDict() {
  update(modules);
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  TDDP_CHECK(module != nullptr, "ModuleDict: module '{}' is null", key);
  if (contains(key)) {
    replace_module(key, std::move(module));
  } else {
    register_module(key, std::move(module));
  }
}

void ModuleDict::update(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
  for (const auto& [key, m] : modules) insert(key, m);
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  if (const std::shared_ptr<Module>* m = named_children().find(key)) return *m;
  std::string keys;
  for (const auto& k : named_children().keys()) keys += (keys.empty() ? "'" : ", '") + k + "'";
  throw Error(fmt::format("ModuleDict: no module '{}' (keys: {})", key, keys.empty() ? "none" : keys));
}

Tensor ModuleDict::forward(const Tensor& /*input*/) {
  throw Error("ModuleDict has no forward (as torch.nn.ModuleDict): call its modules in your module's forward");
}

std::shared_ptr<Module> ModuleDict::clone_structure() const {
  auto copy = std::make_shared<ModuleDict>();
  for (const auto& [key, m] : named_children()) copy->insert(key, m->clone_structure());
  copy->train(is_training());
  return copy;
}

// ---- ParameterList and ParameterDict ---------------------------------------------------------

namespace {

// "3x4" (PyTorch's size string; a scalar's is empty), and " (cuda:0)" for a tensor on a GPU.
std::string size_string(const Tensor& p) {
  std::string s;
  for (int64_t d = 0; d < p.dim(); ++d) s += (d > 0 ? "x" : "") + std::to_string(p.size(d));
  return s;
}
std::string device_string(const Tensor& p) { return p.is_cuda() ? " (" + p.device().str() + ")" : ""; }

// torch.typename of a tensor: "torch.FloatTensor", "torch.cuda.LongTensor", ...
std::string torch_typename(const Tensor& p) {
  static const char* const kNames[] = {"Float", "Double", "Half", "BFloat16", "Long", "Bool"};
  return fmt::format("torch.{}{}Tensor", p.is_cuda() ? "cuda." : "", kNames[static_cast<int>(p.dtype())]);
}

Tensor container_forward(const Module& m, size_t n) {
  throw Error(fmt::format("{} has no forward (as torch.nn.{}): use its {} parameters in your module's forward",
                          m.type_name(), m.type_name(), n));
}

// A copy of `params` for clone_structure: the same shapes, dtypes and devices, uninitialised.
Tensor blank_like(const Tensor& p) {
  tensor::NoGradGuard no_grad;
  return tensor::empty_like(p);
}

}  // namespace

ParameterList::ParameterList(const std::vector<Tensor>& params) : ParameterList() { extend(params); }

void ParameterList::append(const Tensor& param) {
  TDDP_CHECK(param.defined(), "ParameterList: append of an undefined tensor (at index {})", items_.size());
  items_.push_back(register_parameter(std::to_string(items_.size()), param));
}

void ParameterList::extend(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) append(p);
}

Tensor ParameterList::operator[](int64_t index) const {
  const auto n = static_cast<int64_t>(items_.size());
  TDDP_CHECK(index >= -n && index < n, "ParameterList: index {} is out of range for {} parameters", index, n);
  return items_[static_cast<size_t>(index < 0 ? index + n : index)];
}

std::vector<Tensor>::const_iterator ParameterList::begin() const { return items_.begin(); }
std::vector<Tensor>::const_iterator ParameterList::end() const { return items_.end(); }

std::string ParameterList::extra_repr() const {
  std::string s;
  for (size_t i = 0; i < items_.size(); ++i) {
    const Tensor& p = items_[i];
    s += fmt::format("{}  ({}): Parameter containing: [torch.{} of size {}{}]", i > 0 ? "\n" : "", i,
                     tensor::dtype_name(p.dtype()), size_string(p), device_string(p));
  }
  return s;
}

Tensor ParameterList::forward(const Tensor& /*input*/) { return container_forward(*this, items_.size()); }

std::shared_ptr<Module> ParameterList::clone_structure() const {
  auto copy = std::make_shared<ParameterList>();
  for (const Tensor& p : items_) copy->append(blank_like(p).requires_grad_(p.requires_grad()));
  copy->train(is_training());
  return copy;
}

ParameterDict::ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params) : ParameterDict() {
  update(params);
}

void ParameterDict::insert(const std::string& key, const Tensor& param) {
  TDDP_CHECK(param.defined(), "ParameterDict: '{}' is an undefined tensor", key);
  if (contains(key)) {
    replace_parameter(key, param);
  } else {
    register_parameter(key, param);
  }
}

void ParameterDict::update(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [key, p] : params) insert(key, p);
}

Tensor ParameterDict::operator[](const std::string& key) const {
  const OrderedDict<Tensor> items = named_parameters(false);
  TDDP_CHECK(items.contains(key), "ParameterDict: no parameter '{}' (keys: {})", key, fmt::join(items.keys(), ", "));
  return items.at(key);
}

std::string ParameterDict::extra_repr() const {
  std::string s;
  for (const auto& [key, p] : named_parameters(false)) {
    s += fmt::format("{}  ({}): Parameter containing: [{} of size {}{}]", s.empty() ? "" : "\n", key, torch_typename(p),
                     size_string(p), device_string(p));
  }
  return s;
}

Tensor ParameterDict::forward(const Tensor& /*input*/) { return container_forward(*this, size()); }

std::shared_ptr<Module> ParameterDict::clone_structure() const {
  auto copy = std::make_shared<ParameterDict>();
  for (const auto& [key, p] : named_parameters(false))
    copy->insert(key, blank_like(p).requires_grad_(p.requires_grad()));
  copy->train(is_training());
  return copy;
}

}  // namespace tinyddp::nn
