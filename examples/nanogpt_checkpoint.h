// train_gpt's nanoGPT mode, its checkpoints: what a run keeps in out_dir so that
// init_from=resume continues it exactly, number for number, as if it had not stopped.
//   out_dir/ckpt.safetensors          rank 0: the model, AdamW, the iteration, best_val_loss,
//                                     the model arguments (n_layer, n_head, n_embd,
//                                     block_size, bias, vocab_size), rank 0's generator
//                                     and the batch it holds for its next micro-step
//   out_dir/ckpt.rank<r>.safetensors  every other rank: its generator and its batch
// Each is written whole or not at all (a temporary file renamed over it), with the world size
// it was written at. nanoGPT's own checkpoints keep no generator or batch, so its resumed runs
// draw anew; these do not, unless the world has another size now (an elastic job that lost or
// gained a node): then the other ranks' streams no longer fit, and every rank starts a fresh
// one, seeded seed + rank as at the start (nanoGPT's seed_offset).
#pragma once

#include <map>
#include <string>

#include "examples/nanogpt_train.h"
#include "tinyddp/nn/optim.h"
#include "tinyddp/nn/transformer.h"

namespace tinyddp::examples {

struct NanoGptState {
  int64_t iter = 0;  // the iteration about to run its micro-steps (its evaluation is done)
  float best_val_loss = 1e9f;
  tensor::Tensor x, y;  // the batch of the next micro-step
  // Resumed at another world size than the checkpoint's (its size then): no generator or batch
  // was restored; the caller seeds seed + rank and draws the next batch. 0 otherwise.
  int fresh_streams_from_world = 0;
  // Extra metadata rank 0's checkpoint carries, and gets back on resume: keys starting
  // "deterministic." (DDP's deterministic state, train_exact.h).
  std::map<std::string, std::string> metadata;
};

void save_nanogpt_state(const NanoGptConfig& config, int rank, int world, const nn::GPT& model,
                        const nn::Optimizer& optimizer, const NanoGptState& state);

// out_dir's checkpoint: out_dir/ckpt.safetensors.
std::string checkpoint_path(const std::string& out_dir);

// What a checkpoint's metadata records of its run: the model arguments and the dataset.
// Throws naming the file and the first key it lacks.
struct CheckpointArgs {
  nn::GPTConfig model;
  std::string dataset;
};
CheckpointArgs checkpoint_args(const std::map<std::string, std::string>& metadata, const std::string& path);

// init_from=resume, before the model is built: the model arguments from rank 0's checkpoint
// replace the configuration's (as nanoGPT's resume does). Throws naming a missing or
// unreadable checkpoint.
void use_checkpoint_model_args(NanoGptConfig& config);

// Loads the model, AdamW and, at the checkpoint's world size, this rank's generator and batch;
// returns where the run stands.
NanoGptState resume_nanogpt_state(const NanoGptConfig& config, int rank, int world, nn::GPT& model,
                                  nn::Optimizer& optimizer, tensor::Device device);

}  // namespace tinyddp::examples
