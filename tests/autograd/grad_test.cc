// autograd::grad, as torch.autograd.grad: the gradients of outputs with respect to inputs
// (leaves or not) against their formulas, returned without writing any .grad and without
// running the nodes that lead to no input (no accumulator, so no DDP hook, fires); grad_outputs
// for non-scalar outputs; an unused input as an error or (allow_unused) undefined;
// retain_graph; create_graph (more in double_backward_test.cc).
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp;
using Catch::Contains;
using tensor::Tensor;

TEST_CASE("grad: the formula's gradients, no .grad written, only the needed nodes run", "[autograd][grad]") {
  tensor::Generator gen(1);
  const Tensor x = tensor::randn({3}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor w = tensor::randn({3}, tensor::kFloat64, &gen).requires_grad_();
  const Tensor other = tensor::randn({3}, tensor::kFloat64, &gen).requires_grad_();
  int fired = 0;
  other.grad_accumulator()->add_post_hook([&] { ++fired; });
  // y = sum(x^3 w) + sum(other): dy/dx = 3 x^2 w, dy/dw = x^3
  const Tensor y = tensor::sum(tensor::mul(tensor::pow(x, 3.0), w)) + tensor::sum(other);
  const std::vector<Tensor> g = autograd::grad({y}, {x, w});
  REQUIRE(g.size() == 2);
  CHECK(tensor::allclose(g[0], tensor::mul(tensor::mul(tensor::pow(x.detach(), 2.0), 3.0), w.detach()), 1e-14, 0));
  CHECK(tensor::allclose(g[1], tensor::pow(x.detach(), 3.0), 1e-14, 0));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(other.grad().defined());
  CHECK(fired == 0);  // other's accumulator leads to no input: it did not run
}

TEST_CASE("grad: non-leaf inputs, grad_outputs, allow_unused, retain_graph, errors", "[autograd][grad]") {
  const Tensor x = tensor::full({2, 2}, 2.0, tensor::kFloat64).requires_grad_();
  const Tensor h = tensor::mul(x, 3.0);  // a non-leaf input
  const Tensor y = tensor::mul(h, h);    // [2, 2], dy/dh = 2 h
  const Tensor upstream = tensor::full({2, 2}, 0.5, tensor::kFloat64);
  const std::vector<Tensor> g = autograd::grad({y}, {h, x}, {upstream}, /*retain_graph=*/true);
  CHECK(tensor::allclose(g[0], tensor::full({2, 2}, 0.5 * 2 * 6.0, tensor::kFloat64)));
  CHECK(tensor::allclose(g[1], tensor::full({2, 2}, 0.5 * 2 * 6.0 * 3, tensor::kFloat64)));
  const Tensor unused = tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(autograd::grad({y}, {unused}, {upstream}, true),
                    Contains("grad: input 0 (shape [2]) was not used in the graph of the outputs"));
  const std::vector<Tensor> none = autograd::grad({y}, {x, unused}, {upstream}, true, false, /*allow_unused=*/true);
  CHECK(none[0].defined());
  CHECK_FALSE(none[1].defined());
  autograd::grad({y}, {x}, {upstream});  // frees the graph
  CHECK_THROWS_WITH(autograd::grad({y}, {x}, {upstream}), Contains("backward through the graph a second time"));
  CHECK_THROWS_WITH(autograd::grad({y}, {tensor::ones({1})}, {upstream}), Contains("does not require grad"));
  // create_graph: the gradient has a graph of its own (retain_graph defaults to true with it)
  const Tensor z = tensor::sum(tensor::pow(x, 3.0));
  const Tensor dz = autograd::grad({z}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];  // 3 x^2
  CHECK(dz.requires_grad());
  CHECK(tensor::allclose(autograd::grad({tensor::sum(dz)}, {x})[0], tensor::mul(x.detach(), 6.0)));      // 6 x
  CHECK(tensor::allclose(autograd::grad({z}, {x})[0], tensor::mul(tensor::pow(x.detach(), 2.0), 3.0)));  // retained
}
