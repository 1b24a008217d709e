// Everything autograd in one include: tensors with gradients, the engine, hooks, custom
// functions, gradcheck.
#pragma once

#include "tinyddp/autograd/accumulate_grad.h"
#include "tinyddp/autograd/engine.h"
#include "tinyddp/autograd/function.h"
#include "tinyddp/autograd/grad_mode.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/autograd/meta.h"
#include "tinyddp/autograd/node.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/graph.h"
