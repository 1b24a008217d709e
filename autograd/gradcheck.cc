// gradcheck (gradcheck.h): the analytical Jacobian (one backward per output element) against
// central finite differences, element by element, in the inputs' dtype.
#include "tinyddp/autograd/gradcheck.h"

#include <cmath>

#include "tinyddp/autograd/engine.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::autograd {

using tensor::Tensor;

namespace {

// Element `flat` (row-major logical order) of t as a 0-d view, for in-place perturbation.
Tensor element_view(const Tensor& t, int64_t flat) {
  int64_t offset = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (flat % t.sizes()[d]) * t.strides()[d];
    flat /= t.sizes()[d];
  }
  return t.as_strided({}, {}, offset);
}

std::vector<double> values_of(const Tensor& t) {
  tensor::NoGradGuard no_grad;
  return t.to(tensor::kFloat64).contiguous().to_vector<double>();
}

}  // namespace

std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& options) {
  std::vector<size_t> checked;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    TDDP_CHECK(x.defined() && x.dtype() == tensor::kFloat64, "gradcheck: input {} must be a float64 tensor", k);
    if (!x.requires_grad()) continue;
    TDDP_CHECK(x.is_leaf(), "gradcheck: input {} requires grad but is not a leaf", k);
    for (int64_t d = 0; d < x.dim(); ++d) {
      TDDP_CHECK(x.sizes()[d] <= 1 || x.strides()[d] != 0, "gradcheck: input {} has overlapping elements (stride 0)",
                 k);
    }
    checked.push_back(k);
  }
  TDDP_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  // Analytic: row j of the Jacobian is the gradient of output element j.
  const Tensor out = f(inputs);
  TDDP_CHECK(out.dtype() == tensor::kFloat64, "gradcheck: f must return a float64 tensor, got {}",
             tensor::dtype_name(out.dtype()));
  const int64_t n_out = out.numel();
  std::vector<std::vector<std::vector<double>>> analytic(inputs.size());  // [input][out][element]
  for (int64_t j = 0; j < n_out; ++j) {
    for (size_t k : checked) inputs[k].mutable_grad() = Tensor();
    if (out.requires_grad()) {
      const Tensor seed = tensor::zeros_like(out);
      element_view(seed, j).fill_(1.0);
      out.backward(seed, /*retain_graph=*/true);
    }
    for (size_t k : checked) {
      const Tensor& g = inputs[k].grad();
      analytic[k].push_back(g.defined() ? values_of(g)
                                        : std::vector<double>(static_cast<size_t>(inputs[k].numel()), 0.0));
    }
  }
  for (size_t k : checked) inputs[k].mutable_grad() = Tensor();

  // Numerical: central differences, one input element at a time.
  tensor::NoGradGuard no_grad;
  for (size_t k : checked) {
    const Tensor& x = inputs[k];
    for (int64_t e = 0; e < x.numel(); ++e) {
      const Tensor element = element_view(x, e);
      const double original = element.item<double>();
      element.fill_(original + options.eps());
      const std::vector<double> plus = values_of(f(inputs));
      element.fill_(original - options.eps());
      const std::vector<double> minus = values_of(f(inputs));
      element.fill_(original);
      for (int64_t j = 0; j < n_out; ++j) {
        const double numerical = (plus[j] - minus[j]) / (2 * options.eps());
        const double computed = analytic[k][j][e];
        if (!(std::fabs(computed - numerical) <= options.atol() + options.rtol() * std::fabs(numerical))) {
          return fmt::format(
              "gradcheck: d(output[{}]) / d(input {}[{}]): backward gives {:.10g}, finite differences give {:.10g}", j,
              k, e, computed, numerical);
        }
      }
    }
  }
  return "";
}

std::string gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                          const Tensor& grad_outputs, const GradcheckOptions& options) {
  std::vector<size_t> differentiable;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].defined() && inputs[k].requires_grad()) differentiable.push_back(k);
  }
  TDDP_CHECK(!differentiable.empty(), "gradgradcheck: no input requires grad");
  Tensor v = grad_outputs;
  if (!v.defined()) {
    const Tensor out = f(inputs);
    tensor::Generator generator(20261128);
    v = tensor::randn(out.sizes(), tensor::TensorOptions(tensor::kFloat64).device(out.device()), &generator);
  }
  TDDP_CHECK(v.dtype() == tensor::kFloat64, "gradgradcheck: grad_outputs must be float64, got {}",
             tensor::dtype_name(v.dtype()));
  v = v.detach().clone().requires_grad_(true);
  std::vector<Tensor> all = inputs;
  all.push_back(v);
  // (inputs, v) -> the first derivatives, flattened; built with grad mode on even when
  // gradcheck evaluates it for finite differences.
  const auto first_derivatives = [&](const std::vector<Tensor>& args) {
    tensor::EnableGradGuard enable_grad;
    const std::vector<Tensor> xs(args.begin(), args.end() - 1);
    std::vector<Tensor> wrt;
    for (size_t k : differentiable) wrt.push_back(xs[k]);
    const std::vector<Tensor> grads = grad({f(xs)}, wrt, {args.back()}, /*retain_graph=*/true,
                                           /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t i = 0; i < grads.size(); ++i) {
      flat.push_back((grads[i].defined() ? grads[i] : tensor::zeros_like(wrt[i])).reshape({-1}));
    }
    return tensor::cat(flat, 0);
  };
  return gradcheck(first_derivatives, all, options);
}

}  // namespace tinyddp::autograd
