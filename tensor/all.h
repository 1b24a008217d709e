// The whole tensor library in one include: Tensor, factories, ops, random, CUDA query.
#pragma once

#include "tensor/cuda.h"
#include "tensor/dtype.h"
#include "tensor/device.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
