// torch.nn.init's initialisers (init.h): the gains and fans, and each one as the uniform_ /
// normal_ call torch.nn.init makes.
#include "tinyddp/nn/init.h"

#include <cmath>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::nn::init {

namespace {

void check_defined(const Tensor& t, const char* op) { TDDP_CHECK(t.defined(), "{}: the tensor is undefined", op); }

int64_t fan(const Tensor& t, const std::string& mode, const char* op) {
  TDDP_CHECK(mode == "fan_in" || mode == "fan_out", "{}: mode {} not supported, please use one of fan_in, fan_out", op,
             mode);
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == "fan_in" ? fan_in : fan_out;
}

// The inverse error function in double: Winitzki's approximation (relative error ~2e-3) as
// the start, then Newton's method on the C library's erf to double's precision.
double erfinv(double y) {
  if (y <= -1) return -INFINITY;
  if (y >= 1) return INFINITY;
  const double a = 0.147, ln = std::log((1.0 - y) * (1.0 + y)), t = 2.0 / (M_PI * a) + ln / 2.0;
  double x = std::copysign(std::sqrt(std::sqrt(t * t - ln / a) - t), y);
  for (int i = 0; i < 20; ++i) {
    const double step = (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= 1e-16 * std::max(1.0, std::fabs(x))) break;
  }
  return x;
}

}  // namespace

double calculate_gain(const std::string& nonlinearity, double param) {
  for (const char* linear : {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                             "conv_transpose3d", "sigmoid"}) {
    if (nonlinearity == linear) return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw Error(fmt::format("calculate_gain: unsupported nonlinearity {}", nonlinearity));
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  check_defined(t, "calculate_fan_in_and_fan_out");
  TDDP_CHECK(t.dim() >= 2, "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions (shape {})",
             tensor::format_shape(t.sizes()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

const Tensor& uniform_(const Tensor& t, double a, double b, Generator* generator) {
  check_defined(t, "uniform_");
  tensor::NoGradGuard no_grad;
  return tensor::uniform_(t, a, b, generator);
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* generator) {
  check_defined(t, "normal_");
  tensor::NoGradGuard no_grad;
  return tensor::normal_(t, mean, std, generator);
}

const Tensor& constant_(const Tensor& t, double value) {
  check_defined(t, "constant_");
  tensor::NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

const Tensor& ones_(const Tensor& t) { return constant_(t, 1.0); }
const Tensor& zeros_(const Tensor& t) { return constant_(t, 0.0); }

const Tensor& xavier_uniform_(const Tensor& t, double gain, Generator* generator) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;
  return init::uniform_(t, -a, a, generator);
}

const Tensor& xavier_normal_(const Tensor& t, double gain, Generator* generator) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), generator);
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                               Generator* generator) {
  check_defined(t, "kaiming_uniform_");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_uniform_")));
  const double bound = std::sqrt(3.0) * std;
  return init::uniform_(t, -bound, bound, generator);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity,
                              Generator* generator) {
  check_defined(t, "kaiming_normal_");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_normal_")));
  return init::normal_(t, 0.0, std, generator);
}

const Tensor& trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator* generator) {
  check_defined(t, "trunc_normal_");
  TDDP_CHECK(a < b && std > 0, "trunc_normal_: expected a < b and std > 0, got a={}, b={}, std={}", a, b, std);
  const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  tensor::NoGradGuard no_grad;
  tensor::uniform_(t, 2 * l - 1, 2 * u - 1, generator);
  // erfinv, * std sqrt(2), + mean, clamped to [a, b], each rounded to the tensor's dtype in
  // turn as torch's in-place ops round.
  const bool is_double = t.dtype() == tensor::kFloat64;
  std::vector<double> values = t.to(tensor::kFloat64).reshape({-1}).to_vector<double>();
  for (double& v : values) {
    const auto round = [&](double x) { return is_double ? x : static_cast<double>(static_cast<float>(x)); };
    double x = round(erfinv(v));
    x = round(x * round(std * std::sqrt(2.0)));
    x = round(x + mean);
    v = std::min(std::max(x, a), b);
  }
  t.copy_(tensor::from_vector(values, t.sizes()).to(t.dtype()));
  return t;
}

}  // namespace tinyddp::nn::init
