// Ops with several outputs (split, chunk, unbind): one node for all the pieces, named as
// PyTorch's; its backward joins the pieces' gradients once (one cat or stack, zeros only for a
// piece that got none, nothing added up), hooks and retain_grad() on one piece see that
// piece's gradient alone, first and second derivatives against finite differences, and the
// freed-graph error.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;
using Inputs = std::vector<Tensor>;

namespace {

// [6, 4] float64 with x[i][j] = i * 4 + j, requiring grad.
Tensor rows() {
  Tensor x = arange(24, TensorOptions(kFloat64)).view({6, 4});
  x.requires_grad_();
  return x;
}

// x's gradient by row (every row's entries equal here).
std::vector<double> row_grads(const Tensor& x) {
  std::vector<double> out;
  for (int64_t i = 0; i < x.size(0); ++i) out.push_back(x.grad()[i][0].item<double>());
  return out;
}

// The events the profiler recorded while `run` ran, as "op/kernel".
std::vector<std::string> kernels_of(const std::function<void()>& run) {
  profiler::Profile prof;
  run();
  prof.stop();
  std::vector<std::string> out;
  for (const profiler::Event& e : prof.events()) out.push_back(e.name + "/" + e.kernel);
  return out;
}

size_t count_matching(const std::vector<std::string>& names, const std::string& part) {
  size_t n = 0;
  for (const std::string& s : names) n += s.find(part) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("split, chunk and unbind: one node for all the pieces, named as PyTorch's", "[engine][multi_output]") {
  const Tensor x = rows();
  const std::vector<Tensor> pieces = split(x, 2);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].grad_fn()->name() == "SplitBackward");
  // Each piece's own node leads to the same shared node, at the piece's position.
  const auto shared = pieces[0].grad_fn()->next_edges().at(0);
  for (uint32_t k = 0; k < 3; ++k) {
    const auto edge = pieces[k].grad_fn()->next_edges().at(0);
    CHECK(edge.function == shared.function);
    CHECK(edge.input_nr == k);
  }
  CHECK(shared.function->name() == "SplitBackward");
  CHECK(shared.function->num_inputs() == 3);
  CHECK(shared.function->next_edges().at(0).function == x.grad_accumulator());
  CHECK(split(x, std::vector<int64_t>{1, 5})[1].grad_fn()->name() == "SplitWithSizesBackward");
  CHECK(chunk(x, 3, 1)[1].grad_fn()->name() == "SplitBackward");
  CHECK(unbind(x, 1)[3].grad_fn()->name() == "UnbindBackward");
  // Still views of x, and nothing recorded without grad mode.
  CHECK(pieces[1].data_ptr<double>() == x.data_ptr<double>() + 8);
  NoGradGuard no_grad;
  CHECK(split(x, 2)[0].grad_fn() == nullptr);
  CHECK(unbind(x)[0].grad_fn() == nullptr);
}

TEST_CASE("a piece without a gradient gets zeros, a piece used twice the sum", "[engine][multi_output]") {
  const Tensor x = rows();
  const std::vector<Tensor> p = split(x, 2);
  // d/dx of sum(p0) + 2 sum(p0) + 3 sum(p2): rows 0-1 get 3, rows 2-3 nothing, rows 4-5 get 3.
  add(add(sum(p[0]), mul(sum(p[0]), 2.0)), mul(sum(p[2]), 3.0)).backward();
  CHECK(row_grads(x) == std::vector<double>{3, 3, 0, 0, 3, 3});

  const Tensor y = rows();
  const std::vector<Tensor> columns = unbind(y, 1);
  sum(mul(columns[1], columns[3])).backward();  // d/dy[:, 1] = y[:, 3], d/dy[:, 3] = y[:, 1]
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(y.grad()[i][0].item<double>() == 0.0);
    CHECK(y.grad()[i][1].item<double>() == 4.0 * i + 3);
    CHECK(y.grad()[i][2].item<double>() == 0.0);
    CHECK(y.grad()[i][3].item<double>() == 4.0 * i + 1);
  }
}

TEST_CASE("the pieces' gradients are joined by one cat: no zeros of the whole, nothing added up",
          "[engine][multi_output]") {
  const Tensor x = rows();
  const std::vector<Tensor> p = split(x, 2);
  const Tensor product = mul(mul(p[0], p[1]), p[2]);
  const Tensor seed = ones({2, 4}, TensorOptions(kFloat64));  // made before the profile starts
  const std::vector<std::string> all = kernels_of([&] { product.backward(seed); });
  INFO(fmt::format("{}", fmt::join(all, ", ")));
  CHECK(count_matching(all, "/fill") == 0);
  CHECK(count_matching(all, "add") == 0);
  CHECK(count_matching(all, "copy_/copy") == 3);  // each piece's gradient into its slice, once

  // One piece without a gradient: zeros of its own [2, 4] only.
  const Tensor z = rows();
  const std::vector<Tensor> q = split(z, 2);
  const Tensor partial = mul(q[0], q[2]);
  profiler::Profile prof;
  partial.backward(seed);
  prof.stop();
  std::vector<int64_t> filled;
  for (const profiler::Event& e : prof.events()) {
    if (e.kernel == "fill") filled.push_back(e.bytes);
  }
  CHECK(filled == std::vector<int64_t>{2 * 4 * 8});
}

TEST_CASE("a hook or retain_grad() on one piece sees that piece's gradient alone", "[engine][multi_output]") {
  const Tensor x = rows();
  const std::vector<Tensor> p = chunk(x, 3);
  std::vector<Shape> seen;
  p[1].register_hook([&](const Tensor& g) {
    seen.push_back(g.sizes());
    return mul(g, 10.0);  // replaces that piece's gradient only
  });
  p[2].retain_grad();
  add(sum(p[0]), add(mul(sum(p[1]), 2.0), mul(sum(p[2]), 3.0))).backward();
  CHECK(seen == std::vector<Shape>{Shape{2, 4}});
  CHECK(row_grads(x) == std::vector<double>{1, 1, 20, 20, 3, 3});
  REQUIRE(p[2].grad().defined());
  CHECK(p[2].grad().sizes() == Shape{2, 4});
  CHECK(sum(p[2].grad()).item<double>() == 3.0 * 8);
  CHECK_FALSE(p[0].grad().defined());
}

TEST_CASE("split, chunk and unbind: first and second derivatives against finite differences",
          "[engine][multi_output][gradcheck]") {
  const auto pieces = [](const Inputs& v) {
    const std::vector<Tensor> p = split(v[0], std::vector<int64_t>{1, 2, 2}, 1);
    const std::vector<Tensor> c = chunk(v[0], 2, 0);
    const std::vector<Tensor> u = unbind(v[0], 0);
    // p[1] and u[1] unused in parts; products make the second derivative non-zero.
    return add(add(mul(p[0], p[2].narrow(1, 0, 1)), mul(c[1].narrow(0, 0, 1), c[0].narrow(0, 0, 1))),
               mul(u[2], u[0]).narrow(0, 0, 1).view({1, 1}));
  };
  manual_seed(5);
  const Tensor x = randn({4, 5}, TensorOptions(kFloat64)).requires_grad_();
  CHECK(gradcheck(pieces, {x}) == "");
  CHECK(gradgradcheck(pieces, {x}) == "");
}

TEST_CASE("the shared node frees its formula after a backward without retain_graph", "[engine][multi_output]") {
  const Tensor x = rows();
  const std::vector<Tensor> p = split(x, 3);
  const Tensor loss = sum(mul(p[0], p[1]));
  loss.backward(Tensor(), true);
  loss.backward();
  // Twice d/dx of sum(p0 * p1): x's first half gets the second half's values and back.
  CHECK(x.grad()[0][0].item<double>() == 2 * 12.0);
  CHECK(x.grad()[4][1].item<double>() == 2 * 5.0);
  CHECK_THROWS_WITH(sum(p[0]).backward(),
                    Contains("SplitBackward: trying to backward through the graph a second time, but its saved tensors "
                             "were freed"));
}
