// CPU layer normalisation (backends/cpu/backend.h) over the rows of a contiguous [M, N] matrix. Each row's
// statistics accumulate in double from eight partial sums (one running sum would wait on
// each add's latency): the mean, then the squared deviations from it (two passes, so a row of
// large equal values has variance 0, not a cancellation's residue). The elementwise steps run
// in the compute type (float for the 16-bit types) over per-call buffers of the weight and
// bias, in loops without branches, so that they vectorise. Rows run on the intra-op threads;
// the backward's weight and bias sums go in chunks of rows fixed by the shape, added in order.
#include <cmath>
#include <type_traits>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/loops.h"

namespace tinyddp::tensor::cpu {

namespace {

// The statistics' type (mean, rstd): float64 for float64 x, else float32 (internal/backend.h).
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The mean over k < n of f(k), in double (0 for an empty row).
template <typename F>
double mean_of(int64_t n, F&& f) {
  return n > 0 ? partial_sums<double>(n, f) / static_cast<double>(n) : 0.0;
}

// A [N] tensor's values in the compute type C, or `missing` everywhere when undefined.
template <typename T, typename C>
std::vector<C> values_or(const Tensor& t, int64_t n, C missing) {
  std::vector<C> v(static_cast<size_t>(n), missing);
  if (t.defined()) {
    const T* p = t.data_ptr<T>();
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<C>(p[k]);
  }
  return v;
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                            const Tensor& weight, const Tensor& bias, double eps) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using S = stat_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    const std::vector<C> w = values_or<T>(weight, n, C(1)), b = values_or<T>(bias, n, C(0));
    const T* in = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    S* mean_out = mean.data_ptr<S>();
    S* rstd_out = rstd.data_ptr<S>();
    parallel_rows(rows, n, kCostNormalize, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const T* row = in + r * n;
        const auto value = [row](int64_t k) { return static_cast<double>(static_cast<C>(row[k])); };
        const double m = mean_of(n, value);
        const double var = mean_of(n, [&](int64_t k) { return (value(k) - m) * (value(k) - m); });
        const double inv = 1.0 / std::sqrt(var + eps);
        mean_out[r] = static_cast<S>(m);
        rstd_out[r] = static_cast<S>(inv);
        const C cm = static_cast<C>(m), ci = static_cast<C>(inv);
        T* out_row = o + r * n;
        for (int64_t k = 0; k < n; ++k) out_row[k] = static_cast<T>((static_cast<C>(row[k]) - cm) * ci * w[k] + b[k]);
      }
    });
  });
}

bool CpuBackend::layer_norm_backward(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& weight) {
  // With g = dy * weight and xhat = (x - mean) * rstd, per row of n:
  // grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)); over the rows,
  // grad_weight = sum of dy * xhat and grad_bias = sum of dy (accumulated in double).
  dispatch_floating(x.dtype(), "layer_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using S = stat_t<T>;
    const int64_t rows = x.size(0), n = x.size(1);
    const std::vector<C> w = values_or<T>(weight, n, C(1));
    const size_t wn = grad_weight.defined() ? n : 0, bn = grad_bias.defined() ? n : 0;
    const T* in = x.data_ptr<T>();
    const T* g_in = dy.data_ptr<T>();
    T* gx = grad_x.defined() ? grad_x.data_ptr<T>() : nullptr;
    // Per chunk of rows: grad_x's rows, and the chunk's sums of dy * xhat and dy.
    const auto parts = parallel_row_partials(rows, n, 64, [&](int64_t first, int64_t last) {
      std::vector<C> g(static_cast<size_t>(n)), xhat(static_cast<size_t>(n)), d(static_cast<size_t>(n));
      std::vector<double> dw(wn, 0.0), db(bn, 0.0);
      for (int64_t r = first; r < last; ++r) {
        const T* row = in + r * n;
        const T* dy_row = g_in + r * n;
        const C cm = static_cast<C>(mean.data_ptr<S>()[r]), ci = static_cast<C>(rstd.data_ptr<S>()[r]);
        for (int64_t k = 0; k < n; ++k) {
          d[k] = static_cast<C>(dy_row[k]);
          xhat[k] = (static_cast<C>(row[k]) - cm) * ci;
          g[k] = d[k] * w[k];
        }
        for (size_t k = 0; k < dw.size(); ++k) dw[k] += static_cast<double>(d[k]) * static_cast<double>(xhat[k]);
        for (size_t k = 0; k < db.size(); ++k) db[k] += static_cast<double>(d[k]);
        if (gx == nullptr) continue;
        const C mean_g = static_cast<C>(mean_of(n, [&](int64_t k) { return static_cast<double>(g[k]); }));
        const C mean_gx = static_cast<C>(
            mean_of(n, [&](int64_t k) { return static_cast<double>(g[k]) * static_cast<double>(xhat[k]); }));
        T* out_row = gx + r * n;
        for (int64_t k = 0; k < n; ++k) out_row[k] = static_cast<T>(ci * (g[k] - mean_g - xhat[k] * mean_gx));
      }
      return std::make_pair(std::move(dw), std::move(db));
    });
    std::vector<double> dw(wn, 0.0), db(bn, 0.0);
    for (const auto& [part_dw, part_db] : parts) {  // in chunk order
      for (size_t k = 0; k < wn; ++k) dw[k] += part_dw[k];
      for (size_t k = 0; k < bn; ++k) db[k] += part_db[k];
    }
    if (grad_weight.defined()) {
      T* p = grad_weight.data_ptr<T>();
      for (int64_t k = 0; k < n; ++k) p[k] = static_cast<T>(dw[k]);
    }
    if (grad_bias.defined()) {
      T* p = grad_bias.data_ptr<T>();
      for (int64_t k = 0; k < n; ++k) p[k] = static_cast<T>(db[k]);
    }
  });
  return true;
}

}  // namespace tinyddp::tensor::cpu
