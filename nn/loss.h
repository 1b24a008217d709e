// Losses, as torch.nn.functional: mse_loss and cross_entropy (int64 class targets, computed
// through log_softmax so that large logits cannot overflow), with PyTorch's reductions:
// "mean" (the default), "sum", or "none" (one loss per element or row).
#pragma once

#include <string>
#include <string_view>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

// (input - target)^2 reduced; shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");
// logits [batch, classes], targets [batch] int64 in [0, classes) or equal to ignore_index:
// row i's loss is -sum_c q[i, c] log_softmax(logits)[i, c], where q puts 1 - label_smoothing
// on the target class and label_smoothing / classes on every class (PyTorch's
// label_smoothing; 0 gives -log_softmax(logits)[i, targets[i]]), and 0 where the target is
// ignored. "mean" divides the sum by the number of rows not ignored (NaN when every row is,
// as PyTorch), "none" returns the rows' losses [batch]. nanoGPT passes ignore_index = -1.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     std::string_view reduction = "mean", double label_smoothing = 0.0);

// Module forms, for code that passes losses around as objects.
struct MSELoss {
  std::string reduction = "mean";
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
};
struct CrossEntropyLoss {
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  double label_smoothing = 0.0;
  Tensor operator()(const Tensor& logits, const Tensor& targets) const {
    return cross_entropy(logits, targets, ignore_index, reduction, label_smoothing);
  }
};

}  // namespace tinyddp::nn
