// CPU cross-entropy rows (backends/cpu/backend.h; the formulas: tensor/fused.h), every floating
// dtype (the 16-bit ones computed in float from log-probabilities rounded to their dtype, as
// PyTorch's log_softmax then nll_loss), each row whole on one intra-op thread (the same bits at
// any thread count). The forward takes the row's maximum from eight partial maxima, the
// exponentials of the shifted row in the instruction set's vector exp (isa/kernels.h exp_f32,
// exp_f64: the bits do not depend on the row's address), their sum and the loss's sums in
// double; it keeps the maximum and the log of the sum. The backward is one exp of
// (x - max) - log-sum per element and a multiply-subtract, into the gradient's row.
#include <cmath>
#include <limits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/isa/kernels.h"
#include "tinyddp/tensor/backends/cpu/loops.h"

namespace tinyddp::tensor::cpu {

namespace {

// o[k] = exp(s[k]) for k < n, a masked (-inf) entry exactly 0 (the vector exp's is a denormal).
template <typename T>
void exp_row(const T* s, T* o, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    isa_kernels().exp_f32(s, o, n);
  } else {
    isa_kernels().exp_f64(s, o, n);
  }
  constexpr T kMinusInf = -std::numeric_limits<T>::infinity();
  for (int64_t k = 0; k < n; ++k) o[k] = s[k] == kMinusInf ? T(0) : o[k];
}

// The largest of row[0 .. n), from eight partial maxima (NaN never wins here: it reaches the
// sum through exp).
template <typename T>
T row_max(const T* row, int64_t n) {
  T part[8];
  std::fill(part, part + 8, -std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) part[k] = part[k] < row[i + k] ? row[i + k] : part[k];
  }
  for (; i < n; ++i) part[0] = part[0] < row[i] ? row[i] : part[0];
  T m = part[0];
  for (int k = 1; k < 8; ++k) m = m < part[k] ? part[k] : m;
  return m;
}

// What every row shares: the class weight (or none) in the compute type C, its sum, the
// smoothing's share per class.
template <typename T, typename C>
struct RowTerms {
  std::vector<C> weights;  // empty without a class weight
  const C* weight = nullptr;
  int64_t ignore_index;
  double smoothing, share, weight_sum;

  RowTerms(const Tensor& w, int64_t classes, int64_t ignore, double s)
      : ignore_index(ignore), smoothing(s), share(s / static_cast<double>(classes)),
        weight_sum(static_cast<double>(classes)) {
    if (!w.defined()) return;
    const T* values = w.data_ptr<T>();
    weights.assign(values, values + classes);  // (16-bit: converted to float)
    weight = weights.data();
    weight_sum = partial_sums<double>(classes, [this](int64_t c) { return static_cast<double>(weight[c]); });
  }
  double weight_of(int64_t c) const { return weight != nullptr ? static_cast<double>(weight[c]) : 1.0; }
};

// Row r of x in the compute type: the row itself, or (16-bit) converted into `buffer`.
template <typename T, typename C>
const C* compute_row(const T* x, int64_t r, int64_t n, std::vector<C>& buffer) {
  if constexpr (std::is_same_v<T, C>) {
    return x + r * n;
  } else {
    for (int64_t k = 0; k < n; ++k) buffer[k] = static_cast<C>(x[r * n + k]);
    return buffer.data();
  }
}

// v as the logits' type T rounds it (16-bit: PyTorch's log-probabilities are of the logits'
// dtype, and its loss and gradient are taken from them); v itself for float32 and float64.
template <typename T, typename C>
C as_logits_type(C v) {
  return static_cast<C>(static_cast<T>(v));
}

// T: the logits' type; C: the one computed in (float for the 16-bit types), also the stats'.
template <typename T, typename C = compute_t<T>>
void forward_rows(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                  const RowTerms<T, C>& terms) {
  const int64_t rows = logits.size(0), n = logits.size(1);
  const T* x = logits.data_ptr<T>();
  const int64_t* target = targets.data_ptr<int64_t>();
  T* loss_out = loss.data_ptr<T>();
  C* stats_out = stats.data_ptr<C>();  // [rows, 2]: the maximum, the log of the sum
  parallel_rows(rows, n, kCostSoftmax, [&](int64_t first, int64_t last) {
    std::vector<C> shifted(static_cast<size_t>(n)), e(static_cast<size_t>(n)), buffer(static_cast<size_t>(n));
    for (int64_t r = first; r < last; ++r) {
      const int64_t t = target[r];
      if (t == terms.ignore_index) {
        loss_out[r] = static_cast<T>(0.0f);
        stats_out[2 * r] = stats_out[2 * r + 1] = C(0);
        continue;
      }
      const C* row = compute_row(x, r, n, buffer);
      const C m = row_max(row, n);
      for (int64_t k = 0; k < n; ++k) shifted[k] = row[k] - m;
      exp_row(shifted.data(), e.data(), n);
      const double total = partial_sums<double>(n, [&](int64_t k) { return static_cast<double>(e[k]); });
      const double log_sum = std::log(total), row_lse = static_cast<double>(m) + log_sum;
      // -log_softmax[c] (16-bit: (x - max) - log-sum in float rounded to T, as PyTorch's
      // log_softmax output).
      const auto minus_log_prob = [&](int64_t c) {
        if constexpr (std::is_same_v<T, C>) return row_lse - static_cast<double>(row[c]);
        return -static_cast<double>(as_logits_type<T>((row[c] - m) - static_cast<C>(log_sum)));
      };
      double value = (1 - terms.smoothing) * terms.weight_of(t) * minus_log_prob(t);
      if (terms.smoothing > 0) {
        value +=
            terms.share * partial_sums<double>(n, [&](int64_t c) { return terms.weight_of(c) * minus_log_prob(c); });
      }
      loss_out[r] = static_cast<T>(static_cast<C>(value));
      stats_out[2 * r] = m;
      stats_out[2 * r + 1] = static_cast<C>(log_sum);
    }
  });
}

template <typename T, typename C = compute_t<T>>
void backward_rows(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits, const Tensor& stats,
                   const Tensor& targets, const RowTerms<T, C>& terms) {
  const int64_t rows = logits.size(0), n = logits.size(1);
  const T* x = logits.data_ptr<T>();
  const T* g = grad_loss.data_ptr<T>();
  const C* row_stats = stats.data_ptr<C>();
  const int64_t* target = targets.data_ptr<int64_t>();
  T* out = grad_logits.data_ptr<T>();
  parallel_rows(rows, n, kCostSoftmax, [&](int64_t first, int64_t last) {
    std::vector<C> shifted(static_cast<size_t>(n)), buffer(static_cast<size_t>(n)), result;
    if constexpr (!std::is_same_v<T, C>) result.resize(static_cast<size_t>(n));
    for (int64_t r = first; r < last; ++r) {
      const int64_t t = target[r];
      if (t == terms.ignore_index) {
        std::fill(out + r * n, out + (r + 1) * n, static_cast<T>(0.0f));
        continue;
      }
      C* out_row;  // the gradient's row, or (16-bit) a float row converted at the end
      if constexpr (std::is_same_v<T, C>) {
        out_row = out + r * n;
      } else {
        out_row = result.data();
      }
      const C* row = compute_row(x, r, n, buffer);
      const C m = row_stats[2 * r], log_sum = row_stats[2 * r + 1];
      for (int64_t k = 0; k < n; ++k) shifted[k] = (row[k] - m) - log_sum;
      if constexpr (!std::is_same_v<T, C>) {  // the forward's log-probabilities, rounded to T
        for (int64_t k = 0; k < n; ++k) shifted[k] = as_logits_type<T>(shifted[k]);
      }
      exp_row(shifted.data(), out_row, n);
      const double gr = static_cast<double>(static_cast<C>(g[r])), wt = terms.weight_of(t);
      const C scale = static_cast<C>(gr * ((1 - terms.smoothing) * wt + terms.share * terms.weight_sum));
      const C spread = static_cast<C>(gr * terms.share);
      if (terms.weight != nullptr) {
        for (int64_t k = 0; k < n; ++k) out_row[k] = scale * out_row[k] - spread * terms.weight[k];
      } else {
        for (int64_t k = 0; k < n; ++k) out_row[k] = scale * out_row[k] - spread;
      }
      out_row[t] -= static_cast<C>(gr * (1 - terms.smoothing) * wt);
      if constexpr (!std::is_same_v<T, C>) {
        for (int64_t k = 0; k < n; ++k) out[r * n + k] = static_cast<T>(out_row[k]);
      }
    }
  });
}

}  // namespace

bool CpuBackend::cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& targets,
                               const Tensor& weight, int64_t ignore_index, double label_smoothing) {
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_rows<T>(loss, stats, logits, targets, {weight, logits.size(1), ignore_index, label_smoothing});
  });
  return true;
}

bool CpuBackend::cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& stats, const Tensor& targets, const Tensor& weight,
                                        int64_t ignore_index, double label_smoothing) {
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_rows<T>(grad_logits, grad_loss, logits, stats, targets,
                     {weight, logits.size(1), ignore_index, label_smoothing});
  });
  return true;
}

}  // namespace tinyddp::tensor::cpu
