// ModuleList and ModuleDict (containers.h): children registered under their index or key.
#include "tinyddp/nn/containers.h"

#include <fmt/format.h>

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

}  // namespace tinyddp::nn
