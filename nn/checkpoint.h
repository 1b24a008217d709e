// Checkpoints as safetensors files (see safetensors.h): a module's weights, an optimizer's
// state, and one-file training checkpoints that hold both with the step, any other state (a
// scheduler's) and the random generator, written atomically.
#pragma once

#include <map>
#include <string>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/optim.h"

namespace tinyddp::nn {

// The module's state_dict(), named as in named_parameters() (+ buffers).
void save_state_dict(const Module& module, const std::string& path);
// Loads and validates the file, then module.load_state_dict(...): any problem with the file
// or its names/shapes throws and leaves the module unchanged.
void load_state_dict(Module& module, const std::string& path, bool strict = true);

// The optimizer's state ("state.<i>.<key>") plus its kind in the metadata.
void save_optimizer_state(const Optimizer& optimizer, const std::string& path);
void load_optimizer_state(Optimizer& optimizer, const std::string& path);

// ---- One-file training checkpoints --------------------------------------------------------
// Keys: "model.<name>" (the module's state_dict), "optimizer.<key>" (its state_dict, as
// save_optimizer_state writes it), "extra.<name>" (whatever else the caller keeps: a
// scheduler's state, an EMA of the weights). Metadata: "tinyddp_checkpoint" (the format
// version), "step", "tinyddp_optimizer" (its kind), "rng.cpu" (the default generator's state,
// which also draws every CUDA tensor's random numbers), and the caller's entries as "user.<key>".
// scripts/load_optimizer_state_in_torch.py --checkpoint loads one into PyTorch.
struct TrainingCheckpoint {
  int64_t step = 0;
  OrderedDict<Tensor> extra;
  std::map<std::string, std::string> metadata;  // the caller's entries, without "user."
};

// Writes the checkpoint to `path` atomically: a temporary file next to it ("<path>.tmp.<pid>"),
// synced, then renamed over it, so a writer killed at any moment leaves the previous
// checkpoint whole. Temporaries left by writers that died before are removed first.
void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer, int64_t step,
                     const OrderedDict<Tensor>& extra = {}, const std::map<std::string, std::string>& metadata = {});

// Reads and validates the file, then loads the model and the optimizer and restores the
// default generator. Any problem (not a checkpoint, another optimizer kind, unknown keys,
// names or shapes that do not match the model) throws naming the file, and leaves the model,
// the optimizer and the generator as they were. Also removes dead writers' temporaries.
TrainingCheckpoint load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer, bool strict = true);

// Removes "<path>.tmp.<pid>" files whose writing process no longer runs (a live writer's is
// kept); returns their paths. save_checkpoint and load_checkpoint call it.
std::vector<std::string> remove_stale_checkpoint_temporaries(const std::string& path);

}  // namespace tinyddp::nn
