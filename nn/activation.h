// The activation modules beyond layers.h's ReLU, Tanh, Sigmoid, CELU, LeakyReLU and GELU, as
// torch.nn's, each the functional.h function of the same name with the module's arguments
// (and PyTorch's reprs): SiLU, ELU, SELU, Softplus, Mish, Hardtanh, ReLU6, Hardsigmoid,
// Hardswish, GLU, PReLU (a learned slope), Softmax and LogSoftmax over a dim.
#pragma once

#include <memory>
#include <string>

#include "tinyddp/nn/functional.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

class SiLU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<SiLU>(); }
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& input) override { return functional::silu(input); }
};

class ELU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<ELU>(alpha); }
  explicit ELU(double alpha = 1.0) : Module("ELU"), alpha(alpha) {}
  Tensor forward(const Tensor& input) override { return functional::elu(input, alpha); }
  std::string extra_repr() const override;
  double alpha;
};

class SELU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<SELU>(); }
  SELU() : Module("SELU") {}
  Tensor forward(const Tensor& input) override { return functional::selu(input); }
};

class Softplus : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Softplus>(beta, threshold); }
  explicit Softplus(double beta = 1.0, double threshold = 20.0)
      : Module("Softplus"), beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& input) override { return functional::softplus(input, beta, threshold); }
  std::string extra_repr() const override;
  double beta, threshold;
};

class Mish : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Mish>(); }
  Mish() : Module("Mish") {}
  Tensor forward(const Tensor& input) override { return functional::mish(input); }
};

class Hardtanh : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Hardtanh>(min_val, max_val); }
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& input) override { return functional::hardtanh(input, min_val, max_val); }
  std::string extra_repr() const override;
  double min_val, max_val;
};

class ReLU6 : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<ReLU6>(); }
  ReLU6() : Module("ReLU6") {}
  Tensor forward(const Tensor& input) override { return functional::relu6(input); }
};

class Hardsigmoid : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Hardsigmoid>(); }
  Hardsigmoid() : Module("Hardsigmoid") {}
  Tensor forward(const Tensor& input) override { return functional::hardsigmoid(input); }
};

class Hardswish : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Hardswish>(); }
  Hardswish() : Module("Hardswish") {}
  Tensor forward(const Tensor& input) override { return functional::hardswish(input); }
};

class GLU : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<GLU>(dim); }
  explicit GLU(int64_t dim = -1) : Module("GLU"), dim(dim) {}
  Tensor forward(const Tensor& input) override { return functional::glu(input, dim); }
  std::string extra_repr() const override;
  int64_t dim;
};

// torch.nn.Softmax(dim) / LogSoftmax(dim).
class Softmax : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Softmax>(dim); }
  explicit Softmax(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& input) override { return tensor::softmax(input, dim); }
  std::string extra_repr() const override;
  int64_t dim;
};

class LogSoftmax : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<LogSoftmax>(dim); }
  explicit LogSoftmax(int64_t dim) : Module("LogSoftmax"), dim(dim) {}
  Tensor forward(const Tensor& input) override { return tensor::log_softmax(input, dim); }
  std::string extra_repr() const override;
  int64_t dim;
};

// torch.nn.PReLU: a learned slope for the negative part, `num_parameters` of them (1, or the
// input's channel count), all starting at `init`.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  std::shared_ptr<Module> clone_structure() const override;
  Tensor forward(const Tensor& input) override { return functional::prelu(input, weight); }
  std::string extra_repr() const override;
  int64_t num_parameters;
  double init;
  Tensor weight;  // [num_parameters]
};

}  // namespace tinyddp::nn
