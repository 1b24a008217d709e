// Everything autograd in one include: tensors with gradients, the engine, hooks, gradcheck.
#pragma once

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/meta.h"
#include "autograd/node.h"
#include "tensor/all.h"
#include "tensor/graph.h"
