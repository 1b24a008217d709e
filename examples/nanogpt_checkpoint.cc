// train_gpt's nanoGPT mode, its checkpoints (nanogpt_checkpoint.h).
#include "examples/nanogpt_checkpoint.h"

#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/nn/checkpoint.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::examples {

namespace {

namespace fs = std::filesystem;

std::string main_path(const NanoGptConfig& config) { return checkpoint_path(config.out_dir); }

std::string rank_path(const NanoGptConfig& config, int rank) {
  return (fs::path(config.out_dir) / fmt::format("ckpt.rank{}.safetensors", rank)).string();
}

std::string metadata_of(const std::map<std::string, std::string>& metadata, const std::string& key,
                        const std::string& path) {
  const auto it = metadata.find(key);
  TDDP_CHECK(it != metadata.end(), "{} has no '{}' (not a checkpoint of train_gpt --dataset)", path, key);
  return it->second;
}

}  // namespace

std::string checkpoint_path(const std::string& out_dir) { return (fs::path(out_dir) / "ckpt.safetensors").string(); }

CheckpointArgs checkpoint_args(const std::map<std::string, std::string>& metadata, const std::string& path) {
  const auto arg = [&](const char* name) {
    return std::stoll(metadata_of(metadata, fmt::format("user.model_args.{}", name), path));
  };
  CheckpointArgs args;
  args.model.n_layer = arg("n_layer");
  args.model.n_head = arg("n_head");
  args.model.n_embd = arg("n_embd");
  args.model.block_size = arg("block_size");
  args.model.bias = arg("bias") != 0;
  args.model.vocab_size = arg("vocab_size");
  args.dataset = metadata_of(metadata, "user.config.dataset", path);
  return args;
}

void save_nanogpt_state(const NanoGptConfig& config, int rank, int world, const nn::GPT& model,
                        const nn::Optimizer& optimizer, const NanoGptState& state) {
  nn::OrderedDict<tensor::Tensor> batch;
  batch.insert("X", state.x);
  batch.insert("Y", state.y);
  if (rank == 0) {
    const nn::GPTConfig& c = model.config;
    std::map<std::string, std::string> metadata{{"iter_num", std::to_string(state.iter)},
                                                {"best_val_loss", fmt::format("{}", state.best_val_loss)},
                                                {"model_args.n_layer", std::to_string(c.n_layer)},
                                                {"model_args.n_head", std::to_string(c.n_head)},
                                                {"model_args.n_embd", std::to_string(c.n_embd)},
                                                {"model_args.block_size", std::to_string(c.block_size)},
                                                {"model_args.bias", c.bias ? "1" : "0"},
                                                {"model_args.vocab_size", std::to_string(c.vocab_size)},
                                                {"config.dataset", config.dataset},
                                                {"world_size", std::to_string(world)}};
    metadata.insert(state.metadata.begin(), state.metadata.end());
    nn::save_checkpoint(main_path(config), model, optimizer, state.iter, batch, metadata);
    return;
  }
  const std::string path = rank_path(config, rank), temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  nn::save_safetensors(
      temporary, batch,
      {{"iter_num", std::to_string(state.iter)}, {"rng.cpu", tensor::default_generator().get_state()}});
  fs::rename(temporary, path);
}

void use_checkpoint_model_args(NanoGptConfig& config) {
  const std::string path = main_path(config);
  TDDP_CHECK(fs::exists(path), "init_from=resume: no checkpoint at {} (a run with out_dir={} saves one there)", path,
             config.out_dir);
  const nn::GPTConfig model = checkpoint_args(nn::load_safetensors(path).metadata, path).model;
  config.n_layer = model.n_layer;
  config.n_head = model.n_head;
  config.n_embd = model.n_embd;
  config.block_size = model.block_size;
  config.bias = model.bias;
  config.vocab_size = model.vocab_size;
}

NanoGptState resume_nanogpt_state(const NanoGptConfig& config, int rank, int world, nn::GPT& model,
                                  nn::Optimizer& optimizer, tensor::Device device) {
  const std::string path = main_path(config);
  const nn::TrainingCheckpoint checkpoint = nn::load_checkpoint(path, model, optimizer);  // rank 0's generator too
  NanoGptState state;
  state.iter = std::stoll(metadata_of(checkpoint.metadata, "iter_num", path));
  state.best_val_loss = std::stof(metadata_of(checkpoint.metadata, "best_val_loss", path));
  for (const auto& [key, value] : checkpoint.metadata) {
    if (key.rfind("deterministic.", 0) == 0) state.metadata[key] = value;
  }
  // A checkpoint from before the world size was recorded is taken to be of this world.
  const auto saved_world = checkpoint.metadata.find("world_size");
  const int written_at = saved_world == checkpoint.metadata.end() ? world : std::stoi(saved_world->second);
  if (config.deterministic) {
    rank = 0;  // every rank draws one process's stream: rank 0's generator and batch, on any world
  } else if (written_at != world) {
    state.fresh_streams_from_world = written_at;
    return state;
  }
  nn::OrderedDict<tensor::Tensor> batch = checkpoint.extra;
  if (rank != 0) {
    const std::string mine = rank_path(config, rank);
    TDDP_CHECK(fs::exists(mine), "init_from=resume: rank {} has no {} (it is written with {})", rank, mine, path);
    const nn::SafetensorsFile file = nn::load_safetensors(mine);
    const int64_t iter = std::stoll(metadata_of(file.metadata, "iter_num", mine));
    TDDP_CHECK(iter == state.iter, "init_from=resume: {} is of iteration {}, {} of iteration {}", mine, iter, path,
               state.iter);
    tensor::default_generator().set_state(metadata_of(file.metadata, "rng.cpu", mine));
    batch = file.tensors;
  }
  TDDP_CHECK(batch.contains("X") && batch.contains("Y"), "init_from=resume: {} holds no batch", path);
  state.x = batch.at("X").to(device);
  state.y = batch.at("Y").to(device);
  return state;
}

}  // namespace tinyddp::examples
