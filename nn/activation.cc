#include "tinyddp/nn/activation.h"

#include <fmt/format.h>

#include "tinyddp/tensor/all.h"

namespace tinyddp::nn {

std::string ELU::extra_repr() const { return "alpha=" + repr_float(alpha); }
std::string Softplus::extra_repr() const { return "beta=" + repr_float(beta) + ", threshold=" + repr_float(threshold); }

Hardtanh::Hardtanh(double min_val_, double max_val_) : Module("Hardtanh"), min_val(min_val_), max_val(max_val_) {
  TDDP_CHECK(min_val <= max_val, "Hardtanh: min_val ({}) cannot be greater than max_val ({})", min_val, max_val);
}
std::string Hardtanh::extra_repr() const {
  return "min_val=" + repr_float(min_val) + ", max_val=" + repr_float(max_val);
}

std::string GLU::extra_repr() const { return fmt::format("dim={}", dim); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim); }

PReLU::PReLU(int64_t num_parameters_, double init_) : Module("PReLU"), num_parameters(num_parameters_), init(init_) {
  TDDP_CHECK(num_parameters >= 1, "PReLU: num_parameters must be at least 1, got {}", num_parameters);
  weight = register_parameter("weight", tensor::full({num_parameters}, init));
}
std::shared_ptr<Module> PReLU::clone_structure() const { return std::make_shared<PReLU>(num_parameters, init); }
std::string PReLU::extra_repr() const { return fmt::format("num_parameters={}", num_parameters); }

}  // namespace tinyddp::nn
