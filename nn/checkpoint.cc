// Module and optimizer checkpoints: see checkpoint.h.
#include "tinyddp/nn/checkpoint.h"

#include "tinyddp/nn/safetensors.h"

namespace tinyddp::nn {

void save_state_dict(const Module& module, const std::string& path) {
  save_safetensors(path, module.state_dict(), {{"tinyddp_module", module.type_name()}});
}

void load_state_dict(Module& module, const std::string& path, bool strict) {
  const SafetensorsFile file = load_safetensors(path);
  try {
    module.load_state_dict(file.tensors, strict);
  } catch (const Error& e) {
    throw Error(fmt::format("{} (from {})", e.what(), path));
  }
}

void save_optimizer_state(const Optimizer& optimizer, const std::string& path) {
  save_safetensors(path, optimizer.state_dict(), {{"tinyddp_optimizer", optimizer.name()}});
}

void load_optimizer_state(Optimizer& optimizer, const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const auto kind = file.metadata.find("tinyddp_optimizer");
  TDDP_CHECK(kind != file.metadata.end(), "load_optimizer_state: {} holds no optimizer state (no tinyddp_optimizer metadata)",
             path);
  TDDP_CHECK(kind->second == optimizer.name(), "load_optimizer_state: {} holds {} state, not {}", path, kind->second,
             optimizer.name());
  optimizer.load_state_dict(file.tensors);
}

}  // namespace tinyddp::nn
