// Checkpoints of modules and optimizers as safetensors files (see safetensors.h).
#pragma once

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

}  // namespace tinyddp::nn
