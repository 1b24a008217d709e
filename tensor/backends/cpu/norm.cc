// CPU batch-normalisation kernels (backends/cpu/backend.h). x is contiguous [N, C, S] (S: the product
// of the dims after 1, 1 for [N, C]); each pass sweeps memory once in order, per channel
// accumulating in double: the statistics in two passes (the mean, then the squared
// deviations from it), the gradient sums in one. Each row's sum runs in kLanes lanes (element k
// into lane k mod kLanes), added in a fixed order at the row's end: the lanes vectorise and
// do not wait on one another's adds, and the order depends on no thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cpu {

namespace {

struct Layout {
  int64_t n, c, s;  // batch, channels, elements per (image, channel)
  explicit Layout(const Tensor& x)
      : n(x.size(0)), c(x.size(1)), s(x.numel() / std::max<int64_t>(x.size(0) * x.size(1), 1)) {}
  double count() const { return static_cast<double>(n * s); }
};

// f(channel, row pointer(s) offset) for every (n, c) row of S elements: ranges of channels on
// the intra-op threads, each channel's rows in order of n (so its sums are the same at any
// thread count, and no two threads touch one channel's accumulators).
template <typename F>
void for_each_row(const Layout& l, F&& f) {
  parallel_rows(l.c, l.n * l.s, kCostNormalize, [&](int64_t first, int64_t last) {  // a channel: n * s elements
    for (int64_t n = 0; n < l.n; ++n) {
      for (int64_t c = first; c < last; ++c) f(c, (n * l.c + c) * l.s);
    }
  });
}

constexpr int kLanes = 8;

// The double sums over k in [0, n) of each of f(k)'s `Sums` values (f fills an array of them),
// in kLanes lanes.
template <int Sums, typename F>
std::array<double, Sums> lane_sums(int64_t n, F&& f) {
  double lanes[Sums][kLanes] = {};
  double v[Sums];
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      f(k + j, v);
      for (int i = 0; i < Sums; ++i) lanes[i][j] += v[i];
    }
  }
  for (int j = 0; k + j < n; ++j) {
    f(k + j, v);
    for (int i = 0; i < Sums; ++i) lanes[i][j] += v[i];
  }
  std::array<double, Sums> sums{};
  for (int i = 0; i < Sums; ++i) {
    const double* l = lanes[i];
    sums[i] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  }
  return sums;
}

// A [C] tensor's values as double (1 where undefined, for a missing weight).
template <typename T>
std::vector<double> per_channel(const Tensor& t, int64_t channels, double missing) {
  std::vector<double> v(static_cast<size_t>(channels), missing);
  if (!t.defined()) return v;
  const Tensor dense = backend().contiguous(t);
  const T* p = dense.data_ptr<T>();
  for (int64_t c = 0; c < channels; ++c) v[c] = static_cast<double>(static_cast<compute_t<T>>(p[c]));
  return v;
}

template <typename T>
Tensor channel_tensor(const std::vector<double>& v, DType dtype) {
  Tensor out = empty({static_cast<int64_t>(v.size())}, dtype);
  T* p = out.data_ptr<T>();
  for (size_t c = 0; c < v.size(); ++c) p[c] = static_cast<T>(static_cast<compute_t<T>>(v[c]));
  return out;
}

}  // namespace

std::optional<std::tuple<Tensor, Tensor>> CpuBackend::batch_norm_mean_var(const Tensor& x) {
  return dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Layout l(x);
    const T* data = x.data_ptr<T>();
    std::vector<double> mean(static_cast<size_t>(l.c), 0.0), var(static_cast<size_t>(l.c), 0.0);
    const auto value = [data](int64_t e) { return static_cast<double>(static_cast<compute_t<T>>(data[e])); };
    for_each_row(l, [&](int64_t c, int64_t offset) {
      mean[c] += lane_sums<1>(l.s, [&](int64_t k, double* v) { v[0] = value(offset + k); })[0];
    });
    for (double& m : mean) m /= l.count();
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const double m = mean[c];
      var[c] += lane_sums<1>(l.s, [&](int64_t k, double* v) {
        const double d = value(offset + k) - m;
        v[0] = d * d;
      })[0];
    });
    for (double& v : var) v /= l.count();
    return std::make_tuple(channel_tensor<T>(mean, x.dtype()), channel_tensor<T>(var, x.dtype()));
  });
}

bool CpuBackend::batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& mean, const Tensor& invstd) {
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Layout l(x);
    // out = x * alpha + beta with alpha = invstd * weight, beta = bias - mean * alpha (PyTorch's form).
    const std::vector<double> m = per_channel<T>(mean, l.c, 0), is = per_channel<T>(invstd, l.c, 1);
    const std::vector<double> w = per_channel<T>(weight, l.c, 1), b = per_channel<T>(bias, l.c, 0);
    std::vector<C> alpha(static_cast<size_t>(l.c)), beta(static_cast<size_t>(l.c));
    for (int64_t c = 0; c < l.c; ++c) {
      alpha[c] = static_cast<C>(is[c] * w[c]);
      beta[c] = static_cast<C>(b[c] - m[c] * is[c] * w[c]);
    }
    const T* in = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const C a = alpha[c], bb = beta[c];
      for (int64_t k = 0; k < l.s; ++k) o[offset + k] = static_cast<T>(static_cast<C>(in[offset + k]) * a + bb);
    });
  });
  return true;
}

std::optional<std::tuple<Tensor, Tensor>> CpuBackend::batch_norm_backward_reduce(const Tensor& dy, const Tensor& x,
                                                                                 const Tensor& mean) {
  return dispatch_floating(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Layout l(x);
    const std::vector<double> m = per_channel<T>(mean, l.c, 0);
    std::vector<double> sum_dy(static_cast<size_t>(l.c), 0.0), sum_dy_xmu(static_cast<size_t>(l.c), 0.0);
    const T* g = dy.data_ptr<T>();
    const T* in = x.data_ptr<T>();
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const double mc = m[c];
      const auto [a, b] = lane_sums<2>(l.s, [&](int64_t k, double* v) {
        v[0] = static_cast<double>(static_cast<compute_t<T>>(g[offset + k]));
        v[1] = v[0] * (static_cast<double>(static_cast<compute_t<T>>(in[offset + k])) - mc);
      });
      sum_dy[c] += a;
      sum_dy_xmu[c] += b;
    });
    return std::make_tuple(channel_tensor<T>(sum_dy, x.dtype()), channel_tensor<T>(sum_dy_xmu, x.dtype()));
  });
}

bool CpuBackend::batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                           const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                           const Tensor& sum_dy_xmu, double count) {
  dispatch_floating(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Layout l(x);
    const std::vector<double> m = per_channel<T>(mean, l.c, 0), is = per_channel<T>(invstd, l.c, 1);
    const std::vector<double> w = per_channel<T>(weight, l.c, 1);
    const std::vector<double> sd = per_channel<T>(sum_dy, l.c, 0), sdx = per_channel<T>(sum_dy_xmu, l.c, 0);
    // grad_x = (dy - sum_dy / n - (x - mean) * k) * invstd * weight, k = invstd^2 * sum_dy_xmu / n.
    std::vector<C> mean_c(static_cast<size_t>(l.c)), k(static_cast<size_t>(l.c)), grad_mean(static_cast<size_t>(l.c)),
        scale(static_cast<size_t>(l.c));
    for (int64_t c = 0; c < l.c; ++c) {
      mean_c[c] = static_cast<C>(m[c]);
      k[c] = static_cast<C>(sdx[c] * is[c] * is[c] / count);
      grad_mean[c] = static_cast<C>(sd[c] / count);
      scale[c] = static_cast<C>(is[c] * w[c]);
    }
    const T* g = dy.data_ptr<T>();
    const T* in = x.data_ptr<T>();
    T* o = grad_x.data_ptr<T>();
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const C mc = mean_c[c], kc = k[c], gm = grad_mean[c], sc = scale[c];
      for (int64_t e = offset; e < offset + l.s; ++e) {
        const C dx = (static_cast<C>(in[e]) - mc) * kc;
        o[e] = static_cast<T>((static_cast<C>(g[e]) - gm - dx) * sc);
      }
    });
  });
  return true;
}

}  // namespace tinyddp::tensor::cpu
