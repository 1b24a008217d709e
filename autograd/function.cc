// Custom autograd functions (function.h): FunctionCtx's saved tensors and marked outputs, its
// saved_data's errors, and the node name a function's backward carries in the graph.
#include "tinyddp/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>

#include <fmt/format.h>

namespace tinyddp::autograd {

namespace {

// A type's name as written in C++ ("double", "std::vector<long, ...>").
std::string type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : type.name();
  std::free(demangled);
  return name;
}

}  // namespace

const std::any& SavedData::at(const std::string& key) const {
  const auto found = values_.find(key);
  if (found != values_.end()) return found->second;
  std::string keys;
  for (const auto& [name, value] : values_) keys += (keys.empty() ? "'" : ", '") + name + "'";
  throw Error(fmt::format("{}: saved_data has no '{}' (forward saved {})", function_, key,
                          keys.empty() ? "nothing there" : keys));
}

void SavedData::wrong_type(const std::string& key, const std::any& value, const std::type_info& asked) const {
  throw Error(fmt::format("{}: saved_data['{}'] holds a {}, read as a {}", function_, key, type_name(value.type()),
                          type_name(asked)));
}

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) { to_save_ = std::move(tensors); }

void FunctionCtx::mark_output(const Tensor& output) {
  saved_.clear();
  for (const Tensor& t : to_save_) {
    // The output itself (same storage, same place): kept as a detached alias by SavedTensor.
    const bool is_output = t.defined() && t.storage().data() == output.storage().data() &&
                           t.raw_data_ptr() == output.raw_data_ptr() && t.sizes() == output.sizes();
    saved_.emplace_back(t, is_output);
  }
  to_save_.clear();
}

std::vector<Tensor> FunctionCtx::get_saved_variables() const {
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const tensor::SavedTensor& s : saved_) out.push_back(s.get(name_.c_str()));
  return out;
}

namespace detail {

void rethrow_bad_any_cast(const FunctionCtx& ctx) {
  throw Error(
      fmt::format("{}: backward read a saved_data value as another type than forward stored (std::bad_any_cast); "
                  "ctx->saved_data.get<T>(key) names the key and both types",
                  ctx.name()));
}

std::string function_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  // Without the namespaces, which end before a template's arguments ("ns::Op<ns::T>": Op<ns::T>).
  const size_t colon = name.substr(0, name.find('<')).rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name + "Backward";
}

}  // namespace detail

}  // namespace tinyddp::autograd
