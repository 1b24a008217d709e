// Module and optimizer checkpoints (checkpoint.h): state dicts to and from safetensors files,
// written to a temporary file and renamed so that a crash never leaves half a checkpoint,
// and the combined training checkpoint (model, optimizer, step).
#include "tinyddp/nn/checkpoint.h"

#include <signal.h>

#include <cerrno>
#include <filesystem>

#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/random.h"

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
  TDDP_CHECK(kind != file.metadata.end(),
             "load_optimizer_state: {} holds no optimizer state (no tinyddp_optimizer metadata)", path);
  TDDP_CHECK(kind->second == optimizer.name(), "load_optimizer_state: {} holds {} state, not {}", path, kind->second,
             optimizer.name());
  optimizer.load_state_dict(file.tensors);
}

// ---- one-file training checkpoints ------------------------------------------------------------

namespace {

constexpr const char* kCheckpointVersion = "1";
constexpr const char* kUserPrefix = "user.";

// The one place a checkpoint key is parsed: "model.x" -> (model, x), and so on.
struct CheckpointParts {
  OrderedDict<Tensor> model, optimizer, extra;
};

CheckpointParts split_keys(const OrderedDict<Tensor>& tensors, const std::string& path) {
  CheckpointParts parts;
  for (const auto& [key, t] : tensors) {
    const size_t dot = key.find('.');
    const std::string section = key.substr(0, dot), name = dot == std::string::npos ? "" : key.substr(dot + 1);
    TDDP_CHECK(!name.empty() && (section == "model" || section == "optimizer" || section == "extra"),
               "load_checkpoint: {} holds '{}', which is not model.<name>, optimizer.<key> or extra.<name>", path, key);
    (section == "model" ? parts.model : section == "optimizer" ? parts.optimizer : parts.extra).insert(name, t);
  }
  return parts;
}

// Detached copies, to put a module's state back if loading fails half way.
OrderedDict<Tensor> copy_of(const OrderedDict<Tensor>& state) {
  OrderedDict<Tensor> copy;
  for (const auto& [name, t] : state) copy.insert(name, t.detach().clone());
  return copy;
}

}  // namespace

std::vector<std::string> remove_stale_checkpoint_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::vector<std::string> removed;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    // kill(pid, 0) fails with ESRCH when no such process exists: its writer is gone.
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code remove_error;
      if (fs::remove(entry.path(), remove_error)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer, int64_t step,
                     const OrderedDict<Tensor>& extra, const std::map<std::string, std::string>& metadata) {
  TDDP_CHECK(step >= 0, "save_checkpoint: step must be non-negative, got {}", step);
  remove_stale_checkpoint_temporaries(path);
  OrderedDict<Tensor> all;
  for (const auto& [name, t] : model.state_dict()) all.insert("model." + name, t);
  for (const auto& [key, t] : optimizer.state_dict()) all.insert("optimizer." + key, t);
  for (const auto& [name, t] : extra) all.insert("extra." + name, t);
  std::map<std::string, std::string> meta = {
      {"tinyddp_checkpoint", kCheckpointVersion},
      {"step", std::to_string(step)},
      {"tinyddp_optimizer", optimizer.name()},
      {"tinyddp_module", model.type_name()},
  };
  {
    tensor::Generator& g = tensor::default_generator();
    const std::lock_guard<std::mutex> lock(g.mutex());
    meta["rng.cpu"] = g.get_state();
  }
  for (const auto& [key, value] : metadata) meta[kUserPrefix + key] = value;
  save_safetensors(path, all, meta);
}

TrainingCheckpoint load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer, bool strict) {
  remove_stale_checkpoint_temporaries(path);
  const SafetensorsFile file = load_safetensors(path);
  const auto meta = [&](const char* key) -> const std::string& {
    const auto it = file.metadata.find(key);
    TDDP_CHECK(it != file.metadata.end(), "load_checkpoint: {} is not a training checkpoint (no '{}' in its metadata)",
               path, key);
    return it->second;
  };
  TDDP_CHECK(meta("tinyddp_checkpoint") == kCheckpointVersion,
             "load_checkpoint: {} has checkpoint format {}, this build reads {}", path, meta("tinyddp_checkpoint"),
             kCheckpointVersion);
  TDDP_CHECK(meta("tinyddp_optimizer") == optimizer.name(), "load_checkpoint: {} holds {} state, the optimizer is {}",
             path, meta("tinyddp_optimizer"), optimizer.name());
  TrainingCheckpoint result;
  const std::string& step = meta("step");
  TDDP_CHECK(!step.empty() && step.find_first_not_of("0123456789") == std::string::npos && step.size() < 19,
             "load_checkpoint: {} has a bad step '{}'", path, step);
  result.step = std::stoll(step);
  CheckpointParts parts = split_keys(file.tensors, path);
  tensor::Generator probe;
  probe.set_state(meta("rng.cpu"));  // throws on a bad state before anything changes

  // Everything that can be checked is checked; now the model (all or nothing), then the
  // optimizer, putting the model back if the optimizer refuses its state.
  const OrderedDict<Tensor> before = copy_of(model.state_dict());
  try {
    model.load_state_dict(parts.model, strict);
  } catch (const Error& e) {
    throw Error(fmt::format("load_checkpoint: {} (from {})", e.what(), path));
  }
  try {
    optimizer.load_state_dict(parts.optimizer);
  } catch (const Error& e) {
    model.load_state_dict(before);
    throw Error(fmt::format("load_checkpoint: {} (from {})", e.what(), path));
  }
  {
    tensor::Generator& g = tensor::default_generator();
    const std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(meta("rng.cpu"));
  }
  result.extra = std::move(parts.extra);
  for (const auto& [key, value] : file.metadata) {
    if (key.rfind(kUserPrefix, 0) == 0) result.metadata[key.substr(std::string(kUserPrefix).size())] = value;
  }
  return result;
}

}  // namespace tinyddp::nn
