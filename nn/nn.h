// Everything nn in one include: modules, layers, the GPT's blocks, losses, optimizers,
// checkpoints, data loading.
#pragma once

#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/nn/checkpoint.h"
#include "tinyddp/nn/data.h"
#include "tinyddp/nn/layers.h"
#include "tinyddp/nn/loss.h"
#include "tinyddp/nn/module.h"
#include "tinyddp/nn/optim.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/nn/transformer.h"
