// The math ops of tensor/native/unary.cc (sin, cos, erf, log1p, expm1, rsqrt, reciprocal, square, the
// roundings and sign, the float tests, nan_to_num), pow of two tensors and the logical ops,
// against PyTorch (fixtures/make_math_fixtures.py writes math_reference.txt): forward and
// gradients in float64, where both sides call the same correctly rounded or nearly correctly
// rounded libm functions once per element, then a few products (1e-12 leaves room for a few
// ulps, none for a wrong formula); a float64 gradcheck of each differentiable one; float32
// against float64 within float32's rounding; integers; methods; and the errors PyTorch gives.
#include <cmath>
#include <functional>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;
using Inputs = std::vector<Tensor>;
using UnaryFn = std::function<Tensor(const Tensor&)>;

namespace {

const tinyddp::testing::Fixture& fixture() {
  static const tinyddp::testing::Fixture f("tests/tensor/fixtures/math_reference.txt");
  return f;
}

Tensor value(const std::string& name, const Shape& shape, DType dtype = kFloat64) {
  return fixture().value(name, shape, dtype);
}

// Equal where both are numbers (within 1e-12 relative and absolute), and NaN where the
// reference is NaN.
void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  CHECK(allclose(got.to(kFloat64), want, 1e-12, 1e-12, /*equal_nan=*/true));
}

// Forward and the input's gradient of a one-input case against PyTorch's (fixture_case.h).
void check_case(const std::string& name, const UnaryFn& f, const Shape& shape) {
  fixture().check_case(name, {{"x", shape}}, shape, [&f](const Inputs& v) { return f(v[0]); });
}

Tensor random(const Shape& shape, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator g(seed);
  return add(mul(randn(shape, TensorOptions(kFloat64), &g), scale), shift).detach().requires_grad_();
}

}  // namespace

TEST_CASE("sin, cos, erf, log1p, rsqrt, reciprocal and square match PyTorch, gradients too", "[tensor][math]") {
  const std::vector<std::pair<std::string, UnaryFn>> cases = {
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
  };
  for (const auto& [name, f] : cases) check_case(name, f, {3, 4});
  // erf's tails and log1p near 0, where erf(x) ~ 2x / sqrt(pi) and log1p(x) ~ x keep every digit.
  check_close(erf(value("erf_tail_x", {5})), value("erf_tail", {5}));
  check_close(log1p(value("log1p_tiny_x", {3})), value("log1p_tiny", {3}));
  check_close(expm1(value("log1p_tiny_x", {3})), value("expm1_tiny", {3}));
}

TEST_CASE("the smooth math ops pass gradcheck and gradgradcheck in float64", "[tensor][math]") {
  const std::vector<std::pair<std::string, UnaryFn>> cases = {
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"log1p", [](const Tensor& x) { return log1p(abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(add(abs(x), 0.5)); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(add(abs(x), 0.5)); }},
  };
  uint64_t seed = 100;
  for (const auto& [name, f] : cases) {
    INFO(name);
    const auto fn = [f = f](const Inputs& v) { return f(v[0]); };
    CHECK(gradcheck(fn, {random({2, 3}, ++seed)}) == "");
    CHECK(gradgradcheck(fn, {random({2, 3}, ++seed)}) == "");
  }
}

TEST_CASE("float32 math ops agree with float64 within float32's rounding, contiguous and strided", "[tensor][math]") {
  // 1000 elements (the vectorised rows and their tails) and a transposed view (the strided loop).
  const Tensor x64 = random({40, 25}, 7, 3.0).detach();
  const std::vector<std::pair<std::string, UnaryFn>> cases = {
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"log1p", [](const Tensor& x) { return log1p(abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(abs(x)); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
  };
  for (const auto& [name, f] : cases) {
    INFO(name);
    const Tensor want = f(x64.to(kFloat32).to(kFloat64));  // the same float32 inputs
    // a few ulps of float32 (the abs of the input is exact)
    CHECK(allclose(f(x64.to(kFloat32)).to(kFloat64), want, 4 * 1.2e-7, 1e-30));
    CHECK(allclose(f(x64.to(kFloat32).t()).to(kFloat64), want.t(), 4 * 1.2e-7, 1e-30));
  }
  // int64 inputs compute in float32, as PyTorch's
  const Tensor ints = from_vector<int64_t>({1, 2, 4}, Shape{3});
  CHECK(sin(ints).dtype() == kFloat32);
  CHECK(reciprocal(ints).dtype() == kFloat32);
  CHECK(equal(reciprocal(ints), from_vector<float>({1.0f, 0.5f, 0.25f}, Shape{3})));
  CHECK(square(ints).dtype() == kInt64);
  CHECK(equal(square(ints), from_vector<int64_t>({1, 4, 16}, Shape{3})));
}

TEST_CASE("floor, ceil, trunc, round (half to even) and sign match PyTorch, with zero gradients", "[tensor][math]") {
  for (const char* name : {"floor", "ceil", "trunc", "round", "sign"}) {
    const std::map<std::string, UnaryFn> fns = {
        {"floor", [](const Tensor& x) { return floor(x); }}, {"ceil", [](const Tensor& x) { return ceil(x); }},
        {"trunc", [](const Tensor& x) { return trunc(x); }}, {"round", [](const Tensor& x) { return round(x); }},
        {"sign", [](const Tensor& x) { return sign(x); }},
    };
    check_case(name, fns.at(name), {12});
    // float32 the same (every value here but 1e300 is a float32 after rounding to an integer)
    const Tensor x32 = value(std::string(name) + "_x", {12}, kFloat32);
    const Tensor want = fns.at(name)(x32.to(kFloat64)).to(kFloat32);
    CHECK(allclose(fns.at(name)(x32), want, 0.0, 0.0, true));
  }
  const Tensor d = value("round_decimals_x", {5});
  check_close(round(d, 2), value("round_decimals2", {5}));
  check_close(round(d, -2), value("round_decimals_minus2", {5}));
  // -0.0 keeps its sign through round and trunc
  CHECK(std::signbit(round(value("round_x", {12}))[3].item<double>()));
  // integers: the roundings are copies, sign is -1, 0, 1, all in int64
  const Tensor ints = from_vector<int64_t>({-7, 0, 5}, Shape{3});
  CHECK(equal(floor(ints), ints));
  CHECK(equal(round(ints), ints));
  CHECK(equal(sign(ints), from_vector<int64_t>({-1, 0, 1}, Shape{3})));
  CHECK_THROWS_WITH(round(ints, 1), Contains("round: decimals (1) need a floating-point input, got dtype int64"));
  CHECK_THROWS_WITH(floor(ones({2}, TensorOptions(kBool))), Contains("floor"));
}

TEST_CASE("isnan, isinf, isfinite and nan_to_num match PyTorch", "[tensor][math]") {
  const Tensor n = value("nan_to_num_x", {5});
  for (const char* name : {"isnan", "isinf", "isfinite"}) {
    INFO(name);
    const Tensor got = std::string(name) == "isnan" ? isnan(n) : std::string(name) == "isinf" ? isinf(n) : isfinite(n);
    CHECK(got.dtype() == kBool);
    CHECK(equal(got, value(name, {5}, kBool)));
  }
  check_case("nan_to_num", [](const Tensor& x) { return nan_to_num(x); }, {5});
  check_case("nan_to_num_given", [](const Tensor& x) { return nan_to_num(x, 7.0, 8.0, -9.0); }, {5});
  CHECK(equal(nan_to_num(n.to(kFloat32)), value("nan_to_num_f32", {5}, kFloat32)));
  CHECK(nan_to_num(n.to(kFloat16))[2].item<double>() == 65504.0);  // float16's largest
  const Tensor ints = from_vector<int64_t>({3, -1}, Shape{2});
  CHECK(equal(nan_to_num(ints), ints));
  CHECK(equal(isfinite(ints), ones({2}, TensorOptions(kBool))));
  CHECK(equal(isnan(ints), zeros({2}, TensorOptions(kBool))));
}

TEST_CASE("pow of two tensors matches PyTorch: broadcasting, zero bases and exponents, integers", "[tensor][math]") {
  for (const std::string name : {"pow_tt", "pow_negative"}) {
    INFO(name);
    const Shape es = {4};
    const Tensor x = value(name + "_x", {3, 1}).requires_grad_(), e = value(name + "_e", es).requires_grad_();
    const Tensor out = pow(x, e);
    check_close(out, value(name + "_out", {3, 4}));
    out.backward(value(name + "_grad_out", {3, 4}));
    check_close(x.grad(), value(name + "_grad_x", {3, 1}));
    check_close(e.grad(), value(name + "_grad_e", es));
  }
  CHECK(gradcheck([](const Inputs& v) { return pow(add(abs(v[0]), 0.5), v[1]); },
                  {random({3, 1}, 31), random({4}, 32)}) == "");
  CHECK(gradgradcheck([](const Inputs& v) { return pow(add(abs(v[0]), 0.5), v[1]); },
                      {random({2, 1}, 33), random({3}, 34)}) == "");
  const Tensor ints = from_vector<int64_t>({2, -3, 0, 7, 1, -1}, Shape{2, 3});
  const Tensor exps = from_vector<int64_t>({3, 2, 0}, Shape{3});
  CHECK(pow(ints, exps).dtype() == kInt64);
  CHECK(equal(pow(ints, exps), value("pow_int", {2, 3}, kInt64)));
  const Tensor mixed = pow(from_vector<int64_t>({2, 3, 4}, Shape{3}), from_vector<double>({0.5, -1.0, 1.5}, Shape{3}));
  CHECK(mixed.dtype() == kFloat64);
  check_close(mixed, value("pow_int_float", {3}));
  CHECK(equal(ints.pow(exps), pow(ints, exps)));
  CHECK_THROWS_WITH(pow(ints, from_vector<int64_t>({1, -2, 0}, Shape{3})),
                    Contains("pow: integers to negative integer powers are not allowed"));
  CHECK_THROWS_WITH(pow(zeros({2}), zeros({3})), Contains("pow"));
}

TEST_CASE("logical_and, or, xor, not and the bool operators match PyTorch", "[tensor][math]") {
  const Tensor a = value("logical_a", {5}), b = value("logical_b", {5});
  CHECK(equal(logical_and(a, b), value("logical_and", {5}, kBool)));
  CHECK(equal(logical_or(a, b), value("logical_or", {5}, kBool)));
  CHECK(equal(logical_xor(a, b), value("logical_xor", {5}, kBool)));
  CHECK(equal(logical_not(a), value("logical_not", {5}, kBool)));
  const Tensor pa = a.ne(0.0), pb = b.ne(0.0);
  CHECK(equal(pa & pb, value("logical_and", {5}, kBool)));
  CHECK(equal(pa | pb, value("logical_or", {5}, kBool)));
  CHECK(equal(pa ^ pb, value("logical_xor", {5}, kBool)));
  CHECK(equal(~pa, value("logical_not", {5}, kBool)));
  CHECK(equal(a.logical_and(b), logical_and(a, b)));
  // broadcast, and mixed dtypes (nonzero is true)
  CHECK(equal(logical_and(ones({2, 1}, TensorOptions(kInt64)), pb), pb.expand({2, 5})));
  CHECK_THROWS_WITH(a & b, Contains("&: bitwise operators take bool tensors here, got dtype float64"));
  CHECK_THROWS_WITH(~a, Contains("~: bitwise operators take bool tensors here"));
}

TEST_CASE("the math ops as Tensor methods and in-place methods, recorded under autograd", "[tensor][math]") {
  const Tensor x = random({2, 3}, 41);
  CHECK(equal(x.sin(), sin(x)));
  CHECK(equal(x.erf(), erf(x)));
  CHECK(equal(x.round(1), round(x, 1)));
  CHECK(equal(x.nan_to_num(1.0), nan_to_num(x, 1.0)));
  // an in-place op on a non-leaf: its gradient is the op's (cos), as PyTorch's sin_
  const Tensor y = mul(x, 1.0);
  y.sin_();
  y.backward(ones({2, 3}, TensorOptions(kFloat64)));
  CHECK(allclose(x.grad(), cos(x.detach()), 1e-15, 0.0));
  // without autograd, on a plain tensor
  const Tensor z = from_vector<double>({-1.5, 2.5, 0.5}, Shape{3});
  z.round_();
  CHECK(equal(z, from_vector<double>({-2.0, 2.0, 0.0}, Shape{3})));
  z.pow_(from_vector<double>({2.0, 3.0, 1.0}, Shape{3}));
  CHECK(equal(z, from_vector<double>({4.0, 8.0, 0.0}, Shape{3})));
}

TEST_CASE("lerp, addcmul and addcdiv match PyTorch, gradients too", "[tensor][math]") {
  const auto& f = fixture();
  using V = std::vector<Tensor>;
  f.check_case("lerp_low", {{"a", {3, 4}}, {"b", {3, 4}}}, {3, 4}, [](const V& v) { return lerp(v[0], v[1], 0.3); });
  f.check_case("lerp_high", {{"a", {3, 4}}, {"b", {4}}}, {3, 4}, [](const V& v) { return v[0].lerp(v[1], 0.7); });
  f.check_case("lerp_tensor", {{"a", {3, 4}}, {"b", {3, 4}}, {"w", {3, 4}}}, {3, 4},
               [](const V& v) { return lerp(v[0], v[1], v[2]); });
  f.check_case("addcmul", {{"i", {3, 4}}, {"a", {3, 4}}, {"b", {4}}}, {3, 4},
               [](const V& v) { return addcmul(v[0], v[1], v[2], 0.5); });
  f.check_case("addcdiv", {{"i", {3, 4}}, {"a", {3, 4}}, {"b", {3, 4}}}, {3, 4},
               [](const V& v) { return v[0].addcdiv(v[1], v[2], -2.0); });
  // exact at both ends, as PyTorch's two-sided formula
  const Tensor a = from_vector<float>({0.1f, 1e8f}, Shape{2}), b = from_vector<float>({0.7f, -3.0f}, Shape{2});
  CHECK(equal(lerp(a, b, 1.0), b));
  CHECK(equal(lerp(a, b, 0.0), a));
}
