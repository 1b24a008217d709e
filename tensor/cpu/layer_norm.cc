// CPU layer normalisation (cpu/backend.h) over the rows of a contiguous [M, N] matrix. Each row's
// statistics accumulate in double from eight partial sums (one running sum would wait on
// each add's latency): the mean, then the squared deviations from it (two passes, so a row of
// large equal values has variance 0, not a cancellation's residue). The elementwise steps run
// in the compute type (float for the 16-bit types).
#include <cmath>

#include "tinyddp/tensor/cpu/backend.h"
#include "tinyddp/tensor/cpu/loops.h"

namespace tinyddp::tensor::cpu {

namespace {

// sum over k < n of f(k), in double, from eight partial sums.
template <typename F>
double sum_of(int64_t n, F&& f) {
  constexpr int kParts = 8;
  double part[kParts] = {};
  int64_t k = 0;
  for (; k + kParts <= n; k += kParts) {
    for (int p = 0; p < kParts; ++p) part[p] += f(k + p);
  }
  double tail = 0;
  for (; k < n; ++k) tail += f(k);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])) + tail;
}

// weight[k] (1 when undefined) and bias[k] (0 when undefined) as compute-type values.
template <typename T>
struct Affine {
  using C = compute_t<T>;
  const T* w;
  const T* b;
  Affine(const Tensor& weight, const Tensor& bias)
      : w(weight.defined() ? weight.data_ptr<T>() : nullptr), b(bias.defined() ? bias.data_ptr<T>() : nullptr) {}
  C weight(int64_t k) const { return w != nullptr ? static_cast<C>(w[k]) : C(1); }
  C bias(int64_t k) const { return b != nullptr ? static_cast<C>(b[k]) : C(0); }
};

}  // namespace

void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    dispatch_floating(mean.dtype(), "layer_norm", [&](auto stat_tag) {
      using S = typename decltype(stat_tag)::type;
      const int64_t rows = x.size(0), n = x.size(1);
      const Affine<T> affine(weight, bias);
      const T* in = x.data_ptr<T>();
      T* o = out.data_ptr<T>();
      S* mean_out = mean.data_ptr<S>();
      S* rstd_out = rstd.data_ptr<S>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = in + r * n;
        const auto value = [row](int64_t k) { return static_cast<double>(static_cast<C>(row[k])); };
        const double m = n > 0 ? sum_of(n, value) / static_cast<double>(n) : 0.0;
        const double var =
            n > 0 ? sum_of(n, [&](int64_t k) { return (value(k) - m) * (value(k) - m); }) / static_cast<double>(n)
                  : 0.0;
        const double inv = 1.0 / std::sqrt(var + eps);
        mean_out[r] = static_cast<S>(m);
        rstd_out[r] = static_cast<S>(inv);
        const C cm = static_cast<C>(m), ci = static_cast<C>(inv);
        T* out_row = o + r * n;
        for (int64_t k = 0; k < n; ++k) {
          out_row[k] = static_cast<T>((static_cast<C>(row[k]) - cm) * ci * affine.weight(k) + affine.bias(k));
        }
      }
    });
  });
}

void layer_norm_backward(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight) {
  // With g = dy * weight and xhat = (x - mean) * rstd, per row of n:
  // grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)).
  dispatch_floating(x.dtype(), "layer_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    dispatch_floating(mean.dtype(), "layer_norm backward", [&](auto stat_tag) {
      using S = typename decltype(stat_tag)::type;
      const int64_t rows = x.size(0), n = x.size(1);
      const Affine<T> affine(weight, Tensor());
      const T* in = x.data_ptr<T>();
      const T* g_in = dy.data_ptr<T>();
      T* gx = grad_x.data_ptr<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = in + r * n;
        const T* g_row = g_in + r * n;
        const double m = static_cast<double>(mean.data_ptr<S>()[r]), inv = static_cast<double>(rstd.data_ptr<S>()[r]);
        const auto g = [&](int64_t k) {
          return static_cast<double>(static_cast<C>(g_row[k])) * static_cast<double>(affine.weight(k));
        };
        const auto xhat = [&](int64_t k) { return (static_cast<double>(static_cast<C>(row[k])) - m) * inv; };
        const double mean_g = sum_of(n, g) / static_cast<double>(n);
        const double mean_gx = sum_of(n, [&](int64_t k) { return g(k) * xhat(k); }) / static_cast<double>(n);
        T* out_row = gx + r * n;
        for (int64_t k = 0; k < n; ++k) out_row[k] = static_cast<T>(inv * (g(k) - mean_g - xhat(k) * mean_gx));
      }
    });
  });
}

}  // namespace tinyddp::tensor::cpu
