// tinyddp in one include, for programs that want all of it: `#include "tinyddp/tinyddp.h"`
// with the target @tinyddp//:tinyddp. Tensors, autograd, nn (modules, losses, optimizers,
// checkpoints), comm (stores, process groups, init_from_env) and DDP (DistributedDataParallel,
// comm hooks, Join, ZeroRedundancyOptimizer, fully_shard, SyncBatchNorm). The launcher is a
// program: @tinyddp//launcher:launch.
#pragma once

#include "tinyddp/autograd/autograd.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/comm_hooks.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/join.h"
#include "tinyddp/ddp/powersgd.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/all.h"
