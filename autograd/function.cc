// Custom autograd functions (function.h): FunctionCtx's saved tensors and marked outputs, and
// the node name a function's backward carries in the graph.
#include "tinyddp/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>

namespace tinyddp::autograd {

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

std::string function_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  const size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name + "Backward";
}

}  // namespace detail

}  // namespace tinyddp::autograd
