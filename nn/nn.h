// Everything nn in one include: modules, layers, losses, optimizers, checkpoints.
#pragma once

#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
