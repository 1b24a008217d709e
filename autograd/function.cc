// Custom autograd functions (function.h): FunctionCtx's saved tensors and marked outputs, its
// saved_data's errors, and the node name a function's backward carries in the graph.
#include "tinyddp/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "tinyddp/tensor/factory.h"

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

void FunctionCtx::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

namespace {
// The same elements of the same storage (a fresh handle of a tensor, e.g. its detach()).
bool same_elements(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage().data() == b.storage().data() &&
         a.raw_data_ptr() == b.raw_data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides();
}
}  // namespace

std::vector<bool> mark_outputs(FunctionCtx& ctx, const std::vector<Tensor>& outputs) {
  std::vector<bool> differentiable(outputs.size(), true);
  for (size_t k = 0; k < outputs.size(); ++k) {
    for (const Tensor& t : ctx.non_differentiable_)
      differentiable[k] = differentiable[k] && !same_elements(t, outputs[k]);
  }
  ctx.non_differentiable_.clear();
  ctx.saved_.clear();
  for (const Tensor& t : ctx.to_save_) {
    // A differentiable output itself: kept as a detached alias by SavedTensor, with its number
    // among the node's outputs (the differentiable ones).
    bool is_output = false;
    uint32_t output_nr = 0;
    for (size_t k = 0, nr = 0; k < outputs.size() && !is_output; ++k) {
      if (!differentiable[k]) continue;
      is_output = same_elements(t, outputs[k]);
      if (!is_output) ++nr;
      output_nr = static_cast<uint32_t>(nr);
    }
    ctx.saved_.emplace_back(t, is_output, output_nr);
  }
  ctx.to_save_.clear();
  return differentiable;
}

std::vector<Tensor> FunctionCtx::get_saved_variables() const {
  std::vector<Tensor> out;
  out.reserve(saved_.size());
  for (const tensor::SavedTensor& s : saved_) out.push_back(s.get(name_.c_str()));
  return out;
}

namespace detail {

namespace {

[[noreturn]] void rethrow_bad_any_cast(const FunctionCtx& ctx) {
  throw Error(
      fmt::format("{}: backward read a saved_data value as another type than forward stored (std::bad_any_cast); "
                  "ctx->saved_data.get<T>(key) names the key and both types",
                  ctx.name()));
}

// backward's gradients, one per argument of forward, as the node's: one per tensor argument.
// `positions`: where the tensor arguments sit among the `count` arguments.
std::vector<Tensor> per_input(const FunctionCtx& ctx, const std::vector<Tensor>& grads,
                              const std::vector<size_t>& positions, size_t count) {
  TDDP_CHECK(grads.size() == count,
             "{}: backward returned {} gradients for the {} arguments of forward (one per argument, undefined for "
             "non-tensors)",
             ctx.name(), grads.size(), count);
  std::vector<Tensor> out;
  out.reserve(positions.size());
  size_t next = 0;
  for (size_t k = 0; k < count; ++k) {
    if (next < positions.size() && positions[next] == k) {
      out.push_back(grads[k]);
      ++next;
    } else {
      TDDP_CHECK(!grads[k].defined(),
                 "{}: backward returned a gradient for argument {}, which is not a tensor (return an undefined "
                 "Tensor() there)",
                 ctx.name(), k);
    }
  }
  return out;
}

}  // namespace

bool needs_node(FunctionCtx& ctx, const Arguments& arguments) {
  bool record = false;
  if (tensor::GradMode::is_enabled()) {
    for (const Tensor& t : arguments.tensors) record = record || (t.defined() && t.requires_grad());
  }
  ctx.needs_input_grad.assign(arguments.count, false);
  for (size_t i = 0; i < arguments.tensors.size(); ++i) {
    const Tensor& t = arguments.tensors[i];
    ctx.needs_input_grad[arguments.positions[i]] = record && t.defined() && t.requires_grad();
  }
  return record;
}

void record_outputs(const std::shared_ptr<FunctionCtx>& ctx, const Arguments& arguments, std::vector<Tensor>& outputs,
                    bool single, bool record, BackwardOf backward) {
  TDDP_CHECK(!outputs.empty(), "{}: forward returned no tensors", ctx->name());
  for (size_t k = 0; k < outputs.size(); ++k) {
    TDDP_CHECK(outputs[k].defined(), "{}: forward returned an undefined tensor{}", ctx->name(),
               single ? std::string() : fmt::format(" as output {}", k));
  }
  if (!record) return;  // no node: the context is dropped with everything it saved
  // Fresh handles: the forward may have returned an input itself.
  for (Tensor& output : outputs) output = output.detach();
  const std::vector<bool> differentiable = mark_outputs(*ctx, outputs);
  std::vector<Tensor> recorded;
  struct Like {  // what a zero gradient of an output looks like
    tensor::Shape shape;
    tensor::DType dtype;
    tensor::Device device;
  };
  std::vector<Like> like;
  for (size_t k = 0; k < outputs.size(); ++k) {
    like.push_back({outputs[k].sizes(), outputs[k].dtype(), outputs[k].device()});
    if (differentiable[k]) recorded.push_back(outputs[k]);
  }
  if (recorded.empty()) return;  // every output marked non-differentiable
  // The node keeps where the tensor arguments sit, not the tensors (their data would live on).
  auto run = [ctx, positions = arguments.positions, count = arguments.count, differentiable, like,
              backward](const std::vector<Tensor>& node_grads) {
    std::vector<Tensor> grads(like.size());
    for (size_t k = 0, r = 0; k < like.size(); ++k) {
      if (differentiable[k]) grads[k] = node_grads[r++];
      if (!grads[k].defined() && ctx->materialize_grads())
        grads[k] = tensor::zeros(like[k].shape, tensor::TensorOptions(like[k].dtype).device(like[k].device));
    }
    try {
      return per_input(*ctx, backward(ctx.get(), grads), positions, count);
    } catch (const std::bad_any_cast&) {
      rethrow_bad_any_cast(*ctx);
    }
  };
  const std::string name = ctx->name();
  if (single) {
    tensor::record_op(name.c_str(), recorded.front(), arguments.tensors,
                      [run](const Tensor& grad) { return run({grad}); });
  } else {
    tensor::record_multi_op(name.c_str(), recorded, arguments.tensors, run);
  }
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
