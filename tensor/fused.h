// The fused ops: one kernel each way for what a model would otherwise compose from several ops
// (attention's masked softmax, attention itself, cross-entropy's rows, the optimizer steps), so
// that no intermediate the size of the scores, weights or log-probabilities is written to
// memory and read back. Each gives the numbers of its composition (within the arithmetic's
// rounding; the optimizer steps: the same bits) and falls back to it where the backend has no
// kernel and for create_graph. Included by ops.h (docs/tensor.md: "Attention in one op", "Cross-entropy in one op").
#pragma once

#include <cstdint>
#include <vector>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

// Attention's masked softmax in one kernel: scores [..., M, N] (M <= N) -> softmax over the last
// dim of scale * scores, column j of row i kept only while j <= i + N - M (tril's mask), masked
// entries 0. The numbers of mul by scale, masked_fill of the future with -inf and softmax, in one
// pass over memory each way instead of three (its backward: one kernel too).
Tensor causal_softmax(const Tensor& scores, double scale = 1.0);
// Attention in one op: the softmax of scale * query key^T times value, is_causal masking as causal_softmax;
// query [..., M, E], key [..., N, E], value [..., N, Ev] (same leading dims) -> [..., M, Ev]. Flash
// attention where the backend has a kernel (no [M, N] weights in memory); else, and for
// create_graph, matmul and (causal_)softmax (docs/tensor.md, "Attention in one op").
// dropout_p in [0, 1): attention dropout on the weights, with the mask tensor::dropout draws on
// a GPU (one 64-bit key from `generator`, default the global one; the same mask on the CPU
// and any GPU, and on the fused and the composed routes), regenerated in the backward.
Tensor flash_attention(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal, double scale,
                       double dropout_p = 0.0, Generator* generator = nullptr);
// Cross-entropy of each row, as nn::cross_entropy(logits, targets, ignore_index, "none",
// label_smoothing, weight) (torch.nn.functional.cross_entropy's numbers): logits [N, C] floating,
// targets [N] int64, each in [0, C) or equal to ignore_index (others are refused, naming one),
// weight [C] of the logits' dtype or undefined -> losses [N]:
//   (1 - label_smoothing) w[t] (lse - x[t]) + label_smoothing / C sum_c w[c] (lse - x[c])
// for row x with target t and log-sum-exp lse (w = 1 without a weight), 0 where ignored. Where the
// backend has a kernel, one pass over the logits each way: the forward keeps each row's maximum
// and log-sum, never the [N, C] log-probabilities, and the backward writes the logits' gradient
//   grad[i] (mass_i p[c] - (1 - label_smoothing) w[t] [c == t] - label_smoothing / C w[c])
// (p: the row's softmax; mass_i: the sum of the subtracted terms over c) in one pass. Else (an
// empty batch), and for create_graph, log_softmax, gathers and softmax. 16-bit logits: computed
// in float from log-probabilities rounded to their dtype (PyTorch's). The weight gets no
// gradient (as PyTorch's).
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, const Tensor& weight = Tensor(),
                          int64_t ignore_index = -100, double label_smoothing = 0.0);
// Throws "<op>: target T is out of bounds for C classes" unless every int64 target other than
// ignore_index lies in [0, classes): one loop on the host, one read of the extremes from a
// device (none while a CUDA graph is captured, which cannot read back).
void check_class_targets(const Tensor& targets, int64_t ignore_index, int64_t classes, const char* op);

// ---- optimizer steps --------------------------------------------------------------------------
// One SGD (SgdStep: torch.optim.SGD's options, kernel_ops.h) or Adam/AdamW (AdamStep) update of
// `param` in one pass over memory: the op-by-op update's float operations in the same order (the
// same bits). SGD with momentum: an undefined `*momentum_buffer` is the first step (allocated
// here). For contiguous float32/float64 tensors of one shape and dtype (on the CPU and a GPU);
// false, touching nothing, else.
bool fused_sgd_step_(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step);
bool fused_adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamStep& step);
// The Adam step of every parameter of one group (one AdamStep, one step count) as
// fused_adam_step_ each: on a GPU in a few launches for all of them (as PyTorch's fused and
// foreach optimizers; one launch per op per parameter op by op). Every list has one entry per
// parameter; all must qualify as fused_adam_step_'s and share a dtype and device, else false,
// touching nothing.
//
// With `device_numbers` (capturable Adam and AdamW, as torch.optim.Adam(capturable=True)), the
// numbers that depend on the step count and the rate are one-element tensors of the parameters'
// dtype on their device, computed there by the caller, and `step`'s lr and step are not used:
// denom_scale[i] = sqrt(bias_correction2) * -step_size and eps_term[i] = eps / -step_size of
// parameter i, so that its update is the op-by-op capturable one's,
//   p += m / (sqrt(v) / denom_scale[i] + eps_term[i]),
// and `keep` (AdamW with a tensor rate: 1 - lr * weight_decay; undefined: step's host numbers).
// Nothing is read back: a CUDA graph can capture the step and replay it with later counts.
struct AdamDeviceNumbers {
  std::vector<Tensor> denom_scale, eps_term;
  Tensor keep;
};
bool fused_adam_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const AdamStep& step, const AdamDeviceNumbers* device_numbers = nullptr);
// The SGD step of every parameter of one group (one SgdStep) as fused_sgd_step_ each, in a few
// launches on a GPU. With momentum, `momentum_buffers` holds one buffer per parameter (an
// undefined one: that parameter's first step, allocated here); without, it is ignored (may be
// null). The same qualifications and refusals as fused_adam_steps_.
bool fused_sgd_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      std::vector<Tensor>* momentum_buffers, const SgdStep& step);

// ---- lists of tensors (as torch._foreach_*) ---------------------------------------------------
// The 2-norm of each tensor (floating, all of one dtype and device; 16-bit ones summed in float32
// and rounded once) as a [n] tensor of their dtype, as torch._foreach_norm. On a GPU one pass
// over all of them in two launches (each norm summed in a fixed order: the same bits every
// run); elsewhere each tensor's sqrt(sum(x * x)).
Tensor foreach_norm(const std::vector<Tensor>& tensors);
// Each tensor multiplied in place by `scale`, a one-element tensor on their device (as
// torch._foreach_mul_ with a tensor): on a GPU a few launches for all of them.
void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale);

}  // namespace tinyddp::tensor
