// The Backend that backend_for hands out while a Profile records (internal/profiling.h): each
// call becomes a KernelScope (op name, kernel, kind, bytes, FLOPs) around the real backend's.
// Entries that declined are not recorded (nothing ran; native/ composes from calls that are).
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "tinyddp/tensor/internal/profiling.h"

namespace tinyddp::tensor {

namespace {

using profiler::Kind;
using profiler::detail::KernelScope;

int64_t nbytes(const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }
int64_t nbytes(const std::vector<Tensor>& list) {
  int64_t total = 0;
  for (const Tensor& t : list) total += nbytes(t);
  return total;
}
template <class... T>
int64_t bytes(const T&... tensors) {
  return (nbytes(tensors) + ...);
}

bool ran(KernelScope& scope, bool done) {
  if (!done) scope.declined();
  return done;
}
template <class T>
std::optional<T> ran(KernelScope& scope, std::optional<T> result) {
  if (!result) scope.declined();
  return result;
}

// Products: a multiply-add counts 2.
double mm_flops(const Tensor& a, const Tensor& b) {
  return 2.0 * static_cast<double>(a.size(0)) * static_cast<double>(a.size(1)) * static_cast<double>(b.size(1));
}
// Attention: the (query, key) pairs a causal or full mask lets through, times the products per pair
// (forward: q.k and p.v; backward: q.k again, dO.v, p^T dO, dS k, dS^T q).
double attention_pairs(const Tensor& q, const Tensor& k, bool causal) {
  const double b = static_cast<double>(q.size(0)), m = static_cast<double>(q.size(1)),
               n = static_cast<double>(k.size(1));
  return b * (causal ? m * (n - m) + m * (m + 1) / 2 : m * n);
}
double conv_flops(const Window2d& w, int64_t out_channels, int64_t groups) {
  return 2.0 * static_cast<double>(w.n * w.oh * w.ow * out_channels) * static_cast<double>(w.c / groups * w.kh * w.kw);
}

class ProfilingBackend final : public Backend {
 public:
  ProfilingBackend(Backend& inner, std::string op) : inner_(inner), op_(std::move(op)) {}

  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override {
    KernelScope s(name(), "binary", Kind::kElementwise, out.device(), bytes(out, a, b), 0);
    inner_.binary(op, out, a, b, alpha);
  }
  void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    KernelScope s(name(), "compare", Kind::kElementwise, out.device(), bytes(out, a, b), 0);
    inner_.compare(op, out, a, b);
  }
  void unary(UnaryOp op, const Tensor& out, const Tensor& x) override {
    KernelScope s(name(), "unary", Kind::kElementwise, out.device(), bytes(out, x), 0);
    inner_.unary(op, out, x);
  }
  void pow_scalar(const Tensor& out, const Tensor& x, double exponent) override {
    KernelScope s(name(), "pow_scalar", Kind::kElementwise, out.device(), bytes(out, x), 0);
    inner_.pow_scalar(out, x, exponent);
  }
  void pow_scalar_base(const Tensor& out, const Tensor& exponent, double base) override {
    KernelScope s(name(), "pow_scalar_base", Kind::kElementwise, out.device(), bytes(out, exponent), 0);
    inner_.pow_scalar_base(out, exponent, base);
  }
  void copy(const Tensor& dst, const Tensor& src, bool non_blocking) override {
    // A copy between devices runs where the GPU side is.
    KernelScope s(name(), "copy", Kind::kCopy, dst.is_cuda() ? dst.device() : src.device(), bytes(dst, src), 0);
    inner_.copy(dst, src, non_blocking);
  }
  void fill(const Tensor& dst, double value) override {
    KernelScope s(name(), "fill", Kind::kElementwise, dst.device(), bytes(dst), 0);
    inner_.fill(dst, value);
  }
  void accumulate(const Tensor& dst, const Tensor& src) override {
    KernelScope s(name(), "accumulate", Kind::kElementwise, dst.device(), bytes(dst, dst, src), 0);
    inner_.accumulate(dst, src);
  }

  Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) override {
    KernelScope s(name(), "sum", Kind::kReduction, x.device(), bytes(x), 0);
    Tensor out = inner_.sum(x, dims, keepdim);
    s.add_bytes(nbytes(out));
    return out;
  }
  Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) override {
    KernelScope s(name(), "mean", Kind::kReduction, x.device(), bytes(x), 0);
    Tensor out = inner_.mean(x, dims, keepdim);
    s.add_bytes(nbytes(out));
    return out;
  }
  std::tuple<Tensor, Tensor> max(const Tensor& x, const Shape& dims, bool keepdim) override {
    KernelScope s(name(), "max", Kind::kReduction, x.device(), bytes(x), 0);
    auto out = inner_.max(x, dims, keepdim);
    s.add_bytes(bytes(std::get<0>(out), std::get<1>(out)));
    return out;
  }
  void softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log) override {
    KernelScope s(name(), log ? "log_softmax" : "softmax", Kind::kReduction, out.device(), bytes(out, x), 0);
    inner_.softmax(out, x, dim, log);
  }

  std::optional<std::tuple<Tensor, Tensor>> batch_norm_mean_var(const Tensor& x, DType stats_dtype) override {
    KernelScope s(name(), "batch_norm_mean_var", Kind::kNorm, x.device(), bytes(x), 0);
    return ran(s, inner_.batch_norm_mean_var(x, stats_dtype));
  }
  bool batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean, const Tensor& invstd) override {
    KernelScope s(name(), "batch_norm_elemt", Kind::kNorm, x.device(), bytes(out, x, weight, bias, mean, invstd), 0);
    return ran(s, inner_.batch_norm_elemt(out, x, weight, bias, mean, invstd));
  }
  std::optional<std::tuple<Tensor, Tensor>> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x,
                                                                       const Tensor& mean) override {
    KernelScope s(name(), "batch_norm_backward_reduce", Kind::kNorm, x.device(), bytes(dy, x, mean), 0);
    return ran(s, inner_.batch_norm_backward_reduce(dy, x, mean));
  }
  bool batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, double count) override {
    KernelScope s(name(), "batch_norm_backward_elemt", Kind::kNorm, x.device(), bytes(grad_x, dy, x), 0);
    return ran(s, inner_.batch_norm_backward_elemt(grad_x, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count));
  }

  void embedding(const Tensor& out, const Tensor& weight, const Tensor& ids) override {
    KernelScope s(name(), "embedding", Kind::kEmbedding, out.device(), 2 * nbytes(out) + nbytes(ids), 0);
    inner_.embedding(out, weight, ids);
  }
  void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) override {
    KernelScope s(name(), "embedding_backward", Kind::kEmbedding, grad_weight.device(),
                  bytes(grad_weight, grad_out, ids), 0);
    inner_.embedding_backward(grad_weight, grad_out, ids);
  }

  void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override {
    KernelScope s(name(), "layer_norm", Kind::kNorm, x.device(), bytes(out, mean, rstd, x, weight, bias), 0);
    inner_.layer_norm(out, mean, rstd, x, weight, bias, eps);
  }
  bool layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy,
                           const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) override {
    KernelScope s(name(), "layer_norm_backward", Kind::kNorm, x.device(),
                  bytes(grad_x, grad_weight, grad_bias, dy, x, mean, rstd, weight), 0);
    return inner_.layer_norm_backward(grad_x, grad_weight, grad_bias, dy, x, mean, rstd, weight);  // grad_x always
  }

  void causal_softmax(const Tensor& out, const Tensor& x, double scale) override {
    KernelScope s(name(), "causal_softmax", Kind::kAttention, x.device(), bytes(out, x), 0);
    inner_.causal_softmax(out, x, scale);
  }
  void causal_softmax_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, double scale) override {
    KernelScope s(name(), "causal_softmax_backward", Kind::kAttention, y.device(), bytes(grad_x, grad_out, y), 0);
    inner_.causal_softmax_backward(grad_x, grad_out, y, scale);
  }
  bool flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       bool causal, double scale, const AttentionDropout& dropout) override {
    const double flops = 2 * attention_pairs(q, k, causal) * static_cast<double>(q.size(2) + v.size(2));
    KernelScope s(name(), "flash_attention", Kind::kAttention, q.device(), bytes(out, lse, q, k, v), flops);
    return ran(s, inner_.flash_attention(out, lse, q, k, v, causal, scale, dropout));
  }
  bool flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                bool causal, double scale, const AttentionDropout& dropout) override {
    const double flops = 2 * attention_pairs(q, k, causal) * static_cast<double>(3 * q.size(2) + 2 * v.size(2));
    KernelScope s(name(), "flash_attention_backward", Kind::kAttention, q.device(),
                  bytes(dq, dk, dv, dout, q, k, v, out, lse), flops);
    return ran(s, inner_.flash_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, causal, scale, dropout));
  }

  bool cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                     const Tensor& weight, int64_t ignore_index, double label_smoothing) override {
    KernelScope s(name(), "cross_entropy", Kind::kLoss, logits.device(), bytes(loss, stats, logits, targets, weight),
                  0);
    return ran(s, inner_.cross_entropy(loss, stats, logits, targets, weight, ignore_index, label_smoothing));
  }
  bool cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                              const Tensor& stats, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                              double label_smoothing) override {
    KernelScope s(name(), "cross_entropy_backward", Kind::kLoss, logits.device(),
                  bytes(grad_logits, grad_loss, logits, stats, targets, weight), 0);
    return ran(s, inner_.cross_entropy_backward(grad_logits, grad_loss, logits, stats, targets, weight, ignore_index,
                                                label_smoothing));
  }

  void im2col(const Tensor& col, const Tensor& x, const Window2d& window, double pad_value) override {
    KernelScope s(name(), "im2col", Kind::kConv, col.device(), bytes(col, x), 0);
    inner_.im2col(col, x, window, pad_value);
  }
  void col2im(const Tensor& grad_x, const Tensor& col, const Window2d& window) override {
    KernelScope s(name(), "col2im", Kind::kConv, col.device(), bytes(grad_x, col), 0);
    inner_.col2im(grad_x, col, window);
  }
  bool max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window) override {
    KernelScope s(name(), "max_pool2d", Kind::kConv, x.device(), bytes(out, indices, x), 0);
    return ran(s, inner_.max_pool2d(out, indices, x, window));
  }
  bool max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                           const Window2d& window) override {
    KernelScope s(name(), "max_pool2d_backward", Kind::kConv, grad_x.device(), bytes(grad_x, grad_out, indices), 0);
    return ran(s, inner_.max_pool2d_backward(grad_x, grad_out, indices, window));
  }

  void mm(const Tensor& out, const Tensor& a, const Tensor& b) override {
    KernelScope s(name(), "mm", Kind::kGemm, out.device(), bytes(out, a, b), mm_flops(a, b));
    inner_.mm(out, a, b);
  }
  void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b) override {
    KernelScope s(name(), "addmm", Kind::kGemm, out.device(), bytes(out, bias, a, b), mm_flops(a, b));
    inner_.addmm(out, bias, a, b);
  }
  std::optional<std::tuple<Tensor, Tensor>> mm_bias_grad(const Tensor& g, const Tensor& x) override {
    const double flops = 2.0 * static_cast<double>(g.numel()) * static_cast<double>(x.size(1));
    KernelScope s(name(), "mm_bias_grad", Kind::kGemm, g.device(), bytes(g, x), flops);
    return ran(s, inner_.mm_bias_grad(g, x));
  }
  bool bmm(const Tensor& out, const Tensor& a, const Tensor& b) override {
    const double flops = 2.0 * static_cast<double>(out.numel()) * static_cast<double>(a.size(a.dim() - 1));
    KernelScope s(name(), "bmm", Kind::kGemm, out.device(), bytes(out, a, b), flops);
    return ran(s, inner_.bmm(out, a, b));
  }

  bool conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Window2d& window,
              int64_t groups) override {
    KernelScope s(name(), "conv2d", Kind::kConv, x.device(), bytes(out, x, weight, bias),
                  conv_flops(window, weight.size(0), groups));
    return ran(s, inner_.conv2d(out, x, weight, bias, window, groups));
  }
  bool conv2d_backward_input(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                             int64_t groups) override {
    KernelScope s(name(), "conv2d_backward_input", Kind::kConv, grad_x.device(), bytes(grad_x, grad_out, weight),
                  conv_flops(window, weight.size(0), groups));
    return ran(s, inner_.conv2d_backward_input(grad_x, grad_out, weight, window, groups));
  }
  bool conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                              const Window2d& window, int64_t groups) override {
    KernelScope s(name(), "conv2d_backward_weight", Kind::kConv, x.device(), bytes(grad_weight, grad_out, x),
                  conv_flops(window, grad_weight.size(0), groups));
    return ran(s, inner_.conv2d_backward_weight(grad_weight, grad_out, x, window, groups));
  }
  bool conv2d_native(const Window2d& window, int64_t out_channels, int64_t groups, bool bias, DType dtype) override {
    return inner_.conv2d_native(window, out_channels, groups, bias, dtype);  // a question, no kernel
  }

  bool sgd_step(const Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdStep& step) override {
    const int64_t buffer = momentum_buffer != nullptr ? 2 * nbytes(*momentum_buffer) : 0;
    KernelScope s(name(), "sgd_step", Kind::kOptimizer, param.device(), bytes(param, param, grad) + buffer, 0);
    return ran(s, inner_.sgd_step(param, grad, momentum_buffer, step));
  }
  bool sgd_steps(std::vector<SgdTensors>& list, const SgdStep& step) override {
    int64_t total = 0;
    for (const SgdTensors& t : list) total += bytes(t.param, t.param, t.grad) + 2 * nbytes(t.momentum_buffer);
    const Device device = list.empty() ? Device() : list.front().param.device();
    KernelScope s(name(), "sgd_steps", Kind::kOptimizer, device, total, 0);
    return ran(s, inner_.sgd_steps(list, step));
  }
  bool adam_steps(const std::vector<AdamTensors>& list, const AdamStep& step) override {
    int64_t total = 0;
    for (const AdamTensors& t : list)
      total += bytes(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.param, t.exp_avg, t.exp_avg_sq);
    const Device device = list.empty() ? Device() : list.front().param.device();
    KernelScope s(name(), "adam_steps", Kind::kOptimizer, device, total, 0);
    return ran(s, inner_.adam_steps(list, step));
  }
  bool foreach_norm(const Tensor& out, const std::vector<Tensor>& tensors) override {
    KernelScope s(name(), "foreach_norm", Kind::kOptimizer, out.device(), nbytes(tensors) + nbytes(out), 0);
    return ran(s, inner_.foreach_norm(out, tensors));
  }
  bool foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) override {
    KernelScope s(name(), "foreach_mul_", Kind::kOptimizer, scale.device(), 2 * nbytes(tensors), 0);
    return ran(s, inner_.foreach_mul_(tensors, scale));
  }
  bool dropout_mask(const Tensor& mask, double p, const RandomKey& key) override {
    KernelScope s(name(), "dropout_mask", Kind::kElementwise, mask.device(), nbytes(mask), 0);
    return ran(s, inner_.dropout_mask(mask, p, key));
  }

 private:
  const char* name() const { return op_.c_str(); }
  Backend& inner_;
  const std::string op_;
};

}  // namespace

Backend& profiling_backend(Backend& inner, const char* op) {
  static std::mutex mutex;
  static std::map<std::pair<Backend*, std::string>, std::unique_ptr<ProfilingBackend>>
      wrappers;  // kept for the process
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = wrappers[{&inner, op}];
  if (!slot) slot = std::make_unique<ProfilingBackend>(inner, op);
  return *slot;
}

}  // namespace tinyddp::tensor
