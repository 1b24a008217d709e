// Losses with mean reduction, as torch.nn.functional: mse_loss and cross_entropy (int64
// class targets, computed through log_softmax so that large logits cannot overflow).
#pragma once

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

// mean((input - target)^2); shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target);
// logits [batch, classes], targets [batch] int64 in [0, classes) or equal to ignore_index:
// the mean of -log_softmax(logits)[i, targets[i]] over the rows whose target is not ignored
// (NaN when every row is, as PyTorch). nanoGPT passes ignore_index = -1.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// Module forms, for code that passes losses around as objects.
struct MSELoss {
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target); }
};
struct CrossEntropyLoss {
  int64_t ignore_index = -100;
  Tensor operator()(const Tensor& logits, const Tensor& targets) const {
    return cross_entropy(logits, targets, ignore_index);
  }
};

}  // namespace tinyddp::nn
