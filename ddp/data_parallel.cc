// DataParallel (data_parallel.h): its four steps as functions of their own, scatter (the
// batch split across the devices), replicate (the module copied to each), parallel_apply (a
// thread per device) and gather (the outputs on the first device).
#include "tinyddp/ddp/data_parallel.h"

#include <exception>
#include <thread>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace {
constexpr const char* kName = "DataParallel";

// Every (module, replica) pair of two trees of the same structure, parents first.
void each_pair(nn::Module& a, nn::Module& b, const std::function<void(nn::Module&, nn::Module&)>& f) {
  f(a, b);
  const auto& ca = a.named_children();
  const auto& cb = b.named_children();
  auto it = cb.begin();
  for (const auto& [name, child] : ca) {
    TDDP_CHECK(it != cb.end() && it->first == name, "{}: a copy of {} lacks its child '{}'", kName, a.type_name(),
               name);
    each_pair(*child, *it->second, f);
    ++it;
  }
}

// `target`'s handle now shows `source` (storage, geometry and autograd history): every module
// member that holds the target tensor sees the source from now on.
void become(const Tensor& target, const Tensor& source) { *target.impl() = *source.impl(); }
}  // namespace

std::vector<std::vector<Tensor>> scatter(const std::vector<Tensor>& inputs, const std::vector<Device>& devices,
                                         int64_t dim) {
  TDDP_CHECK(!devices.empty(), "scatter: no devices given");
  TDDP_CHECK(!inputs.empty(), "scatter: no inputs given");
  size_t chunks = devices.size();
  std::vector<std::vector<Tensor>> pieces;
  for (const Tensor& input : inputs) {
    TDDP_CHECK(input.defined() && input.dim() > 0, "scatter: inputs must be tensors of at least one dim");
    pieces.push_back(tensor::chunk(input, static_cast<int64_t>(devices.size()), dim));
    chunks = std::min(chunks, pieces.back().size());
  }
  std::vector<std::vector<Tensor>> out(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    for (const auto& p : pieces) out[i].push_back(p[i].to(devices[i]));
  }
  return out;
}

std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices) {
  TDDP_CHECK(module != nullptr, "replicate: the module is null");
  std::vector<std::shared_ptr<nn::Module>> replicas;
  const nn::OrderedDict<Tensor> params = module->named_parameters(), buffers = module->named_buffers();
  for (size_t r = 0; r < devices.size(); ++r) {
    // The copy's values come from the module below: its constructors draw nothing.
    std::shared_ptr<nn::Module> copy;
    {
      nn::SkipInitGuard skip_init;
      copy = module->clone_structure();
    }
    // (No copy->to(device): every parameter and buffer is replaced below.)
    // Each copy runs its original's hooks (the same lists, as PyTorch's shallow copy shares them).
    each_pair(*module, *copy, [](nn::Module& a, nn::Module& b) {
      b.train(a.is_training());
      b.share_hooks(a);
    });
    for (const auto& [name, p] : copy->named_parameters()) {
      const Tensor& original = params.at(name);
      // An autograd copy: its gradient flows back into the original parameter.
      const Tensor alias = original.device() == devices[r] ? original.view(original.sizes()) : original.to(devices[r]);
      become(p, original.requires_grad() ? alias : alias.detach());
    }
    for (const auto& [name, b] : copy->named_buffers()) {
      const Tensor& original = buffers.at(name);
      if (r == 0 && original.device() == devices[r]) {
        become(b, original);  // the module's own buffers: replica 0's updates are the module's
      } else {
        tensor::NoGradGuard no_grad;
        become(b, original.to(devices[r]).clone());
      }
    }
    replicas.push_back(std::move(copy));
  }
  return replicas;
}

std::vector<std::vector<Tensor>> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                                const std::vector<std::vector<Tensor>>& inputs) {
  TDDP_CHECK(replicas.size() == inputs.size(), "parallel_apply: {} replicas but {} sets of inputs", replicas.size(),
             inputs.size());
  std::vector<std::vector<Tensor>> outputs(replicas.size());
  std::vector<std::exception_ptr> errors(replicas.size());
  const bool grad_enabled = tensor::GradMode::is_enabled();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replicas.size(); ++i) {
    threads.emplace_back([&, i] {
      tensor::GradMode::set_enabled(grad_enabled);  // grad mode is per thread
      try {
        outputs[i] = replicas[i]->call(inputs[i]);  // the module's hooks run on each replica
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      throw Error(fmt::format("parallel_apply: replica {} failed: {}", i, e.what()));
    }
  }
  return outputs;
}

std::vector<Tensor> gather(const std::vector<std::vector<Tensor>>& outputs, Device target, int64_t dim) {
  TDDP_CHECK(!outputs.empty(), "gather: no outputs given");
  std::vector<Tensor> joined;
  for (size_t j = 0; j < outputs.front().size(); ++j) {
    std::vector<Tensor> parts;
    for (size_t i = 0; i < outputs.size(); ++i) {
      TDDP_CHECK(outputs[i].size() == outputs.front().size(), "gather: replica {} gave {} outputs, replica 0 {}", i,
                 outputs[i].size(), outputs.front().size());
      const Tensor& t = outputs[i][j];
      parts.push_back((t.dim() == 0 ? t.reshape({1}) : t).to(target));
    }
    joined.push_back(tensor::cat(parts, outputs.front()[j].dim() == 0 ? 0 : dim));
  }
  return joined;
}

// ---- DataParallel -----------------------------------------------------------------------------

DataParallel::DataParallel(std::shared_ptr<nn::Module> module_, std::optional<std::vector<Device>> device_ids,
                           std::optional<Device> output_device, int64_t dim)
    : nn::Module(kName), dim_(dim) {
  TDDP_CHECK(module_ != nullptr, "{}: the module is null", kName);
  module = register_module("module", std::move(module_));
  if (device_ids) {
    TDDP_CHECK(!device_ids->empty(), "{}: device_ids is empty (give at least one device, or leave it unset)", kName);
    device_ids_ = *device_ids;
  } else {
    for (int d = 0; d < (tensor::cuda::is_available() ? tensor::cuda::device_count() : 0); ++d) {
      device_ids_.push_back(Device(tensor::DeviceType::kCUDA, d));
    }
  }
  output_device_ = output_device.value_or(device_ids_.empty() ? Device() : device_ids_.front());
  if (!device_ids_.empty()) check_module_device();
}

void DataParallel::check_module_device() const {
  // (named_parameters and named_buffers, not state_dict: no detached copies on every forward)
  nn::OrderedDict<Tensor> tensors = module->named_parameters();
  for (const auto& [name, t] : module->named_buffers()) tensors.insert(name, t);
  for (const auto& [name, t] : tensors) {
    TDDP_CHECK(t.device() == device_ids_.front(),
               "{}: the module must have its parameters and buffers on device {} (device_ids[0]) but found '{}' "
               "on device {}",
               kName, device_ids_.front().str(), name, t.device().str());
  }
}

Tensor DataParallel::forward(const Tensor& input) {
  const std::vector<Tensor> out = forward_many({input});
  TDDP_CHECK(out.size() == 1, "{}: the module returned {} outputs; call it with forward_many", kName, out.size());
  return out.front();
}

std::vector<Tensor> DataParallel::forward_many(const std::vector<Tensor>& inputs) {
  if (device_ids_.empty()) return module->call(inputs);  // no devices: the module itself
  check_module_device();
  const std::vector<std::vector<Tensor>> chunks = scatter(inputs, device_ids_, dim_);
  if (chunks.size() == 1) return module->call(chunks.front());  // one device: no copies needed
  const std::vector<Device> used(device_ids_.begin(), device_ids_.begin() + static_cast<int64_t>(chunks.size()));
  return gather(parallel_apply(replicate(module, used), chunks), output_device_, dim_);
}

}  // namespace tinyddp::ddp
