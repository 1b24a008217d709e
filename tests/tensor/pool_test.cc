// max_pool2d's 2 x 2 kernels (tensor/backends/cpu/pool.cc: dense rows in place, gathered planes
// for 16-bit maps, channels as vector lanes for channels-last maps) against PyTorch's rule
// written out in double: each window's first maximum, the last NaN, forward and backward.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;

TEST_CASE("2 x 2 max pooling keeps PyTorch's rule: the first maximum, the last NaN, -inf, signed zeros", "[conv]") {
  // PyTorch takes a tap when it is greater than the best so far or is NaN. Four 2 x 2 windows
  // (taps a b / c d): [3 5 / 5 1] -> 5 at b; all -inf -> -inf at a; [NaN 2 / NaN 7] -> NaN at c;
  // [-0 +0 / -1 -2] -> -0 at a. The gradient of the sum marks the tap each output took.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> in = {3,   5, -inf, -inf,  //
                                  5,   1, -inf, -inf,  //
                                  nan, 2, -0.0, 0.0,   //
                                  nan, 7, -1,   -2};
  const std::vector<double> taken = {0, 1, 1, 0,  //
                                     0, 0, 0, 0,  //
                                     0, 0, 1, 0,  //
                                     1, 0, 0, 0};
  for (const auto& [dtype, format] : {std::pair{kFloat64, MemoryFormat::kContiguous},
                                      {kFloat32, MemoryFormat::kContiguous},
                                      {kBFloat16, MemoryFormat::kContiguous},
                                      {kFloat32, MemoryFormat::kChannelsLast},
                                      {kBFloat16, MemoryFormat::kChannelsLast}}) {
    INFO(dtype_name(dtype) << (format == MemoryFormat::kChannelsLast ? ", channels-last (3 channels alike)" : ""));
    const int64_t c = format == MemoryFormat::kChannelsLast ? 3 : 1;
    const Tensor x = from_vector<double>(in, Shape{1, 1, 4, 4}).expand({1, c, 4, 4}).to(dtype).contiguous(format);
    x.requires_grad_();
    const Tensor y = max_pool2d(x, 2);
    const std::vector<double> out = y.to(kFloat64).contiguous().to_vector<double>();
    sum(y).backward();
    const std::vector<double> grads = x.grad().to(kFloat64).contiguous().to_vector<double>();
    for (int64_t k = 0; k < c; ++k) {
      CHECK(out[4 * k] == 5);
      CHECK(out[4 * k + 1] == -inf);
      CHECK(std::isnan(out[4 * k + 2]));
      CHECK((out[4 * k + 3] == 0 && std::signbit(out[4 * k + 3])));
      CHECK(std::vector<double>(grads.begin() + 16 * k, grads.begin() + 16 * (k + 1)) == taken);
    }
  }
}

namespace {

// Each 2 x 2 window by PyTorch's rule, in double: its taps row-major, a tap taken when it is
// greater than the best so far or NaN. Returns the maxima and the gradient of sum(out * g).
std::pair<std::vector<double>, std::vector<double>> pool_2x2_reference(const std::vector<double>& x, const Shape& s,
                                                                       const std::vector<double>& g) {
  const int64_t planes = s[0] * s[1], h = s[2], w = s[3], oh = h / 2, ow = w / 2;
  std::vector<double> out, grad(x.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = -1;
        for (const int64_t at :
             {2 * i * w + 2 * j, 2 * i * w + 2 * j + 1, (2 * i + 1) * w + 2 * j, (2 * i + 1) * w + 2 * j + 1}) {
          const double v = x[static_cast<size_t>(p * h * w + at)];
          if (best < 0 || v > x[static_cast<size_t>(p * h * w + best)] || std::isnan(v)) best = at;
        }
        grad[static_cast<size_t>(p * h * w + best)] += g[out.size()];
        out.push_back(x[static_cast<size_t>(p * h * w + best)]);
      }
    }
  }
  return {out, grad};
}

}  // namespace

TEST_CASE("2 x 2 max pooling over many planes: each window by PyTorch's rule, forward and backward", "[conv]") {
  // Small integers (ties everywhere), a NaN every 37 elements; planes in ranges, one by one (a
  // slice of the channels) and gathered (channels-last); output widths 2, 4, 8, 5, 16; maps with
  // a last row and column left out (7 x 9); float64, float32, bfloat16 (every value exact).
  enum Layout { kDense, kSliced, kChannelsLast };
  const std::vector<std::pair<Shape, Layout>> cases = {
      {{3, 5, 8, 8}, kDense},  {{2, 3, 6, 10}, kDense},        {{2, 4, 7, 9}, kDense},
      {{2, 3, 4, 32}, kDense}, {{4, 2, 4, 4}, kDense},         {{3, 6, 16, 16}, kDense},
      {{2, 6, 8, 8}, kSliced}, {{3, 32, 4, 4}, kChannelsLast}, {{2, 5, 7, 9}, kChannelsLast}};
  for (const auto& [shape, layout] : cases) {
    const bool sliced = layout == kSliced;
    const int64_t numel = shape[0] * shape[1] * shape[2] * shape[3];
    std::vector<double> values(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) {
      values[static_cast<size_t>(i)] = i % 37 == 5 ? std::numeric_limits<double>::quiet_NaN() : (i * 7919 % 11) - 5.0;
    }
    for (const DType dtype : {kFloat64, kFloat32, kBFloat16}) {
      INFO(format_shape(shape) << (sliced ? ", channels 1 to C - 2" : "")
                               << (layout == kChannelsLast ? ", channels-last" : "") << ", " << dtype_name(dtype));
      Tensor whole = from_vector<double>(values, shape).to(dtype);
      if (layout == kChannelsLast) whole = whole.contiguous(MemoryFormat::kChannelsLast);
      whole.requires_grad_();
      const Tensor x = sliced ? whole.narrow(1, 1, shape[1] - 2) : whole;
      const Tensor out = max_pool2d(x, 2);
      CHECK(out.is_contiguous(layout == kChannelsLast ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous));
      std::vector<double> g(static_cast<size_t>(out.numel()));
      for (size_t k = 0; k < g.size(); ++k) g[k] = static_cast<double>(k % 5) + 1.0;
      sum(mul(out, from_vector<double>(g, out.sizes()).to(dtype))).backward();
      const auto [want, want_grad] = pool_2x2_reference(x.to(kFloat64).contiguous().to_vector<double>(), x.sizes(), g);
      const std::vector<double> got = out.to(kFloat64).contiguous().to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        INFO("output " << k);
        CHECK((got[k] == want[k] || (std::isnan(got[k]) && std::isnan(want[k]))));
      }
      const Tensor grad = sliced ? whole.grad().narrow(1, 1, shape[1] - 2) : whole.grad();
      CHECK(grad.to(kFloat64).contiguous().to_vector<double>() == want_grad);
      if (sliced) CHECK(sum(abs(whole.grad().narrow(1, 0, 1).to(kFloat64))).item<double>() == 0.0);
    }
  }
}
