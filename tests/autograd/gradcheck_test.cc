// gradcheck for every op that has a backward, on contiguous, non-contiguous (transposed,
// narrowed) and broadcast inputs, in float64 against central finite differences.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::GradcheckOptions;
using Inputs = std::vector<Tensor>;

namespace {

Generator& gen() {
  static Generator g(1234);
  return g;
}

// A float64 leaf that requires grad, in a chosen layout.
Tensor leaf(const Shape& shape, const std::string& layout = "contiguous") {
  Tensor t;
  if (layout == "transposed" && shape.size() >= 2) {
    Shape reversed(shape.rbegin(), shape.rend());
    Shape perm;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
    t = randn(reversed, kFloat64, &gen()).permute(perm);
  } else if (layout == "narrowed") {
    Shape wider = shape;
    wider.back() += 3;
    t = randn(wider, kFloat64, &gen()).narrow(-1, 1, shape.back());
  } else {
    t = randn(shape, kFloat64, &gen());
  }
  t.requires_grad_();
  return t;
}

// Values bounded away from zero (for log, sqrt, div, pow with fractional exponents).
Tensor positive_leaf(const Shape& shape, const std::string& layout = "contiguous") {
  Tensor t = leaf(shape, layout).detach();
  t = add(abs(t), 0.5);
  t.requires_grad_();
  return t;
}

const std::vector<std::string> kLayouts = {"contiguous", "transposed", "narrowed"};

}  // namespace

TEST_CASE("gradcheck: binary arithmetic with broadcasting", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor a = leaf({3, 4}, layout);
    const Tensor b = leaf({3, 4}, layout);
    const Tensor row = leaf({4});
    const Tensor col = leaf({3, 1});
    const Tensor pb = positive_leaf({3, 4}, layout);
    CHECK(gradcheck([](const Inputs& x) { return add(x[0], x[1]); }, {a, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return add(x[0], x[1], 2.5); }, {a, row}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sub(x[0], x[1]); }, {col, a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sub(x[0], x[1], -0.5); }, {a, col}) == "");
    CHECK(gradcheck([](const Inputs& x) { return mul(x[0], x[1]); }, {a, row}) == "");
    CHECK(gradcheck([](const Inputs& x) { return mul(x[0], x[1]); }, {col, row}) == "");
    CHECK(gradcheck([](const Inputs& x) { return div(x[0], x[1]); }, {a, pb}) == "");
    CHECK(gradcheck([](const Inputs& x) { return div(x[0], x[1]); }, {row, pb}) == "");
    CHECK(gradcheck([](const Inputs& x) { return maximum(x[0], x[1]); }, {a, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return minimum(x[0], x[1]); }, {a, row}) == "");
  }
}

TEST_CASE("gradcheck: scalar operands and operators", "[gradcheck]") {
  const Tensor a = leaf({2, 3}, "transposed");
  const Tensor p = positive_leaf({2, 3});
  CHECK(gradcheck([](const Inputs& x) { return x[0] + 2.0; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0] - 2.0; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return 3.0 - x[0]; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0] * -1.5; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0] / 4.0; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return 2.0 / x[0]; }, {p}) == "");
  CHECK(gradcheck([](const Inputs& x) { return -x[0]; }, {a}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0] * x[0] + x[0]; }, {a}) == "");
}

TEST_CASE("gradcheck: unary ops", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor a = leaf({3, 4}, layout);
    const Tensor p = positive_leaf({3, 4}, layout);
    CHECK(gradcheck([](const Inputs& x) { return neg(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return abs(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return relu(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return exp(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return log(x[0]); }, {p}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sqrt(x[0]); }, {p}) == "");
    CHECK(gradcheck([](const Inputs& x) { return tanh(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sigmoid(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return gelu(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return gelu(x[0], "tanh"); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(x[0], 2); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(x[0], 3); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(x[0], 0.5); }, {p}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(x[0], -1.7); }, {p}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(x[0], 0); }, {a}) == "");
    // pow(Scalar, Tensor): the exponent's gradient out * log(base); base 0 with positive
    // exponents (gradient 0 there, as PyTorch).
    CHECK(gradcheck([](const Inputs& x) { return pow(0.9, x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(2.5, x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return pow(0.0, x[0]); }, {p}) == "");
  }
}

TEST_CASE("gradcheck: reductions", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor a = leaf({3, 4, 2}, layout);
    CHECK(gradcheck([](const Inputs& x) { return sum(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sum(x[0], {1}); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sum(x[0], {0, 2}, true); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return sum(x[0], {-1, 0}); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return mean(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return mean(x[0], {2}, true); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return mean(x[0], {0, 1}); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return max(x[0]); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return std::get<0>(max(x[0], 1)); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return std::get<0>(max(x[0], 0, true)); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return softmax(x[0], 1); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return softmax(x[0], -1); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return log_softmax(x[0], 0); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return log_softmax(x[0], 2); }, {a}) == "");
  }
  {
    // Rows that are -inf except one entry (a causal mask's first row): the softmax is one-hot
    // there and its gradient zero; the other rows are ordinary.
    const Tensor x = leaf({3, 4});
    const Tensor mask = ne(tensor({{0.0, 1.0, 1.0, 1.0}, {1.0, 0.0, 1.0, 1.0}, {0.0, 0.0, 0.0, 1.0}}), 0.0);
    CHECK(gradcheck([&](const Inputs& v) { return softmax(masked_fill(v[0], mask, -INFINITY), 1); }, {x}) == "");
    CHECK(gradcheck([](const Inputs& v) { return causal_softmax(v[0], 0.5); }, {x}) == "");
    const Tensor y = softmax(masked_fill(x, mask, -INFINITY), 1);
    CHECK(equal(y[0], tensor({1.0, 0.0, 0.0, 0.0}, kFloat64)));
  }
  // 0-d inputs.
  const Tensor s = leaf({});
  CHECK(gradcheck([](const Inputs& x) { return sum(x[0]); }, {s}) == "");
  CHECK(gradcheck([](const Inputs& x) { return std::get<0>(max(x[0], 0)); }, {s}) == "");
}

TEST_CASE("gradcheck: max gives tied maxima equal shares, as PyTorch", "[gradcheck]") {
  const Tensor t = tensor({1.0, 3.0, 3.0, 2.0}, kFloat64);
  t.requires_grad_();
  max(t).backward();
  CHECK(t.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  const Tensor u = tensor({{1.0, 5.0}, {5.0, 2.0}}, kFloat64);
  u.requires_grad_();
  std::get<0>(max(u, 0)).backward(ones({2}, kFloat64));
  CHECK(u.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 0});  // the first index along dim 0
  const Tensor v = tensor({2.0, 2.0}, kFloat64);
  v.requires_grad_();
  maximum(v, tensor({2.0, 1.0}, kFloat64)).backward(ones({2}, kFloat64));
  CHECK(v.grad().to_vector<double>() == std::vector<double>{0.5, 1});
}

TEST_CASE("gradcheck: mm and every form of matmul", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor a = leaf({3, 4}, layout);
    const Tensor b = leaf({4, 2}, layout);
    CHECK(gradcheck([](const Inputs& x) { return mm(x[0], x[1]); }, {a, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {a, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1].t()); }, {a, leaf({2, 4})}) == "");
    const Tensor batch = leaf({2, 3, 4}, layout);
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {batch, b}) == "");            // fold
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {a, leaf({2, 4, 2})}) == "");  // broadcast left
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {batch, leaf({2, 4, 3})}) == "");  // batched
    CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {leaf({2, 1, 3, 4}), leaf({3, 4, 2})}) == "");
  }
  const Tensor v = leaf({4});
  CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {v, leaf({4})}) == "");        // dot
  CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {leaf({3, 4}), v}) == "");     // matrix-vector
  CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {v, leaf({4, 2})}) == "");     // vector-matrix
  CHECK(gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); }, {leaf({2, 3, 4}), v}) == "");  // batch-vector
  // Only one side requires grad.
  const Tensor constant = randn({4, 2}, kFloat64, &gen());
  CHECK(gradcheck([&](const Inputs& x) { return matmul(x[0], constant); }, {leaf({3, 4})}) == "");
}

TEST_CASE("gradcheck: views, copies and conversions", "[gradcheck][views]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor a = leaf({3, 4}, layout);
    CHECK(gradcheck([](const Inputs& x) { return x[0].view({-1}) * 2.0; }, {leaf({3, 4})}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].reshape({2, 6}); }, {a}) == "");  // a copy when not viewable
    CHECK(gradcheck([](const Inputs& x) { return x[0].flatten(); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].narrow(1, 1, 2); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].narrow(0, -2, 2); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].select(1, 2); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0][1]; }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].t(); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].transpose(0, 1) * x[1]; }, {a, leaf({4, 3})}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].unsqueeze(1).expand({3, 5, 4}); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].unsqueeze(0).squeeze(0); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].unsqueeze(-1).squeeze(); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].contiguous(); }, {a}) == "");
    CHECK(gradcheck([](const Inputs& x) { return x[0].clone(); }, {a}) == "");
  }
  const Tensor cube = leaf({2, 3, 4}, "transposed");
  CHECK(gradcheck([](const Inputs& x) { return x[0].permute({2, 0, 1}); }, {cube}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0].permute({1, 2, 0}).reshape({-1}); }, {cube}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0].expand({2, 3, 4}); }, {leaf({3, 1})}) == "");
  // as_strided, including an output whose elements overlap (a sliding window).
  CHECK(gradcheck([](const Inputs& x) { return x[0].as_strided({3, 3}, {1, 1}, 0); }, {leaf({6})}) == "");
  CHECK(gradcheck([](const Inputs& x) { return x[0].as_strided({2, 2}, {4, 1}, 1); }, {leaf({2, 4})}) == "");
  // dtype conversion: float64 -> float32 -> float64 (coarser steps for float32 resolution).
  const auto coarse = GradcheckOptions().eps(1e-2).atol(1e-3).rtol(1e-3);
  CHECK(gradcheck([](const Inputs& x) { return mul(x[0].to(kFloat32), 3.0).to(kFloat64); }, {leaf({5})}, coarse) == "");
}

TEST_CASE("gradcheck: composite expressions", "[gradcheck]") {
  const Tensor x = leaf({4, 3});
  const Tensor w = leaf({5, 3}, "transposed");
  const Tensor bias = leaf({5});
  // A Linear + ReLU + log_softmax + mean, the shape of a training step.
  CHECK(gradcheck([](const Inputs& v) { return mean(log_softmax(relu(matmul(v[0], v[1].t()) + v[2]), 1)); },
                  {x, w, bias}) == "");
  // MSE.
  const Tensor target = randn({4, 5}, kFloat64, &gen());
  CHECK(gradcheck(
            [&](const Inputs& v) {
              const Tensor diff = sub(tanh(matmul(v[0], v[1].t())), target);
              return mean(mul(diff, diff));
            },
            {x, w}) == "");
}

TEST_CASE("gradcheck can fail: a wrong backward formula is caught", "[gradcheck]") {
  const auto wrong_square = [](const Inputs& v) {
    const Tensor& x = v[0];
    Tensor out;
    {
      NoGradGuard no_grad;
      out = mul(x, x);
    }
    // The correct gradient is 2 x grad; this records x grad.
    record_op("WrongSquareBackward", out, {x}, [s = SavedTensor(x)](const Tensor& g) {
      return std::vector<Tensor>{mul(g, s.get("WrongSquareBackward"))};
    });
    return out;
  };
  const std::string message = gradcheck(wrong_square, {leaf({3})});
  CHECK_THAT(message, Catch::Contains("backward gives"));
  CHECK_THAT(message, Catch::Contains("finite differences give"));
  CHECK_THROWS_WITH(gradcheck(wrong_square, {leaf({3}).detach().to(kFloat32).requires_grad_()}),
                    Catch::Contains("gradcheck: input 0 must be a float64 tensor"));
  CHECK_THROWS_WITH(gradcheck(wrong_square, {randn({3}, kFloat64)}),
                    Catch::Contains("gradcheck: no input requires grad"));
}

TEST_CASE("gradcheck: linear with and without bias, for 1-D, 2-D and 3-D inputs", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor w = leaf({3, 4}, layout);
    const Tensor b = leaf({3});
    CHECK(gradcheck([](const Inputs& x) { return linear(x[0], x[1], x[2]); }, {leaf({5, 4}, layout), w, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return linear(x[0], x[1]); }, {leaf({5, 4}), w}) == "");
    CHECK(gradcheck([](const Inputs& x) { return linear(x[0], x[1], x[2]); }, {leaf({2, 3, 4}, layout), w, b}) == "");
    CHECK(gradcheck([](const Inputs& x) { return linear(x[0], x[1], x[2]); }, {leaf({4}), w, b}) == "");
  }
  // Only the weight requires grad (a frozen input and bias).
  const Tensor input = randn({5, 4}, kFloat64, &gen());
  CHECK(gradcheck([&](const Inputs& x) { return linear(input, x[0]); }, {leaf({3, 4})}) == "");
  CHECK_THROWS_WITH(linear(zeros({2, 5}), zeros({3, 4})),
                    Catch::Contains("linear: input of shape [2, 5] does not end in in_features 4"));
  CHECK_THROWS_WITH(linear(zeros({2, 4}), zeros({3, 4}), zeros({4})),
                    Catch::Contains("linear: 'bias' must have shape [3], got [4]"));
}

TEST_CASE("gradcheck: layer_norm over one and two trailing dims, with and without weight and bias", "[gradcheck]") {
  for (const std::string& layout : kLayouts) {
    INFO(layout);
    const Tensor x = leaf({3, 4}, layout), w = leaf({4}), b = leaf({4});
    CHECK(gradcheck([](const Inputs& v) { return layer_norm(v[0], {4}, v[1], v[2]); }, {x, w, b}) == "");
    CHECK(gradcheck([](const Inputs& v) { return layer_norm(v[0], {3, 4}, Tensor(), Tensor(), 1e-3); }, {x}) == "");
  }
  // A constant row (variance 0: eps alone keeps the gradient finite) and a row offset by 100.
  Tensor rows = leaf({2, 5}).detach();
  rows.narrow(0, 0, 1).fill_(0.5);
  rows.narrow(0, 1, 1).add_(100.0);
  rows.requires_grad_();
  CHECK(gradcheck([](const Inputs& v) { return layer_norm(v[0], {5}, Tensor(), Tensor(), 1e-2); }, {rows}) == "");
}

TEST_CASE("gradcheck: embedding with repeated ids", "[gradcheck]") {
  const Tensor ids = from_vector<int64_t>({2, 0, 2, 2, 4, 1}, Shape{2, 3});
  CHECK(gradcheck([&](const Inputs& v) { return embedding(ids, v[0]); }, {leaf({5, 3})}) == "");
}

TEST_CASE("pow(base, exponent), as torch.pow(Scalar, Tensor): PyTorch's values and gradients",
          "[gradcheck][pow][fixture]") {
  const auto fixture = tinyddp::testing::load_fixture("tests/tensor/fixtures/torch_reference.txt");
  const auto check_against = [](const Tensor& got, const std::vector<double>& want, const std::string& what) {
    const std::vector<float> g = got.to_vector<float>();
    REQUIRE(g.size() == want.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO(what << " [" << i << "]: " << g[i] << ", PyTorch " << want[i]);
      CHECK(g[i] == Approx(want[i]).epsilon(1e-6).margin(1e-30));
    }
  };
  const auto exponents = [&](const char* key) {
    const std::vector<double>& v = fixture.at(key);
    return from_vector(std::vector<float>(v.begin(), v.end())).requires_grad_();
  };
  for (const auto& [base, name] :
       std::vector<std::pair<double, std::string>>{{0.9, "09"}, {0.999, "0999"}, {2.5, "25"}}) {
    const Tensor e = exponents("op_pow_exponents");
    const Tensor out = pow(base, e);
    CHECK(out.dtype() == kFloat32);
    check_against(out, fixture.at("op_pow_base" + name), "pow(" + name + ", e)");
    sum(out).backward();
    check_against(e.grad(), fixture.at("op_pow_base" + name + "_grad"), "its gradient");
  }
  // Base 0: 0 ** 0 = 1, 0 ** negative = inf; the gradient is 0 where the exponent is >= 0.
  const Tensor z = exponents("op_pow_zero_exponents");
  const Tensor out = pow(0.0, z);
  check_against(out, fixture.at("op_pow_base0"), "pow(0, z)");
  out.backward(ones({4}));
  check_against(z.grad(), fixture.at("op_pow_base0_grad"), "its gradient");
}
