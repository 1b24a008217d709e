// The CUDA backend (--config=cuda): tensor/internal/backend.h's interface for tensors on a GPU,
// one class. Work is queued on the device's compute stream and not waited for. Each entry point
// lives in the file named beside it: kernels of ours (backends/cuda/kernels.h, compiled by nvcc),
// cuBLAS and cuDNN (backends/cuda/libraries.h). Where it has no kernel of its own (batch normalisation,
// max pooling, layer normalisation's parameter gradients, 16-bit optimizer steps, batched bf16
// products) it declines, and native/ composes the result (native/composite.h).
#pragma once

#include "tinyddp/tensor/internal/backend.h"

namespace tinyddp::tensor::cuda {

class CudaBackend final : public Backend {
 public:
  // backend.cc
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override;
  void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& x) override;
  void pow_scalar(const Tensor& out, const Tensor& x, double exponent) override;
  void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) override;
  // copy.cc: dst = src (broadcast, dtype converted) where either side, or both, is on a GPU:
  // between devices the bytes move with cudaMemcpy (staged through a contiguous buffer of
  // src's dtype when src is strided). The stream rules (docs/tensor.md):
  // - host to GPU: from pinned memory; a pageable source is first copied into a pinned block
  //   the allocator keeps until the copy ran, so the host never waits for it. A source the
  //   caller pinned is the caller's memory: copy waits for the copy unless non_blocking.
  // - GPU to host: waits, unless non_blocking and dst is pinned, dense and of src's dtype.
  // - GPU to GPU: the destination's stream waits for the source's work so far, the copy runs
  //   there, and the source's stream waits for the copy before anything later writes src.
  void copy(const Tensor& dst, const Tensor& src, bool non_blocking) override;
  void fill(const Tensor& dst, double value) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;

  // backend.cc: sums over rows or leading columns; softmax on cuDNN where it applies
  // (float32/64/16), else our kernel.
  Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) override;
  Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) override;
  std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim) override;
  void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) override;

  // Declined (false): native/composite.h.
  std::optional<std::tuple<Tensor, Tensor>> batch_norm_mean_var(const Tensor& x, DType stats_dtype) override;
  bool batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd) override;
  std::optional<std::tuple<Tensor, Tensor>> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x,
                                                                       const Tensor& mean) override;
  bool batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, double count) override;

  // backend.cc (embedding.cu): atomic adds for the backward.
  void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) override;
  void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) override;

  // backend.cc (reduce.cu): one block per row; the backward writes the input's gradient only.
  void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  bool layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy,
                           const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) override;

  // backend.cc (reduce.cu): one block per row.
  void causal_softmax(const Tensor& out, const Tensor& x, double scale) override;
  void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) override;
  // attention_route.cc (attention.cu): float32, float64, bfloat16 and float16 up to 128 per head.
  bool flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal, double scale, const AttentionDropout& dropout) override;
  bool flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                bool causal, double scale, const AttentionDropout& dropout) override;
  // loss.cu: every floating dtype, a block per row.
  bool cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                     const Tensor& weight, int64_t ignore_index, double label_smoothing) override;
  bool cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                              const Tensor& stats, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                              double label_smoothing) override;

  // conv.cc: a strided copy of the padded input's windows and an accumulation into them.
  void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) override;
  void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) override;
  // Declined (false): native/composite.h.
  bool max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window) override;
  bool max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                           const Window2d& window) override;

  // backend.cc: cuBLAS (libraries.cc); addmm and mm_bias_grad take the bias, or its gradient,
  // into cuBLASLt's epilogue where it has one (blas_lt.cc; else addmm adds apart).
  void mm(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) override;
  std::optional<std::tuple<Tensor, Tensor>> mm_bias_grad(const Tensor& g, const Tensor& x) override;
  bool bmm(const Tensor& out, const Tensor& a, const Tensor& b) override;

  // backend.cc: cuDNN (dnn_conv.cc) where it applies, the bias added per channel; a GPU
  // convolves every dtype itself (cuDNN, or im2col in that dtype).
  bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
              int64_t groups) override;
  bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                             int64_t groups) override;
  bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                              const Window2d& window, int64_t groups) override;
  bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) override;

  // SGD and Adam (optim.cu): float32 and float64 parameters, several per launch (sgd_step: a
  // list of one).
  bool sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) override;
  bool sgd_steps(std::vector<SgdTensors>& list, const SgdStep& step) override;
  bool adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step) override;
  // optim.cu: lists of tensors, several per launch.
  bool foreach_norm(const Tensor& out, const std::vector<Tensor>& tensors) override;
  bool foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) override;
  // elementwise.cu: the mask drawn on the device, a Philox block per 4 elements.
  bool dropout_mask(const Tensor& mask, double p, const RandomKey& key) override;
};

// The one CUDA backend (backend_for(kCUDA) returns it in a CUDA build).
CudaBackend& backend();

}  // namespace tinyddp::tensor::cuda
