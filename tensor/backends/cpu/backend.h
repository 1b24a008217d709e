// The CPU backend: tensor/internal/backend.h's interface for tensors in host memory, one class.
// Each entry point lives in the .cc named beside it and chooses among the CPU's own algorithms
// (backends/cpu/algorithms.h, the ISA kernels of isa/kernels.h, OpenBLAS and oneDNN) where it has several.
#pragma once

#include "tinyddp/tensor/internal/backend.h"

namespace tinyddp::tensor::cpu {

class CpuBackend final : public Backend {
 public:
  // elementwise.cc
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override;
  void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& x) override;
  void pow_scalar(const Tensor& out, const Tensor& x, double exponent) override;
  void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) override;
  void copy(const Tensor& dst, const Tensor& src, bool non_blocking) override;
  void fill(const Tensor& dst, double value) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;

  // reduce.cc
  Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) override;
  Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) override;
  std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim) override;
  void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) override;

  // norm.cc
  std::optional<std::tuple<Tensor, Tensor>> batch_norm_mean_var(const Tensor& x, DType stats_dtype) override;
  bool batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd) override;
  std::optional<std::tuple<Tensor, Tensor>> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x,
                                                                       const Tensor& mean) override;
  bool batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, double count) override;

  // embedding.cc
  void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) override;
  void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) override;

  // layer_norm.cc: the backward writes all three gradients in one pass (returns true).
  void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  bool layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy,
                           const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) override;

  // attention.cc
  void causal_softmax(const Tensor& out, const Tensor& x, double scale) override;
  void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) override;
  // flash_attention.cc: float32 and float64 (16-bit dtypes declined).
  bool flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal, double scale, const AttentionDropout& dropout) override;
  bool flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                bool causal, double scale, const AttentionDropout& dropout) override;
  // loss.cc: float32 and float64 (16-bit dtypes declined), a row per intra-op thread.
  bool cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                     const Tensor& weight, int64_t ignore_index, double label_smoothing) override;
  bool cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                              const Tensor& stats, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                              double label_smoothing) override;

  // conv.cc
  void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) override;
  void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) override;
  // pool.cc
  bool max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window) override;
  bool max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                           const Window2d& window) override;

  // matmul.cc: OpenBLAS, oneDNN or Eigen by shape and ISA; bfloat16 on oneDNN where it is used
  // (addmm takes the bias into its kernel, so each result is rounded once, as PyTorch's addmm;
  // the bias's gradient is a column sum of its own: mm_bias_grad declines).
  void mm(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) override;
  std::optional<std::tuple<Tensor, Tensor>> mm_bias_grad(const Tensor&, const Tensor&) override { return std::nullopt; }
  bool bmm(const Tensor& out, const Tensor& a, const Tensor& b) override;

  // speed_rules.cc: bfloat16 on oneDNN where it is used (onednn_conv.cc), float32 on the direct
  // kernels where they pay (small maps, and "same" convolutions under AVX-512).
  bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
              int64_t groups) override;
  bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                             int64_t groups) override;
  bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                              const Window2d& window, int64_t groups) override;
  bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) override;

  // optim.cc: float32 and float64, in the selected instruction set's kernel, its elements split
  // over the intra-op threads.
  bool sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) override;
  bool adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step) override;
  // norm.cc: the device kernel's mask, for flash attention's composed route on the CPU (tensor::
  // dropout on the CPU draws PyTorch's CPU stream instead and never asks).
  bool dropout_mask(const Tensor& mask, double p, const RandomKey& key) override;
};

// The one CPU backend (backend_for(kCPU) returns it).
CpuBackend& backend();

}  // namespace tinyddp::tensor::cpu
