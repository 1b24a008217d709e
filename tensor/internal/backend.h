// The one backend interface (internal to tensor/): every kernel entry point that tensor/native/
// calls, declared once. The CPU backend (backends/cpu/backend.h) and the CUDA backend (backends/cuda/backend.h)
// each implement it as one class; native/ asks backend_for(device) and never names a device.
// Adding a backend is writing one more class and one more case in backend_for
// (internal/backend.cc).
//
// The contracts hold for every backend. Arguments are already validated by native/: dtypes agree,
// `out` has the broadcast shape, all tensors of one call are on the backend's device (copy: see
// below). A backend never calls back up into native/: it has its own copies, fills and
// allocations. An entry point that returns bool (or an optional) may decline a case it has no
// kernel for: it writes nothing and native/ composes the result from other entry points
// (native/composite.h) or takes its general route.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor {

class Backend {
 public:
  virtual ~Backend() = default;

  // Elementwise (backends/cpu/elementwise.cc, backends/cuda/elementwise.cu): out = op(a, b) with broadcasting.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) = 0;
  virtual void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out: bool
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& x) = 0;
  virtual void pow_scalar(const Tensor& out, const Tensor& x, double exponent) = 0;
  virtual void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) = 0;  // floating only
  // dst = src, src broadcast to dst, any dtypes. The CUDA backend takes every pair with a GPU
  // side, between devices too (its stream rules: backends/cuda/backend.h); non_blocking means nothing
  // on the CPU.
  virtual void copy(const Tensor& dst, const Tensor& src, bool non_blocking) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  virtual void accumulate(const Tensor& dst, const Tensor& src) = 0;  // dst += src; dst may overlap itself

  // Reductions: `dims` are wrapped and unique; an empty list means every dim.
  virtual Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) = 0;
  virtual Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) = 0;
  virtual std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim) = 0;  // values, indices
  virtual void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) = 0;

  // Batch normalisation over dim 1 of contiguous x [N, C, ...], statistics [C] (accumulated in
  // double) in x's dtype or, for a 16-bit x, in float32 (autocast's activations into float32
  // parameters: mixed, as PyTorch's CPU kernels; the results the same as normalising the values
  // widened to float32), weight/bias [C] or undefined, every [C] vector of one call in the one
  // statistics dtype (mean_var's `stats_dtype`; backward_reduce's sums in mean's); tensor/ops.h's
  // batch_norm_mean_var and friends say what each computes.
  virtual std::optional<std::tuple<Tensor, Tensor>> batch_norm_mean_var(const Tensor& x, DType stats_dtype) = 0;
  virtual bool batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& mean, const Tensor& invstd) = 0;
  virtual std::optional<std::tuple<Tensor, Tensor>> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x,
                                                                               const Tensor& mean) = 0;
  virtual bool batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                         const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                         const Tensor& sum_dy_xmu, double count) = 0;

  // out [n, C] = the rows of contiguous weight [V, C] at ids [n] (contiguous int64, each in
  // [0, V)); the backward sets grad_weight [V, C] to the sum of grad_out's rows [n, C] at each
  // id (repeated ids summed, unused rows zero).
  virtual void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) = 0;
  virtual void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) = 0;

  // Layer normalisation over the rows of contiguous x [M, N]: out [M, N] = (x - mean) * rstd *
  // weight + bias (weight, bias: contiguous [N] or undefined), with each row's mean and rstd =
  // 1 / sqrt(biased variance + eps) written to mean, rstd [M] (float64 for float64 x, else
  // float32). The backward writes grad_x [M, N] when defined, from dy [M, N] (contiguous), x,
  // the forward's mean and rstd, and weight; it returns whether it also wrote grad_weight and
  // grad_bias [N] (each when defined): false leaves those column sums to native/.
  virtual void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) = 0;
  virtual bool layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                   const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight) = 0;

  // Attention's causal softmax over contiguous x [B, M, N] into out (same layout): row i of
  // each [M, N] matrix keeps columns j <= i + N - M; the backward writes grad_x from grad_out
  // and the forward's y (all contiguous [B, M, N]).
  virtual void causal_softmax(const Tensor& out, const Tensor& x, double scale) = 0;
  virtual void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) = 0;

  // Attention in one pass, as flash attention: q [B, H, M, E], k [B, H, N, E], v [B, H, N, Ev]
  // (one dtype; causal: M <= N and row i sees keys j <= i + N - M) -> out [B, H, M, Ev] =
  // softmax(scale * q k^T) v and lse [B * H, M] (contiguous) = each row's log-sum-exp of its
  // scaled scores (float64 for float64 q, else float32), computed over blocks of keys with a
  // running maximum so that no [M, N] matrix is ever in memory. Every operand but lse may lie in
  // any layout whose last dim is dense (stride 1), as the heads of a [B, T, H, E] tensor do, and
  // out, dq, dk, dv are written where they lie (a backend whose kernels need contiguous operands
  // makes them: contiguous, stand_in). The backward writes dq, dk, dv (the shapes of q, k, v)
  // from dout [B, H, M, Ev], the inputs, out and lse, recomputing the blocks.
  // With dropout (kernel_ops.h's AttentionDropout), out = (softmax(...) * mask) v, the mask
  // regenerated from its key in the backward; lse stays the undropped rows'. false, with
  // nothing written, where the backend has no kernel (a dtype, a head size).
  virtual bool flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               bool causal, double scale, const AttentionDropout& dropout) = 0;
  virtual bool flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                        const Tensor& lse, bool causal, double scale,
                                        const AttentionDropout& dropout) = 0;

  // Cross-entropy's rows in one pass over the logits (tensor/fused.h's cross_entropy_rows):
  // logits [N, C] contiguous floating, targets [N] int64 (each in [0, C) or ignore_index: checked
  // by the op), weight [C] of the logits' dtype or undefined -> loss [N] (the logits' dtype) and
  // stats [N, 2], each row's maximum and the log of its sum of exp(x - maximum) (float64 for
  // float64 logits, else float32; kept apart, not added, so that (x - max) - log-sum keeps its
  // precision at large logits). The backward writes grad_logits [N, C] from grad_loss [N]
  // (contiguous), the logits and stats. false, with nothing written, where the backend has no
  // kernel (a dtype).
  virtual bool cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                             const Tensor& weight, int64_t ignore_index, double label_smoothing) = 0;
  virtual bool cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                      const Tensor& stats, const Tensor& targets, const Tensor& weight,
                                      int64_t ignore_index, double label_smoothing) = 0;

  // col (shape [N, C, kh, kw, OH, OW], any strides) = the windows of x [N, C, H, W] (any
  // strides), padding reading as pad_value; and its gradient, grad_x (contiguous, zeroed here)
  // = the sum, over the col entries that read each input element, of those entries.
  virtual void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) = 0;
  virtual void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) = 0;

  // Max pooling: out [N, C, OH, OW] (contiguous or channels last) = each window's maximum (NaN
  // wins; of equal values the first in row-major window order), `indices` (int64, same shape,
  // contiguous) saying where it came from, in a form only this backend's max_pool2d_backward
  // reads; grad_x (zeroed here; contiguous, or channels last with grad_out so too) receives each
  // output gradient at its window's maximum.
  virtual bool max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window) = 0;
  virtual bool max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                   const Window2d& window) = 0;

  // Products. out [n, m] (contiguous) = a [n, k] x b [k, m], any strides on a and b; addmm
  // adds bias [m] to each row (Linear's forward); bmm: out [..., n, m] (contiguous) = a [..., n,
  // k] x b [..., k, m] (the same batch dims) as one call where a kernel serves it (false: native/
  // multiplies matrix by matrix).
  virtual void mm(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) = 0;
  // Linear's weight and bias gradients from one product, where the backend sums the bias's
  // gradient inside it: grad_weight [m, k] (contiguous) = g [n, m]^T x [n, k] and grad_bias [m]
  // = the sum of g's rows, both of g's dtype (g and x: one dtype; nothing: native/ multiplies
  // and sums apart).
  virtual std::optional<std::tuple<Tensor, Tensor>> mm_bias_grad(const Tensor& g, const Tensor& x) = 0;
  virtual bool bmm(const Tensor& out, const Tensor& a, const Tensor& b) = 0;

  // Convolution by the backend's own algorithms (x, weight, grad_out contiguous; out =
  // conv(x, weight) + bias when bias is defined); false, with nothing written, where it has
  // none: native/conv.cc's im2col + GEMM route then. The backward passes are asked only after
  // conv2d served the forward. conv2d_native: whether the backend convolves `dtype` at this
  // geometry at all; false: native/ convolves in float32 and rounds once.
  virtual bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const Window2d& window, int64_t groups) = 0;
  virtual bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight,
                                     const Window2d& window, int64_t groups) = 0;
  virtual bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                                      const Window2d& window, int64_t groups) = 0;
  virtual bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) = 0;

  // One SGD update of param in one pass over memory (tensor/fused.h's fused_sgd_step_). param,
  // grad and *momentum_buffer (when defined) are contiguous, of one shape and dtype; a
  // momentum buffer is allocated here on the first step with momentum, and takes d itself.
  // false, with nothing written or allocated, where the backend has no fused kernel.
  virtual bool sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) = 0;
  // The SGD steps of many parameters of one group (tensor/fused.h's fused_sgd_steps_), each
  // parameter's tensors as sgd_step's and all of one dtype; with momentum, an undefined buffer
  // is that parameter's first step and is allocated here. A backend that can updates them all
  // in a few launches. Here (the default): sgd_step on each in turn.
  struct SgdTensors {
    Tensor param, grad, momentum_buffer;
  };
  virtual bool sgd_steps(std::vector<SgdTensors>& list, const SgdStep& step);
  // The Adam steps of many parameters of one group (tensor/fused.h's fused_adam_steps_ and
  // fused_adam_step_, a list of one): param, grad, exp_avg and exp_avg_sq contiguous, of one
  // shape and dtype each, and every parameter of one dtype; a backend that can updates them
  // all in a few launches. The capturable form (fused.h's AdamDeviceNumbers) has denom_scale
  // and eps_term defined (one element each, of the parameter's dtype and device; keep too for
  // AdamW with a tensor rate). false, with nothing written, where the backend has no fused
  // kernel (the default).
  struct AdamTensors {
    Tensor param, grad, exp_avg, exp_avg_sq;
    Tensor denom_scale, eps_term, keep;
  };
  virtual bool adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step);
  // tensor/fused.h's foreach_norm (out [n], the tensors' dtype; 16-bit tensors summed in float)
  // and foreach_mul_ (scale: one element of their dtype), every tensor contiguous and of one
  // dtype: false, with nothing written, where the backend has no list kernel (native/ composes).
  virtual bool foreach_norm(const Tensor& out, const std::vector<Tensor>& tensors);
  virtual bool foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale);

  // Dropout's mask drawn where the tensors are: mask (contiguous, floating) = 1 / (1 - p) where
  // philox::dropout_keep(key, i, 1 - p) keeps element i (internal/philox.h), else 0 (the key
  // read from its slot when the kernel runs, where it has one: kernel_ops.h). false, with
  // nothing written, where the backend draws no masks. tensor::dropout asks only off the CPU
  // (on the CPU it draws PyTorch's CPU stream); flash attention's composed route asks on every
  // device, for the mask its kernels use.
  virtual bool dropout_mask(const Tensor& mask, double p, const RandomKey& key);

  // What a backend's own code needs of copies, on its own copy and fill (internal/backend.cc),
  // so that it never calls back up into native/ through Tensor::contiguous, to or fill_:
  // t itself when already contiguous, else a contiguous copy on t's device;
  Tensor contiguous(const Tensor& t);
  // t itself when already of `dtype`, else a contiguous copy converted to it;
  Tensor converted(const Tensor& t, DType dtype);
  // a new contiguous tensor of zeros;
  Tensor zeros(const Shape& sizes, DType dtype, Device device);
  // for a kernel that writes contiguous outputs only: out itself where it is contiguous, else a
  // contiguous stand-in, whose values settle then copies into out (nothing where it was out).
  Tensor stand_in(const Tensor& out);
  void settle(const Tensor& out, const Tensor& stand_in);
};

// The backend of `device`'s type. A device type this build has no backend for (CUDA without
// --config=cuda) is an error naming `op` and the device.
Backend& backend_for(Device device, const char* op);

}  // namespace tinyddp::tensor
