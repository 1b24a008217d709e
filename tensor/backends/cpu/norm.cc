// CPU batch-normalisation kernels (backends/cpu/backend.h). x is contiguous [N, C, S] (S: the product
// of the dims after 1, 1 for [N, C]); each pass sweeps memory once in order, per channel
// accumulating in double: the statistics in two passes (the mean, then the squared
// deviations from it), the gradient sums in one, each channel's sums in lanes (LaneSums).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "tinyddp/tensor/backends/cpu/backend.h"
#include "tinyddp/tensor/backends/cpu/loops.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/internal/philox.h"

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

// Per-channel sums (Sums of them) in kLanes lanes of double: element k of a row goes to lane
// k mod kLanes, a channel's rows in order of n, and each channel's lanes are added in a fixed
// order at the end (total). The lanes vectorise and do not wait on one another's adds; nothing
// depends on the thread count (a channel's rows all run on one thread).
template <int Sums>
class LaneSums {
 public:
  explicit LaneSums(int64_t channels) : lanes_(static_cast<size_t>(channels)) {}
  // Adds f(k, v) (which fills v[0 .. Sums)) for k in [0, n) to channel c's lanes.
  template <typename F>
  void add(int64_t c, int64_t n, F&& f) {
    Lanes acc = lanes_[c];  // in registers for the row
    double v[Sums];
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        f(k + j, v);
        for (int i = 0; i < Sums; ++i) acc[i][j] += v[i];
      }
    }
    for (int j = 0; k + j < n; ++j) {
      f(k + j, v);
      for (int i = 0; i < Sums; ++i) acc[i][j] += v[i];
    }
    lanes_[c] = acc;
  }
  double total(int64_t c, int i) const {
    const std::array<double, kLanes>& l = lanes_[c][i];
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  }

 private:
  // Each channel's lanes on cache lines of their own: the threads write neighbouring channels'
  // lanes once per row, and two channels sharing a line made the backward's 2-thread pass over
  // [64, 32, 4, 4] slower than one thread's (bench/README.md, "False sharing in the batch-norm
  // sums").
  struct alignas(64) Lanes : std::array<std::array<double, kLanes>, Sums> {};
  std::vector<Lanes> lanes_;  // zeros to begin with
};

// A [C] tensor's values as double (1 where undefined, for a missing weight), in its own dtype
// (x's, or float32 beside a 16-bit x).
std::vector<double> per_channel(const Tensor& t, int64_t channels, double missing) {
  std::vector<double> v(static_cast<size_t>(channels), missing);
  if (!t.defined()) return v;
  const Tensor dense = backend().contiguous(t);
  dispatch_floating(t.dtype(), "batch_norm", [&](auto tag) {
    using P = typename decltype(tag)::type;
    const P* p = dense.data_ptr<P>();
    for (int64_t c = 0; c < channels; ++c) v[c] = static_cast<double>(static_cast<compute_t<P>>(p[c]));
  });
  return v;
}

Tensor channel_tensor(const std::vector<double>& v, DType dtype) {
  Tensor out = empty({static_cast<int64_t>(v.size())}, dtype);
  dispatch_floating(dtype, "batch_norm", [&](auto tag) {
    using P = typename decltype(tag)::type;
    P* p = out.data_ptr<P>();
    for (size_t c = 0; c < v.size(); ++c) p[c] = static_cast<P>(static_cast<compute_t<P>>(v[c]));
  });
  return out;
}

}  // namespace

std::optional<std::tuple<Tensor, Tensor>> CpuBackend::batch_norm_mean_var(const Tensor& x, DType stats_dtype) {
  return dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Layout l(x);
    const T* data = x.data_ptr<T>();
    std::vector<double> mean(static_cast<size_t>(l.c)), var(static_cast<size_t>(l.c));
    const auto value = [data](int64_t e) { return static_cast<double>(static_cast<compute_t<T>>(data[e])); };
    LaneSums<1> sums(l.c), squares(l.c);
    for_each_row(l, [&](int64_t c, int64_t offset) {
      sums.add(c, l.s, [&](int64_t k, double* v) { v[0] = value(offset + k); });
    });
    for (int64_t c = 0; c < l.c; ++c) mean[c] = sums.total(c, 0) / l.count();
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const double m = mean[c];
      squares.add(c, l.s, [&](int64_t k, double* v) {
        const double d = value(offset + k) - m;
        v[0] = d * d;
      });
    });
    for (int64_t c = 0; c < l.c; ++c) var[c] = squares.total(c, 0) / l.count();
    return std::make_tuple(channel_tensor(mean, stats_dtype), channel_tensor(var, stats_dtype));
  });
}

bool CpuBackend::batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& mean, const Tensor& invstd) {
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Layout l(x);
    // out = x * alpha + beta with alpha = invstd * weight, beta = bias - mean * alpha (PyTorch's form).
    const std::vector<double> m = per_channel(mean, l.c, 0), is = per_channel(invstd, l.c, 1);
    const std::vector<double> w = per_channel(weight, l.c, 1), b = per_channel(bias, l.c, 0);
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
    const std::vector<double> m = per_channel(mean, l.c, 0);
    std::vector<double> sum_dy(static_cast<size_t>(l.c)), sum_dy_xmu(static_cast<size_t>(l.c));
    const T* g = dy.data_ptr<T>();
    const T* in = x.data_ptr<T>();
    LaneSums<2> sums(l.c);
    for_each_row(l, [&](int64_t c, int64_t offset) {
      const double mc = m[c];
      sums.add(c, l.s, [&](int64_t k, double* v) {
        v[0] = static_cast<double>(static_cast<compute_t<T>>(g[offset + k]));
        v[1] = v[0] * (static_cast<double>(static_cast<compute_t<T>>(in[offset + k])) - mc);
      });
    });
    for (int64_t c = 0; c < l.c; ++c) {
      sum_dy[c] = sums.total(c, 0);
      sum_dy_xmu[c] = sums.total(c, 1);
    }
    return std::make_tuple(channel_tensor(sum_dy, mean.dtype()), channel_tensor(sum_dy_xmu, mean.dtype()));
  });
}

bool CpuBackend::batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                                           const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                           const Tensor& sum_dy_xmu, double count) {
  dispatch_floating(x.dtype(), "batch_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Layout l(x);
    const std::vector<double> m = per_channel(mean, l.c, 0), is = per_channel(invstd, l.c, 1);
    const std::vector<double> w = per_channel(weight, l.c, 1);
    const std::vector<double> sd = per_channel(sum_dy, l.c, 0), sdx = per_channel(sum_dy_xmu, l.c, 0);
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

// The key's value: only a device's kernels are handed a slot (kernel_ops.h's RandomKey).
bool CpuBackend::dropout_mask(const Tensor& mask, double p, const RandomKey& key) {
  dispatch_floating(mask.dtype(), "dropout_mask", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto as_t = [](double value) {  // 16-bit floats through float, as the casts
      if constexpr (is_16bit_float_v<T>) {
        return T(static_cast<float>(value));
      } else {
        return static_cast<T>(value);
      }
    };
    const T kept = as_t(1.0 / (1.0 - p)), dropped = as_t(0.0);
    const float keep = static_cast<float>(1.0 - p);
    T* out = mask.data_ptr<T>();
    parallel_for(0, mask.numel(), kElementwiseGrain, [&](int64_t from, int64_t to) {
      philox::KeepStream stream(key.value, keep);
      for (int64_t i = from; i < to; ++i) out[i] = stream(static_cast<uint64_t>(i)) ? kept : dropped;
    });
  });
  return true;
}

}  // namespace tinyddp::tensor::cpu
