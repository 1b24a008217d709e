// The user's own nn/nn.h: the data of the regression (a line with noise). Its name is the
// same as tinyddp's nn/nn.h on purpose; tinyddp's is "tinyddp/nn/nn.h".
#pragma once

#include <vector>

#include "tinyddp/tensor/all.h"

namespace downstream {

// n samples of y = 3 x0 - 2 x1 + 0.5 + noise: {x [n, 2], y [n, 1]}.
inline std::vector<tinyddp::tensor::Tensor> line_samples(int64_t n) {
  namespace t = tinyddp::tensor;
  const t::Tensor x = t::randn({n, 2});
  const t::Tensor w = t::tensor({3.0, -2.0}).reshape({2, 1});
  const t::Tensor y = t::matmul(x, w) + 0.5 + t::randn({n, 1}) * 0.01;
  return {x, y};
}

}  // namespace downstream
