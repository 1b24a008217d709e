// F::interpolate and Upsample (upsample.h), composed of index_select: each spatial dim in turn,
// the last first, takes its source positions (nearest), its two neighbours weighted (linear)
// or its four (bicubic), with the positions and weights computed as PyTorch's kernels compute them (in
// float32 for float32 inputs), so the output matches PyTorch's and the gradient is
// index_select's sum of the same weights.
#include "tinyddp/nn/upsample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tinyddp/nn/functional.h"

namespace tinyddp::nn {

namespace {

using tensor::Tensor;

bool is_linear(const std::string& mode) { return mode == "linear" || mode == "bilinear" || mode == "trilinear"; }

// The source scale of one dim, as PyTorch's compute_scales_value: 1 / scale_factor when it is
// given, else in / out (T: float for 32-bit and narrower inputs, double for float64).
template <typename T>
T source_scale(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

// "nearest" (legacy: floor(j s), with its exact 1x and 2x cases) and "nearest-exact"
// (floor((j + 1/2) s)), both in float32 as PyTorch's.
std::vector<int64_t> nearest_sources(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  const float s = source_scale<float>(scale, in, out);
  std::vector<int64_t> index(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) {
    int64_t i = 0;
    if (exact) {
      i = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(j) + 0.5) * s)));
    } else if (out == in) {
      i = j;
    } else if (out == 2 * in) {
      i = j >> 1;
    } else {
      i = static_cast<int64_t>(std::floor(static_cast<float>(j) * s));
    }
    index[static_cast<size_t>(j)] = std::min(i, in - 1);
  }
  return index;
}

// Linear interpolation's two neighbours of each output position and the second one's weight.
struct LinearTaps {
  std::vector<int64_t> lower, upper;
  std::vector<double> weight;  // of upper; lower's is 1 - weight
};

template <typename T>
LinearTaps linear_taps(int64_t in, int64_t out, std::optional<double> scale, bool align_corners) {
  const T s = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                            : source_scale<T>(scale, in, out);
  LinearTaps taps;
  for (int64_t j = 0; j < out; ++j) {
    T src = align_corners ? s * static_cast<T>(j) : s * (static_cast<T>(j) + T(0.5)) - T(0.5);
    if (src < T(0)) src = T(0);
    const int64_t lo = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const T lambda = std::min(std::max(src - static_cast<T>(lo), T(0)), T(1));
    taps.lower.push_back(lo);
    taps.upper.push_back(lo + (lo < in - 1 ? 1 : 0));
    taps.weight.push_back(static_cast<double>(lambda));
  }
  return taps;
}

// Column `values` [n] shaped to broadcast along dim d of x ([n, 1, ...]).
Tensor along(const Tensor& values, const Tensor& x, int64_t d) {
  tensor::Shape shape(static_cast<size_t>(x.dim() - d), 1);
  shape[0] = values.numel();
  return values.reshape(shape);
}

Tensor linear_along(const Tensor& x, int64_t d, int64_t out, std::optional<double> scale, bool align_corners) {
  const int64_t in = x.size(d);
  const LinearTaps taps = x.dtype() == tensor::kFloat64 ? linear_taps<double>(in, out, scale, align_corners)
                                                        : linear_taps<float>(in, out, scale, align_corners);
  std::vector<double> lower_weight;  // as PyTorch's lambda0 = 1 - lambda1, in the same type
  for (const double w : taps.weight)
    lower_weight.push_back(x.dtype() == tensor::kFloat64 ? 1.0 - w : 1.0f - static_cast<float>(w));
  const auto column = [&](const std::vector<double>& values) {
    return along(tensor::from_vector(values).to(x.dtype()).to(x.device()), x, d);
  };
  const Tensor w0 = column(lower_weight), w1 = column(taps.weight);
  const Tensor lo = tensor::index_select(x, d, tensor::from_vector(taps.lower).to(x.device()));
  const Tensor hi = tensor::index_select(x, d, tensor::from_vector(taps.upper).to(x.device()));
  return tensor::add(tensor::mul(lo, w0), tensor::mul(hi, w1));
}

// Bicubic interpolation's four neighbours of each output position (clamped to the edge) and
// their weights: PyTorch's cubic convolution (A = -0.75) of the position's fraction, the source
// position not clamped at 0 (its area_pixel_compute_source_index with cubic), in T.
struct CubicTaps {
  std::vector<int64_t> index[4];
  std::vector<double> weight[4];
};

template <typename T>
CubicTaps cubic_taps(int64_t in, int64_t out, std::optional<double> scale, bool align_corners) {
  const T s = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                            : source_scale<T>(scale, in, out);
  const T a = T(-0.75);
  const auto near = [a](T x) { return ((a + T(2)) * x - (a + T(3))) * x * x + T(1); };       // |x| <= 1
  const auto far = [a](T x) { return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a; };  // 1 < |x| < 2
  CubicTaps taps;
  for (int64_t j = 0; j < out; ++j) {
    const T src = align_corners ? s * static_cast<T>(j) : s * (static_cast<T>(j) + T(0.5)) - T(0.5);
    const auto first = static_cast<int64_t>(std::floor(src));
    const T t = src - static_cast<T>(first);
    const T w[4] = {far(t + T(1)), near(t), near(T(1) - t), far(T(2) - t)};
    for (int k = 0; k < 4; ++k) {
      taps.index[k].push_back(std::min(std::max<int64_t>(first - 1 + k, 0), in - 1));
      taps.weight[k].push_back(static_cast<double>(w[k]));
    }
  }
  return taps;
}

Tensor cubic_along(const Tensor& x, int64_t d, int64_t out, std::optional<double> scale, bool align_corners) {
  const int64_t in = x.size(d);
  const CubicTaps taps = x.dtype() == tensor::kFloat64 ? cubic_taps<double>(in, out, scale, align_corners)
                                                       : cubic_taps<float>(in, out, scale, align_corners);
  Tensor sum;
  for (int k = 0; k < 4; ++k) {  // x0 w0 + x1 w1 + x2 w2 + x3 w3, in PyTorch's order
    const Tensor w = along(tensor::from_vector(taps.weight[k]).to(x.dtype()).to(x.device()), x, d);
    const Tensor term = tensor::mul(tensor::index_select(x, d, tensor::from_vector(taps.index[k]).to(x.device())), w);
    sum = sum.defined() ? tensor::add(sum, term) : term;
  }
  return sum;
}

// antialias=True (bilinear, bicubic): output j is a normalised weighted sum of the inputs under a
// filter centred on its source position s (j + 1/2) and, when shrinking (s > 1), stretched by s
// so that every input within reach contributes (the separable filters of PyTorch's and Pillow's
// resize: a triangle, or the cubic with a = -0.5). The weights as a dense [out, in] matrix, in
// the input's precision.
template <typename T>
std::vector<T> antialias_weights(int64_t in, int64_t out, std::optional<double> scale, bool align_corners, bool cubic) {
  const T s = align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                            : source_scale<T>(scale, in, out);
  const T reach = cubic ? T(2) : T(1);  // the filter's half-width at scale 1
  const T support = s >= T(1) ? reach * s : reach, invscale = s >= T(1) ? T(1) / s : T(1);
  const auto filter = [cubic](T x) {
    x = std::abs(x);
    if (!cubic) return x < T(1) ? T(1) - x : T(0);
    const T a = T(-0.5);
    if (x < T(1)) return ((a + T(2)) * x - (a + T(3))) * x * x + T(1);
    return x < T(2) ? ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a : T(0);
  };
  std::vector<T> w(static_cast<size_t>(in * out), T(0));
  for (int64_t j = 0; j < out; ++j) {
    const T center = static_cast<T>(static_cast<double>(s) * (static_cast<double>(j) + 0.5));
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(center - support + T(0.5)), 0);
    const int64_t last = std::min<int64_t>(static_cast<int64_t>(center + support + T(0.5)), in);
    T* row = w.data() + j * in;
    T total = T(0);
    for (int64_t i = first; i < last; ++i) total += row[i] = filter((static_cast<T>(i) - center + T(0.5)) * invscale);
    if (total != T(0)) {
      for (int64_t i = first; i < last; ++i) row[i] /= total;
    }
  }
  return w;
}

// x resized along dim d by antialias_weights: a product with the [in, out] matrix (so the
// gradient is the transposed product, on any device).
Tensor antialias_along(const Tensor& x, int64_t d, int64_t out, std::optional<double> scale, bool align_corners,
                       bool cubic) {
  const int64_t in = x.size(d);
  const Tensor w = x.dtype() == tensor::kFloat64
                       ? tensor::from_vector(antialias_weights<double>(in, out, scale, align_corners, cubic))
                       : tensor::from_vector(antialias_weights<float>(in, out, scale, align_corners, cubic));
  const Tensor weights = w.view({out, in}).t().to(x.device());
  return tensor::matmul(x.transpose(d, -1), weights).transpose(d, -1);
}

void check_interpolate(const Tensor& input, const InterpolateFuncOptions& o) {
  TDDP_CHECK(input.defined() && input.is_floating_point(), "interpolate: expected a floating-point input");
  const std::string& mode = o.mode();
  TDDP_CHECK(mode == "nearest" || mode == "nearest-exact" || is_linear(mode) || mode == "bicubic" || mode == "area",
             "interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or "
             "'area', got '{}'",
             mode);
  TDDP_CHECK(input.dim() >= 3 && input.dim() <= 5,
             "interpolate: Input Error: Only 3D, 4D and 5D input Tensors supported (got {}D) for the modes: nearest | "
             "linear | bilinear | bicubic | trilinear | area | nearest-exact (got {})",
             input.dim(), mode);
  const int64_t want = mode == "linear"                          ? 3
                       : mode == "bilinear" || mode == "bicubic" ? 4
                       : mode == "trilinear"                     ? 5
                                                                 : input.dim();
  TDDP_CHECK(input.dim() == want, "interpolate: Got {}D input, but {} mode needs {}D input", input.dim(), mode, want);
  TDDP_CHECK(!o.antialias() || mode == "bilinear" || mode == "bicubic",
             "interpolate: Anti-alias option is only supported for bilinear and bicubic modes");
  TDDP_CHECK(!o.align_corners() || is_linear(mode) || mode == "bicubic",
             "interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear | "
             "bicubic | trilinear");
  TDDP_CHECK(!o.size().empty() || !o.scale_factor().empty(),
             "interpolate: either size or scale_factor should be defined");
  TDDP_CHECK(o.size().empty() || o.scale_factor().empty(),
             "interpolate: only one of size or scale_factor should be defined");
  TDDP_CHECK(o.size().empty() || !o.recompute_scale_factor().value_or(false),
             "interpolate: recompute_scale_factor is not meaningful with an explicit size.");
}

// One entry per spatial dim: `values` itself, or its one entry repeated.
template <typename T>
std::vector<T> per_dim(const std::vector<T>& values, const Tensor& input, const char* what) {
  const size_t dims = static_cast<size_t>(input.dim() - 2);
  TDDP_CHECK(values.size() == 1 || values.size() == dims,
             "interpolate: Input and output must have the same number of spatial dimensions, but got input with "
             "spatial dimensions of {} and {} with {} entries",
             tensor::format_shape(tensor::Shape(input.sizes().begin() + 2, input.sizes().end())), what, values.size());
  return values.size() == dims ? values : std::vector<T>(dims, values[0]);
}

}  // namespace

namespace functional {

Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& o) {
  check_interpolate(input, o);
  const int64_t dims = input.dim() - 2;
  std::vector<int64_t> out(static_cast<size_t>(dims));
  std::vector<std::optional<double>> scales(static_cast<size_t>(dims));
  if (!o.size().empty()) {
    out = per_dim(o.size(), input, "output size");
  } else {
    const std::vector<double> factors = per_dim(o.scale_factor(), input, "scale_factor");
    for (int64_t k = 0; k < dims; ++k) {
      const auto i = static_cast<size_t>(k);
      out[i] = static_cast<int64_t>(std::floor(static_cast<double>(input.size(k + 2)) * factors[i]));
      if (!o.recompute_scale_factor().value_or(false)) scales[i] = factors[i];
    }
  }
  for (int64_t k = 0; k < dims; ++k) {
    TDDP_CHECK(out[static_cast<size_t>(k)] > 0 && input.size(k + 2) > 0,
               "interpolate: Input and output sizes should be greater than 0, but got input {} and output size {}",
               tensor::format_shape(input.sizes()), out[static_cast<size_t>(k)]);
  }
  const std::string& mode = o.mode();
  if (mode == "area") {  // adaptive average pooling (3-D inputs as 4-D of height 1)
    if (dims == 1) return tensor::adaptive_avg_pool2d(input.unsqueeze(2), {1, out[0]}).squeeze(2);
    TDDP_CHECK(dims == 2, "interpolate: mode 'area' takes a 3D or 4D input here, got {}D", input.dim());
    return tensor::adaptive_avg_pool2d(input, {out[0], out[1]});
  }
  // 16-bit inputs interpolate in float32 (PyTorch's accumulation type) and round once.
  const bool narrow = input.dtype() == tensor::kFloat16 || input.dtype() == tensor::kBFloat16;
  Tensor x = narrow ? input.to(tensor::kFloat32) : input;
  for (int64_t k = dims - 1; k >= 0; --k) {  // the last dim first: PyTorch's weights' nesting
    const auto i = static_cast<size_t>(k);
    const int64_t d = k + 2;
    if (o.antialias()) {
      // Dims whose size stays are left alone, as PyTorch's separable passes leave them.
      if (x.size(d) != out[i]) {
        x = antialias_along(x, d, out[i], scales[i], o.align_corners().value_or(false), mode == "bicubic");
      }
    } else if (is_linear(mode)) {
      x = linear_along(x, d, out[i], scales[i], o.align_corners().value_or(false));
    } else if (mode == "bicubic") {
      x = cubic_along(x, d, out[i], scales[i], o.align_corners().value_or(false));
    } else {
      const auto index = nearest_sources(x.size(d), out[i], scales[i], mode == "nearest-exact");
      x = tensor::index_select(x, d, tensor::from_vector(index).to(x.device()));
    }
  }
  // Stored channels last when the input is, as PyTorch's kernels give it.
  const Tensor result = narrow ? x.to(input.dtype()) : x;
  return dims == 2 ? result.contiguous(input.suggest_memory_format()) : result;
}

}  // namespace functional

Upsample::Upsample(UpsampleOptions o) : Module("Upsample"), options(std::move(o)) {
  // the checks that need no input; the rest are the forward's (interpolate's)
  TDDP_CHECK(!options.size().empty() || !options.scale_factor().empty(),
             "Upsample: either size or scale_factor should be defined");
  TDDP_CHECK(options.size().empty() || options.scale_factor().empty(),
             "Upsample: only one of size or scale_factor should be defined");
}

Tensor Upsample::forward(const Tensor& input) {
  return functional::interpolate(input, InterpolateFuncOptions()
                                            .size(options.size())
                                            .scale_factor(options.scale_factor())
                                            .mode(options.mode())
                                            .align_corners(options.align_corners()));
}

std::string Upsample::extra_repr() const {
  // PyTorch 2's: scale_factor as a float (or a tuple of them), size as an int (or a tuple)
  std::string info;
  const auto tuple = [](const auto& values, const auto& format) {
    if (values.size() == 1) return format(values[0]);
    std::string s = "(";
    for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + format(values[i]);
    return s + ")";
  };
  if (!options.scale_factor().empty()) {
    info = "scale_factor=" + tuple(options.scale_factor(), [](double v) { return repr_float(v); });
  } else {
    info = "size=" + tuple(options.size(), [](int64_t v) { return std::to_string(v); });
  }
  return info + ", mode='" + options.mode() + "'";
}

}  // namespace tinyddp::nn
