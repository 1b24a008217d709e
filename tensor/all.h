// The whole tensor library in one include: Tensor, factories, ops, random, CUDA query.
#pragma once

#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/device.h"
#include "tinyddp/tensor/dtype.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/indexing.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/profiler.h"
#include "tinyddp/tensor/random.h"
#include "tinyddp/tensor/tensor.h"
