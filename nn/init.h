// Initialisers, as torch.nn.init: each fills a tensor in place, without recording a graph
// (a parameter may be passed as it is), and returns it. The random ones draw from `generator`
// (default: the global one) exactly as torch.nn.init does from the same seed: the same
// uniform_ / normal_ calls in the same order, with the same bounds.
//
//   nn::init::kaiming_uniform_(linear->weight, std::sqrt(5.0));   // Linear's own default
//   nn::init::zeros_(linear->bias);
#pragma once

#include <string>

#include "tinyddp/tensor/random.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn::init {

using tensor::Generator;
using tensor::Tensor;

// torch.nn.init.calculate_gain: linear, conv1d/2d/3d, conv_transpose*, sigmoid: 1; tanh: 5/3;
// relu: sqrt(2); leaky_relu: sqrt(2 / (1 + slope^2)) (slope `param`, default 0.01); selu: 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

// (fan_in, fan_out) of a weight of 2 or more dims: size(1) and size(0) times the receptive
// field (the product of the dims after the first two), as torch's _calculate_fan_in_and_fan_out.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

const Tensor& uniform_(const Tensor& t, double a = 0.0, double b = 1.0, Generator* generator = nullptr);
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
const Tensor& constant_(const Tensor& t, double value);
const Tensor& ones_(const Tensor& t);
const Tensor& zeros_(const Tensor& t);
// U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)); N(0, gain sqrt(2 / (fan_in + fan_out))).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* generator = nullptr);
const Tensor& xavier_normal_(const Tensor& t, double gain = 1.0, Generator* generator = nullptr);
// U(-b, b), b = gain sqrt(3 / fan); N(0, gain / sqrt(fan)): fan is fan_in or fan_out (`mode`),
// gain calculate_gain(nonlinearity, a).
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                               const std::string& nonlinearity = "leaky_relu", Generator* generator = nullptr);
const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                              const std::string& nonlinearity = "leaky_relu", Generator* generator = nullptr);
// N(mean, std) truncated to [a, b], by torch's inverse-CDF method: uniform between the bounds'
// CDF values (mapped to [-1, 1]), erfinv, scaled, shifted, clamped.
const Tensor& trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                            Generator* generator = nullptr);

}  // namespace tinyddp::nn::init
