// The ops a GPT adds, against PyTorch (fixtures/make_gpt_fixtures.py writes gpt_reference.txt):
// GELU exact and tanh-approximated, forward and gradient, in float64 (to ~1e-12) and float32
// (the vectorised float kernels against PyTorch's float32), the 16-bit dtypes against float32,
// and bad arguments.
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {

const std::map<std::string, std::vector<double>>& reference() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/gpt_reference.txt");
  return values;
}

Tensor value(const std::string& name, const Shape& shape, DType dtype) {
  const auto it = reference().find(name);
  if (it == reference().end()) throw std::runtime_error("gpt_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape).to(dtype);
}

}  // namespace

TEST_CASE("gelu and its gradient equal torch.nn.functional.gelu, exact and tanh, float64 and float32", "[gpt]") {
  const Shape shape{5, 21};
  for (const std::string form : {"none", "tanh"}) {
    for (const DType dtype : {kFloat64, kFloat32}) {
      const std::string c = std::string(form == "tanh" ? "gelu_tanh_" : "gelu_") + (dtype == kFloat64 ? "f64" : "f32");
      INFO(c);
      // float32: a few ulp; the absolute part covers the negative tail, where 1 + erf(x / sqrt 2)
      // cancels and both sides keep only x times an ulp of 1.
      const double rtol = dtype == kFloat64 ? 1e-12 : 2e-6, atol = dtype == kFloat64 ? 1e-14 : 1e-6;
      const Tensor x = value(c + "_input", shape, dtype).requires_grad_();
      const Tensor out = gelu(x, form);
      CHECK(allclose(out, value(c + "_out", shape, dtype), rtol, atol));
      out.backward(value(c + "_grad_out", shape, dtype));
      // The tanh form's derivative has 1 - tanh(u)^2, which cancels in the tails: an ulp of
      // tanh there (either side's) moves it by up to ~8 ulp of 1 at |x| ~ 5.
      const double grad_atol = dtype == kFloat32 && form == "tanh" ? 5e-6 : atol;
      CHECK(allclose(x.grad(), value(c + "_grad_input", shape, dtype), rtol, grad_atol));
      // A strided view takes the same values (it is made contiguous for the kernel).
      const Tensor xt = x.detach().t();
      CHECK(equal(gelu(xt, form), out.detach().t()));
    }
  }
}

TEST_CASE("gelu in float16 and bfloat16 is float64's result within the 16-bit type's rounding", "[gpt]") {
  Generator gen(3);
  const Tensor x = mul(randn({64}, {}, &gen), 3.0);
  for (const DType dtype : {kFloat16, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x16 = x.to(dtype);
    const double ulp = dtype == kFloat16 ? 0x1p-10 : 0x1p-7;  // of 1.0
    for (const std::string form : {"none", "tanh"}) {
      const Tensor got = gelu(x16, form);
      CHECK(got.dtype() == dtype);
      CHECK(allclose(got.to(kFloat64), gelu(x16.to(kFloat64), form), ulp, ulp * 1e-3));
    }
  }
}

TEST_CASE("gelu and nn::GELU refuse what torch refuses, and GELU prints as torch.nn.GELU", "[gpt][errors]") {
  CHECK_THROWS_WITH(gelu(ones({2}), "fast"), Contains("gelu: approximate must be 'none' or 'tanh', got 'fast'"));
  CHECK_THROWS_WITH(gelu(ones({2}, kInt64)), Contains("gelu: expected a floating-point input, got dtype int64"));
  CHECK_THROWS_WITH(tinyddp::nn::GELU("erf"), Contains("GELU: approximate must be 'none' or 'tanh', got 'erf'"));
  CHECK(tinyddp::nn::GELU().repr() == "GELU(approximate='none')");
  CHECK(tinyddp::nn::GELU("tanh").repr() == "GELU(approximate='tanh')");
  const Tensor x = randn({3, 4});
  CHECK(equal(tinyddp::nn::GELU("tanh").forward(x), gelu(x, "tanh")));
}
