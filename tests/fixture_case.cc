#include "tests/fixture_case.h"

#include <stdexcept>

#include "tests/test_util.h"

namespace tinyddp::testing {

Fixture::Fixture(const std::string& path) : path_(path), values_(load_fixture(path)) {}

tensor::Tensor Fixture::value(const std::string& name, const tensor::Shape& shape, tensor::DType dtype) const {
  const auto it = values_.find(name);
  if (it == values_.end()) throw std::runtime_error(path_ + " has no entry " + name);
  return tensor::from_vector<double>(it->second, shape).to(dtype);
}

std::vector<std::string> Fixture::names(const std::string& prefix) const {
  std::vector<std::string> out;
  for (const auto& entry : values_) {
    if (entry.first.rfind(prefix, 0) == 0) out.push_back(entry.first);
  }
  return out;
}

void Fixture::check_case(const std::string& name, const std::vector<std::pair<std::string, tensor::Shape>>& inputs,
                         const tensor::Shape& out_shape,
                         const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& f, double tol) const {
  INFO("fixture case " << name);
  std::vector<tensor::Tensor> leaves;
  for (const auto& [input, shape] : inputs) leaves.push_back(value(name + "_" + input, shape).requires_grad_());
  const tensor::Tensor out = f(leaves);
  REQUIRE(out.sizes() == out_shape);
  CHECK(tensor::allclose(out.to(tensor::kFloat64), value(name + "_out", out_shape), tol, tol, /*equal_nan=*/true));
  out.backward(value(name + "_grad_out", out_shape));
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("the gradient of " << inputs[i].first);
    REQUIRE(leaves[i].grad().defined());
    CHECK(tensor::allclose(leaves[i].grad(), value(name + "_grad_" + inputs[i].first, inputs[i].second), tol, tol,
                           /*equal_nan=*/true));
  }
}

}  // namespace tinyddp::testing
