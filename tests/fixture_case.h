// Checking an op against a committed PyTorch fixture case (the fixture scripts' run(): lines
// C_<input> for each input, C_out, C_grad_out and C_grad_<input>): the forward on the recorded
// inputs and, after backward of the recorded grad_out, each input's gradient.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/tensor/all.h"

namespace tinyddp::testing {

// A fixture file's entries by name, as tensors.
class Fixture {
 public:
  explicit Fixture(const std::string& path);
  // Entry `name` shaped `shape` (its values are float64; converted to `dtype`). Throws naming
  // the file when there is no such entry or the shape does not fit.
  tensor::Tensor value(const std::string& name, const tensor::Shape& shape,
                       tensor::DType dtype = tensor::kFloat64) const;
  // The names of the entries that start with `prefix`, in name order.
  std::vector<std::string> names(const std::string& prefix) const;

  // Case `name`: f of the inputs (entries name_<input>, each with its shape, as float64 leaves)
  // equals name_out (of out_shape) within `tol` (relative and absolute; NaN where NaN), and
  // the gradients name_grad_<input> after backward of name_grad_out. Uses Catch's CHECKs.
  void check_case(const std::string& name, const std::vector<std::pair<std::string, tensor::Shape>>& inputs,
                  const tensor::Shape& out_shape,
                  const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& f, double tol = 1e-12) const;

 private:
  std::string path_;
  std::map<std::string, std::vector<double>> values_;
};

}  // namespace tinyddp::testing
