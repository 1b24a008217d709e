// The code shown in README.md under "A taste of the API". //examples:readme_snippet_test
// runs it and //tests:readme_test checks that the README shows exactly these lines.
#include <iostream>

#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

int main() {
  // README snippet begin
  t::manual_seed(0);
  t::Tensor x = t::randn({4, 3});  // float32 on the CPU, same numbers as torch.randn
  t::Tensor w = t::rand({5, 3});
  t::Tensor y = t::matmul(x, w.t()) + 1;  // w.t() is a view: no copy
  t::Tensor p = t::softmax(y, 1);
  auto [best, index] = t::max(p, 1);        // values and indices, as torch.max(p, 1)
  x.narrow(0, 0, 2).zero_();                // views write through to x
  std::cout << p << "\n" << index << "\n";  // prints like PyTorch
  // README snippet end
  return 0;
}
