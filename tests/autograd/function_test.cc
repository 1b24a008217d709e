// Custom autograd functions (autograd/function.h), written here as a user writes them: their
// gradients against finite differences (gradcheck, float64), the context (saved tensors and
// values, needs_input_grad), composition with ordinary ops, and the errors for a bad backward
// or a saved tensor modified in place.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::FunctionCtx;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;

namespace {

// y = x^3, backward 3 x^2 from the saved input.
struct Cube : tinyddp::autograd::Function<Cube> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    const Tensor x = ctx->get_saved_variables()[0];
    return {grad_outputs[0] * 3.0 * x * x};
  }
};

// y = scale * a * b + a (a and b of one shape; scale a plain number). Records which
// gradients backward was asked for.
struct ScaledMul : tinyddp::autograd::Function<ScaledMul> {
  static inline std::vector<bool> last_needs;
  static Tensor forward(FunctionCtx* ctx, const Tensor& a, const Tensor& b, double scale) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["scale"] = scale;
    return a * b * scale + a;
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    last_needs = ctx->needs_input_grad;
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const double scale = ctx->saved_data.get<double>("scale");
    const Tensor& g = grad_outputs[0];
    Tensor grad_a, grad_b;
    if (ctx->needs_input_grad[0]) grad_a = g * saved[1] * scale + g;
    if (ctx->needs_input_grad[1]) grad_b = g * saved[0] * scale;
    return {grad_a, grad_b, Tensor()};  // nothing for the number
  }
};

// Saves its own output: y = exp(x), backward g * y.
struct Exp : tinyddp::autograd::Function<Exp> {
  static Tensor forward(FunctionCtx* ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx->save_for_backward({y});
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& grad_outputs) {
    return {grad_outputs[0] * ctx->get_saved_variables()[0]};
  }
};

// Bad backwards, one per way of getting it wrong.
struct TooFewGradients : tinyddp::autograd::Function<TooFewGradients> {
  static Tensor forward(FunctionCtx*, const Tensor& x, double) { return x * 2.0; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};
struct GradientForANumber : tinyddp::autograd::Function<GradientForANumber> {
  static Tensor forward(FunctionCtx*, const Tensor& x, double) { return x * 2.0; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0] * 2.0, g[0]}; }
};
struct WrongShape : tinyddp::autograd::Function<WrongShape> {
  static Tensor forward(FunctionCtx*, const Tensor& x) { return x * 2.0; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {sum(g[0])}; }
};
// Saves a number and reads it back as `Read` under `key` (a wrong type, a wrong key), through
// get<T> or std::any_cast.
template <typename Read, bool kAnyCast>
struct ReadsSaved : tinyddp::autograd::Function<ReadsSaved<Read, kAnyCast>> {
  static inline std::string key = "scale";
  static Tensor forward(FunctionCtx* ctx, const Tensor& x) {
    ctx->saved_data["scale"] = 2.0;
    return x * 2.0;
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& g) {
    const Read scale = kAnyCast ? std::any_cast<Read>(ctx->saved_data.at(key)) : ctx->saved_data.get<Read>(key);
    return {g[0] * static_cast<double>(scale)};
  }
};
// Returns its input as it is.
struct Identity : tinyddp::autograd::Function<Identity> {
  static Tensor forward(FunctionCtx*, const Tensor& x) { return x; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};

// Two outputs, the first saved: (exp(x), sin(x)); backward g0 exp(x) + g1 cos(x). Records the
// gradients it was handed.
struct ExpSin : tinyddp::autograd::Function<ExpSin> {
  static inline std::vector<Tensor> seen;
  static inline bool materialize = true;
  static std::vector<Tensor> forward(FunctionCtx* ctx, const Tensor& x) {
    ctx->set_materialize_grads(materialize);
    Tensor e = exp(x);
    ctx->save_for_backward({e, x});
    return {e, sin(x)};
  }
  static std::vector<Tensor> backward(FunctionCtx* ctx, const std::vector<Tensor>& g) {
    seen = g;
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    Tensor grad;
    if (g[0].defined()) grad = mul(g[0], saved[0]);
    if (g[1].defined()) {
      const Tensor part = mul(g[1], cos(saved[1]));
      grad = grad.defined() ? add(grad, part) : part;
    }
    return {grad};
  }
};

// (2 x, the mask x > 0 as x's dtype), the mask marked non-differentiable.
struct DoubleAndMask : tinyddp::autograd::Function<DoubleAndMask> {
  static inline std::vector<Tensor> seen;
  static std::vector<Tensor> forward(FunctionCtx* ctx, const Tensor& x) {
    Tensor mask = gt(x, 0.0).to(x.dtype());
    ctx->mark_non_differentiable({mask});
    return {mul(x, 2.0), mask};
  }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) {
    seen = g;
    return {mul(g[0], 2.0)};
  }
};

struct UndefinedSecond : tinyddp::autograd::Function<UndefinedSecond> {
  static std::vector<Tensor> forward(FunctionCtx*, const Tensor& x) { return {mul(x, 2.0), Tensor()}; }
  static std::vector<Tensor> backward(FunctionCtx*, const std::vector<Tensor>& g) { return {g[0]}; }
};

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor t = randn(shape, kFloat64, &g);
  t.requires_grad_();
  return t;
}

}  // namespace

TEST_CASE("Function: a user's forward and backward pass gradcheck", "[autograd][function]") {
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return Cube::apply(in[0]); }, {leaf({3, 4}, 1)}) == "");
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return Exp::apply(in[0]); }, {leaf({5}, 2)}) == "");
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], in[1], 1.5); },
                  {leaf({2, 3}, 3), leaf({2, 3}, 4)}) == "");
  // Composed with ordinary ops on both sides.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return sum(Cube::apply(in[0] * 2.0) + in[0]); },
                  {leaf({4}, 5)}) == "");
}

TEST_CASE("Function: the node, the context and needs_input_grad", "[autograd][function]") {
  const Tensor x = leaf({3}, 6);
  const Tensor y = Cube::apply(x);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "CubeBackward");
  CHECK(y.requires_grad());
  sum(y).backward();
  const std::vector<double> xs = x.detach().to_vector<double>(), grads = x.grad().to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) CHECK(grads[i] == Approx(3 * xs[i] * xs[i]));

  // Only a requires grad: backward is told so and b gets nothing.
  const Tensor a = leaf({2}, 7);
  const Tensor b = randn({2}, kFloat64);
  sum(ScaledMul::apply(a, b, 2.0)).backward();
  CHECK(ScaledMul::last_needs == std::vector<bool>{true, false, false});
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());

  // Nothing requires grad, or grad mode is off: no node.
  CHECK(Cube::apply(randn({2})).grad_fn() == nullptr);
  {
    NoGradGuard no_grad;
    CHECK(Cube::apply(x).grad_fn() == nullptr);
  }
  // A forward that returns its input: the output is a new handle with its own node.
  const Tensor same = Identity::apply(x);
  CHECK(x.grad_fn() == nullptr);
  CHECK(same.grad_fn()->name() == "IdentityBackward");
}

TEST_CASE("Function: a bad backward or a saved tensor changed in place is named", "[autograd][function][errors]") {
  const Tensor x = leaf({3}, 8);
  CHECK_THROWS_WITH(sum(TooFewGradients::apply(x, 1.0)).backward(),
                    Contains("TooFewGradientsBackward: backward returned 1 gradients for the 2 arguments of forward"));
  CHECK_THROWS_WITH(
      sum(GradientForANumber::apply(x, 1.0)).backward(),
      Contains("GradientForANumberBackward: backward returned a gradient for argument 1, which is not a tensor"));
  CHECK_THROWS_WITH(sum(WrongShape::apply(x)).backward(),
                    Contains("WrongShapeBackward: the gradient for input 0 has shape []"));
  // saved_data read as another type or under another key names the function and the key.
  CHECK_THROWS_WITH(sum(ReadsSaved<int64_t, false>::apply(x)).backward(),
                    Contains("ReadsSaved<long, false>Backward: saved_data['scale'] holds a double, read as a long"));
  ReadsSaved<double, false>::key = "sclae";
  CHECK_THROWS_WITH(sum(ReadsSaved<double, false>::apply(x)).backward(),
                    Contains("ReadsSaved<double, false>Backward: saved_data has no 'sclae' (forward saved 'scale')"));
  CHECK_THROWS_WITH(
      sum(ReadsSaved<float, true>::apply(x)).backward(),
      Contains("ReadsSaved<float, true>Backward: backward read a saved_data value as another type than forward "
               "stored (std::bad_any_cast)"));
  CHECK(ReadsSaved<double, false>::key == "sclae");
  ReadsSaved<double, false>::key = "scale";
  sum(ReadsSaved<double, false>::apply(x)).backward();  // read right, it works
  CHECK(x.grad().defined());

  const Tensor base = leaf({3}, 9).detach();
  Tensor saved = base.clone();
  saved.requires_grad_();
  const Tensor y = Cube::apply(saved);
  {
    NoGradGuard no_grad;
    saved.mul_(2.0);  // changes what Cube saved
  }
  CHECK_THROWS_WITH(sum(y).backward(),
                    Contains("CubeBackward: one of the tensors needed for gradient computation has been "
                             "modified by an in-place operation"));
}

TEST_CASE("Function: several outputs, zeros for the unused ones, a saved output under create_graph",
          "[autograd][function]") {
  // Against finite differences, first and second derivatives: the saved exp(x) comes back with
  // its history in the double backward (without it, d/dx of g0 exp(x) would miss a term).
  const auto f = [](const std::vector<Tensor>& in) {
    const std::vector<Tensor> out = ExpSin::apply(in[0]);
    return add(mul(out[0], 2.0), mul(out[1], out[1]));
  };
  CHECK(gradcheck(f, {leaf({5}, 10)}) == "");
  CHECK(gradgradcheck(f, {leaf({5}, 11)}) == "");

  const Tensor x = leaf({4}, 12);
  const std::vector<Tensor> out = ExpSin::apply(x);
  REQUIRE(out.size() == 2);
  CHECK(out[0].grad_fn()->name() == "ExpSinBackward");
  CHECK(out[1].grad_fn()->name() == "ExpSinBackward");
  sum(out[1]).backward();  // only sin(x) used: backward sees zeros for exp(x), as PyTorch's
  REQUIRE(ExpSin::seen.size() == 2);
  CHECK(ExpSin::seen[0].defined());
  CHECK(equal(ExpSin::seen[0], zeros({4}, TensorOptions(kFloat64))));
  CHECK(allclose(x.grad(), cos(x.detach())));
  ExpSin::materialize = false;  // ctx->set_materialize_grads(false): undefined instead
  const Tensor y = leaf({4}, 13);
  sum(ExpSin::apply(y)[1]).backward();
  CHECK_FALSE(ExpSin::seen[0].defined());
  CHECK(allclose(y.grad(), cos(y.detach())));
  ExpSin::materialize = true;

  // A non-differentiable output: no history; backward gets zeros for it.
  const std::vector<Tensor> dm = DoubleAndMask::apply(x);
  CHECK(dm[0].requires_grad());
  CHECK_FALSE(dm[1].requires_grad());
  CHECK(dm[1].grad_fn() == nullptr);
  x.mutable_grad() = Tensor();
  sum(dm[0]).backward();
  CHECK(equal(DoubleAndMask::seen[1], zeros({4}, TensorOptions(kFloat64))));
  CHECK(allclose(x.grad(), full({4}, 2.0, TensorOptions(kFloat64))));
  // Without grad mode: the outputs as forward returned them, no node.
  {
    NoGradGuard no_grad;
    for (const Tensor& t : ExpSin::apply(x)) CHECK(t.grad_fn() == nullptr);
  }
  CHECK_THROWS_WITH(UndefinedSecond::apply(x),
                    Contains("UndefinedSecondBackward: forward returned an undefined tensor as output 1"));
}
