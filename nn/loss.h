// Losses, as torch.nn.functional: mse_loss and cross_entropy (int64 class targets, computed
// through log_softmax so that large logits cannot overflow), nll_loss, l1_loss,
// smooth_l1_loss, huber_loss, binary_cross_entropy (with logits too) and kl_div, with
// PyTorch's reductions: "mean" (the default), "sum", or "none" (one loss per element or row).
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
// As PyTorch's, logits may also be [classes] with a 0-d target, or [batch, classes, d1, ...]
// with targets [batch, d1, ...] (a score per position: a language model's [B, C, T]); "none"
// then returns the targets' shape.
// weight: a class weight [classes] (PyTorch's weight): row i's loss is scaled by
// weight[targets[i]] (the smoothing term by each class's), and "mean" divides by the sum of
// the kept rows' weight[targets[i]], as PyTorch's.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     std::string_view reduction = "mean", double label_smoothing = 0.0,
                     const Tensor& weight = Tensor());

// The other losses of torch.nn.functional, composed from tensor ops (nll_loss in loss.cc beside cross_entropy, the rest
// in loss_composed.cc), with the same reductions ("mean" over every element unless said otherwise, "sum", "none"):
// nll_loss: log-probabilities [N, C] (or [N, C, d...], [C]) and int64 targets as cross_entropy
// takes them (which is nll_loss of log_softmax): -input[i, target[i]], the mean over the rows
// not ignored. A class weight scales as cross_entropy's.
Tensor nll_loss(const Tensor& input, const Tensor& target, int64_t ignore_index = -100,
                std::string_view reduction = "mean", const Tensor& weight = Tensor());
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta 0: l1_loss), d = input - target.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean",
                      double beta = 1.0);
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean", double delta = 1.0);
// Probabilities in [0, 1] against targets in [0, 1]: -(t log x + (1 - t) log(1 - x)), each log
// clamped at -100 as PyTorch's; weight (broadcast to the input) scales each element's loss.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, std::string_view reduction = "mean",
                            const Tensor& weight = Tensor());
// Logits against targets in [0, 1], as sigmoid then binary_cross_entropy but without its
// overflow: (1 - t) x + m + log(exp(-m) + exp(-x - m)), m = max(-x, 0), PyTorch's form;
// pos_weight (broadcast along the last dim: one per class) scales the positive term, the
// m + log(...) part by 1 + (pos_weight - 1) t, and weight each element's loss.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, std::string_view reduction = "mean",
                                        const Tensor& weight = Tensor(), const Tensor& pos_weight = Tensor());
// Kullback-Leibler divergence of `target` from the log-probabilities `input`: target (log
// target - input), 0 where target is 0 (log_target: target given as log-probabilities, exp(t)
// (t - input)). reduction "batchmean" divides the sum by input.size(0), the true KL
// divergence; "mean" (PyTorch's default, which PyTorch warns about) by every element.
Tensor kl_div(const Tensor& input, const Tensor& target, std::string_view reduction = "mean", bool log_target = false);

// Module forms, for code that passes losses around as objects.
struct MSELoss {
  std::string reduction = "mean";
  Tensor operator()(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
};
struct CrossEntropyLoss {
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  double label_smoothing = 0.0;
  Tensor weight;  // per class, or undefined
  Tensor operator()(const Tensor& logits, const Tensor& targets) const {
    return cross_entropy(logits, targets, ignore_index, reduction, label_smoothing, weight);
  }
};

struct NLLLoss {
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  Tensor weight;  // per class, or undefined
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return nll_loss(input, target, ignore_index, reduction, weight);
  }
};
struct L1Loss {
  std::string reduction = "mean";
  Tensor operator()(const Tensor& input, const Tensor& target) const { return l1_loss(input, target, reduction); }
};
struct SmoothL1Loss {
  std::string reduction = "mean";
  double beta = 1.0;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return smooth_l1_loss(input, target, reduction, beta);
  }
};
struct HuberLoss {
  std::string reduction = "mean";
  double delta = 1.0;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return huber_loss(input, target, reduction, delta);
  }
};
struct BCELoss {
  std::string reduction = "mean";
  Tensor weight;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy(input, target, reduction, weight);
  }
};
struct BCEWithLogitsLoss {
  std::string reduction = "mean";
  Tensor weight, pos_weight;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, reduction, weight, pos_weight);
  }
};
struct KLDivLoss {
  std::string reduction = "mean";
  bool log_target = false;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return kl_div(input, target, reduction, log_target);
  }
};

}  // namespace tinyddp::nn
