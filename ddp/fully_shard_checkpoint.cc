// Sharded training checkpoints of fully_shard (fully_shard.h): one file per rank with its
// shards and its optimizer's state, written atomically, read back at the same world size.
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/fully_shard_registry.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::ddp {

using tensor::Tensor;

namespace {

// The files of `path` that another world size wrote ("<path>.rank0-of-3, ..."), for messages.
std::string other_files(const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::string found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(p.filename().string() + ".rank", 0) == 0) found += (found.empty() ? "" : ", ") + name;
  }
  return found.empty() ? "none" : found;
}

}  // namespace

std::string sharded_checkpoint_file(const std::string& path, int rank, int world) {
  return fmt::format("{}.rank{}-of-{}", path, rank, world);
}

void save_sharded_checkpoint(const std::string& path, const nn::Module& module, const nn::Optimizer& optimizer,
                             comm::ProcessGroup& pg, int64_t step, const nn::OrderedDict<Tensor>& extra) {
  TDDP_CHECK(step >= 0, "save_sharded_checkpoint: step must be non-negative, got {}", step);
  nn::OrderedDict<Tensor> all;
  const nn::OrderedDict<Tensor> params = module.named_registered_parameters();
  for (const auto& [name, value] : module.state_dict()) {
    const Tensor* param = params.find(name);
    const Tensor shard = param != nullptr ? detail::shard_of(*param) : Tensor();
    all.insert(shard.defined() ? "shard." + name : "model." + name, shard.defined() ? shard.detach() : value);
  }
  for (const auto& [key, t] : optimizer.state_dict()) all.insert("optimizer." + key, t);
  for (const auto& [name, t] : extra) all.insert("extra." + name, t);
  std::map<std::string, std::string> meta = {{"tinyddp_sharded_checkpoint", "1"},
                                             {"step", std::to_string(step)},
                                             {"rank", std::to_string(pg.rank())},
                                             {"world_size", std::to_string(pg.size())},
                                             {"tinyddp_optimizer", optimizer.name()}};
  {
    tensor::Generator& g = tensor::default_generator();
    const std::lock_guard<std::mutex> lock(g.mutex());
    meta["rng.cpu"] = g.get_state();
  }
  // Atomically: a temporary next to it, renamed over it; then every rank waits for the others,
  // so that no file of this step is missing once any rank goes on.
  const std::string file = sharded_checkpoint_file(path, pg.rank(), pg.size());
  const std::string temporary = file + ".tmp";
  nn::save_safetensors(temporary, all, meta);
  std::filesystem::rename(temporary, file);
  pg.barrier()->wait();
}

nn::TrainingCheckpoint load_sharded_checkpoint(const std::string& path, nn::Module& module, nn::Optimizer& optimizer,
                                               comm::ProcessGroup& pg) {
  const std::string file = sharded_checkpoint_file(path, pg.rank(), pg.size());
  TDDP_CHECK(std::filesystem::exists(file),
             "load_sharded_checkpoint: no file {} for rank {} of {}: a sharded checkpoint loads at the world size "
             "that saved it (files of {}: {})",
             file, pg.rank(), pg.size(), path, other_files(path));
  const nn::SafetensorsFile saved = nn::load_safetensors(file);
  const auto meta = [&](const char* key) -> std::string {
    const auto it = saved.metadata.find(key);
    TDDP_CHECK(it != saved.metadata.end(), "load_sharded_checkpoint: {} is not a sharded checkpoint (no '{}')", file,
               key);
    return it->second;
  };
  TDDP_CHECK(meta("tinyddp_optimizer") == optimizer.name(),
             "load_sharded_checkpoint: {} holds the state of {}, not of this {}", file, meta("tinyddp_optimizer"),
             optimizer.name());
  tensor::NoGradGuard no_grad;
  const nn::OrderedDict<Tensor> params = module.named_registered_parameters();
  for (const auto& [name, value] : module.state_dict()) {
    const Tensor* param = params.find(name);
    const Tensor shard = param != nullptr ? detail::shard_of(*param) : Tensor();
    const std::string key = shard.defined() ? "shard." + name : "model." + name;
    const Tensor* stored = saved.tensors.find(key);
    TDDP_CHECK(stored != nullptr, "load_sharded_checkpoint: {} has no '{}' (another model, or sharded otherwise)", file,
               key);
    const Tensor& into = shard.defined() ? shard : value;
    TDDP_CHECK(stored->sizes() == into.sizes(), "load_sharded_checkpoint: '{}' in {} has shape {}, the model's {}", key,
               file, tensor::format_shape(stored->sizes()), tensor::format_shape(into.sizes()));
    into.copy_(*stored);
  }
  nn::OrderedDict<Tensor> state;
  nn::TrainingCheckpoint out;
  for (const auto& [key, t] : saved.tensors) {
    if (key.rfind("optimizer.", 0) == 0) state.insert(key.substr(10), t);
    if (key.rfind("extra.", 0) == 0) out.extra.insert(key.substr(6), t);
  }
  optimizer.load_state_dict(state);
  {
    tensor::Generator& g = tensor::default_generator();
    const std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(meta("rng.cpu"));
  }
  out.step = std::stoll(meta("step"));
  return out;
}

}  // namespace tinyddp::ddp
