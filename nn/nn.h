// Everything nn in one include: modules, layers (recurrent ones too), losses, optimizers and their schedulers,
// gradient clipping, checkpoints, data loading.
// The GPT's blocks (Block, MLP, ...: common names in users' own code) are included on their
// own: tinyddp/nn/transformer.h.
#pragma once

#include "tinyddp/nn/activation.h"
#include "tinyddp/nn/adamax_nadam_radam.h"
#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/nn/checkpoint.h"
#include "tinyddp/nn/clip_grad.h"
#include "tinyddp/nn/containers.h"
#include "tinyddp/nn/cyclic_lr.h"
#include "tinyddp/nn/data.h"
#include "tinyddp/nn/datasets.h"
#include "tinyddp/nn/functional.h"
#include "tinyddp/nn/grad_scaler.h"
#include "tinyddp/nn/init.h"
#include "tinyddp/nn/instancenorm.h"
#include "tinyddp/nn/layers.h"
#include "tinyddp/nn/loss.h"
#include "tinyddp/nn/module.h"
#include "tinyddp/nn/multihead_attention.h"
#include "tinyddp/nn/one_cycle.h"
#include "tinyddp/nn/optim.h"
#include "tinyddp/nn/options.h"
#include "tinyddp/nn/plateau.h"
#include "tinyddp/nn/rmsprop_adagrad.h"
#include "tinyddp/nn/rnn.h"
#include "tinyddp/nn/rnn_cell.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/nn/scheduler.h"
#include "tinyddp/nn/upsample.h"
#include "tinyddp/nn/utils.h"
