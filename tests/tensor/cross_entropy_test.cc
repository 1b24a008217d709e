// tensor::cross_entropy_rows: against PyTorch's per-row cross-entropy and its gradient
// (fixtures/make_cross_entropy_fixtures.py writes cross_entropy_reference.txt), against the same
// rows composed from log_softmax and gathers, float64 gradcheck and gradgradcheck, the same bits
// at any thread count, 16-bit logits, bad arguments, and (with a
// GPU) the CUDA kernels against the CPU in every floating dtype.
#include <cmath>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/engine.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;
using tinyddp::tensor::indexing::Slice;

namespace {

const tinyddp::testing::Fixture& reference() {
  static const tinyddp::testing::Fixture fixture("tests/tensor/fixtures/cross_entropy_reference.txt");
  return fixture;
}

// The rows cross_entropy_rows computes, composed from the ops it replaces (fused.h's formula).
Tensor composed(const Tensor& logits, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                double smoothing) {
  const int64_t classes = logits.size(1);
  const Tensor ignored = eq(targets, static_cast<double>(ignore_index));
  const Tensor index = masked_fill(targets, ignored, 0.0).unsqueeze(1);
  const Tensor log_probs = log_softmax(logits, 1);
  const Tensor w = weight.defined() ? weight : ones({classes}, TensorOptions(logits.dtype()));
  const Tensor nll = mul(neg(gather(log_probs, 1, index).squeeze(1)), index_select(w, 0, index.squeeze(1)));
  if (smoothing == 0) return masked_fill(nll, ignored, 0.0);
  const Tensor smooth = neg(sum(mul(log_probs, w.unsqueeze(0)), {1}));
  return masked_fill(add(mul(nll, 1 - smoothing), mul(smooth, smoothing / classes)), ignored, 0.0);
}

Tensor draw(const Shape& shape, DType dtype = kFloat64) { return randn(shape, TensorOptions(dtype)); }

// Targets in [0, classes), with every `every`-th row set to ignore_index.
Tensor draw_targets(int64_t rows, int64_t classes, int64_t ignore_index, int64_t every) {
  Tensor t = randint(0, classes, {rows});
  for (int64_t r = 0; r < rows; r += every) t.index_put_({r}, static_cast<double>(ignore_index));
  return t;
}

}  // namespace

TEST_CASE("cross_entropy_rows equals PyTorch's rows and their gradients, float64", "[cross_entropy]") {
  struct Case {
    const char* name;
    int64_t rows, classes, ignore_index;
    double smoothing;
    bool weighted;
  };
  for (const Case& c : {Case{"plain", 6, 9, -100, 0.0, false}, Case{"ignore_class", 7, 9, 2, 0.0, false},
                        Case{"ignore_minus_one", 5, 9, -1, 0.0, false}, Case{"smoothing", 5, 13, -100, 0.15, false},
                        Case{"weight", 6, 9, -100, 0.0, true}, Case{"everything", 7, 150, -1, 0.2, true},
                        Case{"shifted", 4, 70, -100, 0.1, false}}) {
    INFO(c.name);
    const std::string name = c.name;
    const Tensor targets = reference().value(name + "_targets", {c.rows}).to(kInt64);
    const Tensor weight = c.weighted ? reference().value(name + "_weight", {c.classes}) : Tensor();
    reference().check_case(name, {{"logits", {c.rows, c.classes}}}, {c.rows}, [&](const std::vector<Tensor>& x) {
      return cross_entropy_rows(x[0], targets, weight, c.ignore_index, c.smoothing);
    });
  }
}

TEST_CASE("cross_entropy_rows in float32 is within float32 rounding of PyTorch's float32 rows", "[cross_entropy]") {
  const Shape shape{6, 500};
  const Tensor logits = reference().value("wide_f32_logits", shape, kFloat32).requires_grad_();
  const Tensor targets = reference().value("wide_f32_targets", {6}).to(kInt64);
  const Tensor out = cross_entropy_rows(logits, targets, Tensor(), -1, 0.1);
  // Losses near 10 from sums of 500 terms, each side rounding its exp and its log-sum-exp: a few
  // float32 epsilons of the log-sum-exp (about 1e-6 each) and of the sums.
  CHECK(allclose(out, reference().value("wide_f32_out", {6}, kFloat32), 1e-5, 1e-5));
  out.backward(reference().value("wide_f32_grad_out", {6}, kFloat32));
  // Probabilities below 1 times |grad| below 4: float32's rounding of exp(x - lse), one in 1e-6.
  CHECK(allclose(logits.grad(), reference().value("wide_f32_grad_logits", shape, kFloat32), 1e-5, 1e-6));
}

TEST_CASE("cross_entropy_rows keeps float32's precision at logits of 1000", "[cross_entropy]") {
  // (x - max) - log-sum, as log_softmax computes it: at logits near 1000 the log-sum-exp itself
  // rounds to 6e-5 in float32, which x - lse would carry into every probability.
  manual_seed(9);
  const Tensor x = add(mul(draw({6, 50}), 2.0), 1000.0), targets = randint(0, 50, {6});
  const Tensor a = x.to(kFloat32).requires_grad_(), b = x.to(kFloat32).to(kFloat64).detach().requires_grad_();
  const Tensor out = cross_entropy_rows(a, targets), ref = composed(b, targets, Tensor(), -100, 0.0);
  CHECK(allclose(out.to(kFloat64), ref, 1e-6, 1e-6));
  out.sum().backward();
  ref.sum().backward();
  // Probabilities below 1 from exp of an argument within a float32 rounding of 10.
  CHECK(allclose(a.grad().to(kFloat64), b.grad(), 0.0, 1e-6));
}

TEST_CASE("cross_entropy_rows equals the composed rows in float64, forward and gradients", "[cross_entropy]") {
  manual_seed(3);
  // Widths below, at and past the eight partial sums, a vocabulary's; -inf logits (masked classes).
  for (const int64_t classes : {1, 7, 8, 65, 1031}) {
    for (const double smoothing : {0.0, 0.1}) {
      for (const bool weighted : {false, true}) {
        INFO("classes " << classes << " smoothing " << smoothing << " weighted " << weighted);
        Tensor x = mul(draw({37, classes}), 4.0);
        if (classes > 8) x.index_put_({Slice(), 3}, -INFINITY);
        const Tensor targets = draw_targets(37, classes, -1, 5);
        const Tensor safe = classes > 8 ? masked_fill(targets, eq(targets, 3.0), 4.0) : targets;  // not the -inf class
        const Tensor weight = weighted ? add(rand({classes}, TensorOptions(kFloat64)), 0.5) : Tensor();
        const Tensor g = draw({37});
        const Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
        const Tensor out = cross_entropy_rows(a, safe, weight, -1, smoothing);
        const Tensor ref = composed(b, safe, weight, -1, smoothing);
        if (smoothing == 0 || classes <= 8) {
          CHECK(allclose(out, ref, 1e-12, 1e-12));
          const auto grads = tinyddp::autograd::grad({out}, {a}, {g});
          const auto ref_grads = tinyddp::autograd::grad({ref}, {b}, {g});
          CHECK(allclose(grads[0], ref_grads[0], 1e-12, 1e-13));
        } else {  // a -inf logit makes every smoothed row infinite, on both sides
          CHECK(equal(isinf(out), isinf(ref)));
        }
      }
    }
  }
}

TEST_CASE("cross_entropy_rows passes gradcheck and gradgradcheck in float64", "[cross_entropy][gradcheck]") {
  manual_seed(4);
  const Tensor x = draw({5, 11}).requires_grad_();
  const Tensor targets = draw_targets(5, 11, 2, 3);  // ignore_index 2, a class; rows 0 and 3 ignored
  const Tensor weight = add(rand({11}, TensorOptions(kFloat64)), 0.5);
  for (const double smoothing : {0.0, 0.3}) {
    for (const bool weighted : {false, true}) {
      INFO("smoothing " << smoothing << " weighted " << weighted);
      const auto f = [&](const std::vector<Tensor>& in) {
        return cross_entropy_rows(in[0], targets, weighted ? weight : Tensor(), 2, smoothing);
      };
      CHECK(gradcheck(f, {x}) == "");
      CHECK(gradgradcheck(f, {x}) == "");
    }
  }
}

TEST_CASE("cross_entropy_rows gives the same bits at 1, 2 and 3 threads", "[cross_entropy][threads]") {
  tinyddp::testing::KeepThreads keep;
  manual_seed(6);
  const Tensor x = draw({300, 517}, kFloat32), g = draw({300}, kFloat32);
  const Tensor targets = draw_targets(300, 517, -100, 7);
  const Tensor weight = add(rand({517}), 0.5);
  std::vector<std::vector<Tensor>> runs;
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor xl = x.clone().requires_grad_();
    const Tensor out = cross_entropy_rows(xl, targets, weight, -100, 0.1);
    out.backward(g);
    runs.push_back({out.detach(), xl.grad()});
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t i = 0; i < 2; ++i) CHECK(equal(runs[r][i], runs[0][i]));
  }
}

TEST_CASE("cross_entropy_rows takes 16-bit logits, views and empty batches", "[cross_entropy]") {
  manual_seed(7);
  const Tensor x = draw({9, 40}), targets = draw_targets(9, 40, -1, 4);
  // bfloat16: computed in float from log-probabilities rounded to bfloat16 (PyTorch's), within
  // bfloat16's rounding (2^-8 of the log-probabilities, up to about 10 here) of the float64 rows.
  const Tensor half = cross_entropy_rows(x.to(kBFloat16), targets, Tensor(), -1, 0.1);
  CHECK(half.dtype() == kBFloat16);
  CHECK(allclose(half.to(kFloat64), cross_entropy_rows(x.to(kBFloat16).to(kFloat64), targets, Tensor(), -1, 0.1), 2e-2,
                 2e-2));
  // A transposed view.
  const Tensor xt = draw({40, 9}).transpose(0, 1);
  CHECK(
      allclose(cross_entropy_rows(xt, targets, Tensor(), -1), composed(xt, targets, Tensor(), -1, 0.0), 1e-12, 1e-12));
  CHECK(cross_entropy_rows(draw({0, 5}), zeros({0}, TensorOptions(kInt64))).sizes() == Shape{0});
}

TEST_CASE("cross_entropy_rows refuses bad targets, weights and smoothing, naming them", "[cross_entropy]") {
  const Tensor x = draw({4, 6});
  const Tensor targets = tensor({0, 1, 5, 2}, TensorOptions(kInt64));
  CHECK_THROWS_WITH(cross_entropy_rows(x, tensor({0, 1, 6, 2}, TensorOptions(kInt64))),
                    Contains("target 6 is out of bounds for 6 classes"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, tensor({0, -2, 1, 2}, TensorOptions(kInt64)), Tensor(), -1),
                    Contains("target -2 is out of bounds"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, tensor({7, 1, -100, 2}, TensorOptions(kInt64)), Tensor(), -100),
                    Contains("target 7 is out of bounds for 6 classes"));  // the first row
  // A strided view: only its own elements are checked (the 9s between them are not its).
  const Tensor strided = tensor({0, 9, 1, 9, 5, 9, 6, 9}, TensorOptions(kInt64)).view({4, 2}).select(1, 0);
  CHECK_THROWS_WITH(cross_entropy_rows(x, strided), Contains("target 6 is out of bounds for 6 classes"));
  CHECK_NOTHROW(cross_entropy_rows(x, strided.sub(1).clamp_min(0)));
  // Ignored rows pass whatever their value.
  CHECK_NOTHROW(cross_entropy_rows(x, tensor({-100, 1, 5, -100}, TensorOptions(kInt64)), Tensor(), -100));
  CHECK_NOTHROW(cross_entropy_rows(x, tensor({9, 1, 5, 9}, TensorOptions(kInt64)), Tensor(), 9));
  CHECK_THROWS_WITH(cross_entropy_rows(x, targets.to(kFloat64)), Contains("expected int64 class targets"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, targets.narrow(0, 0, 3)), Contains("expected targets of shape [4]"));
  CHECK_THROWS_WITH(cross_entropy_rows(draw({2, 4, 6}), targets),
                    Contains("expected logits of shape [batch, classes]"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, targets, draw({5})), Contains("weight should be defined for all 6 classes"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, targets, draw({6}, kFloat32)), Contains("weight"));
  CHECK_THROWS_WITH(cross_entropy_rows(x, targets, Tensor(), -100, 1.5), Contains("label_smoothing must be between"));
  CHECK_THROWS_WITH(cross_entropy_rows(ones({4, 6}, TensorOptions(kInt64)), targets),
                    Contains("floating-point logits"));
}

TEST_CASE("CUDA: cross_entropy_rows and its gradient equal the CPU's in every floating dtype",
          "[cross_entropy][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(8);
  struct Case {
    DType dtype;
    int64_t rows, classes;
    double tol;  // float32: sums of up to 50304 terms; 16-bit: the logits' and the outputs' rounding
  };
  // Short rows (a block of 64 threads) and GPT-2's vocabulary (512 threads, 99 classes each).
  for (const Case& c : {Case{kFloat32, 300, 65, 1e-5}, Case{kFloat32, 40, 50304, 1e-4}, Case{kFloat64, 70, 1500, 1e-12},
                        Case{kBFloat16, 50, 700, 2e-2}, Case{kFloat16, 50, 700, 2e-3}}) {
    for (const double smoothing : {0.0, 0.1}) {
      for (const bool weighted : {false, true}) {
        INFO(dtype_name(c.dtype) << " [" << c.rows << ", " << c.classes << "] smoothing " << smoothing
                                 << (weighted ? " weighted" : ""));
        const Tensor x = mul(draw({c.rows, c.classes}, c.dtype), 3.0), g = draw({c.rows}, c.dtype);
        const Tensor targets = draw_targets(c.rows, c.classes, -1, 6);
        const Tensor weight = weighted ? add(rand({c.classes}, TensorOptions(c.dtype)), 0.5) : Tensor();
        // The CPU reference in float64 from the same (rounded) inputs.
        const Tensor cpu = x.to(kFloat64).detach().requires_grad_(), dev = x.to(gpu).requires_grad_();
        const Tensor ref = cross_entropy_rows(cpu, targets, weighted ? weight.to(kFloat64) : Tensor(), -1, smoothing);
        const Tensor out =
            cross_entropy_rows(dev, targets.to(gpu), weighted ? weight.to(gpu) : Tensor(), -1, smoothing);
        REQUIRE(out.is_cuda());
        CHECK(allclose(out.to(kCPU).to(kFloat64), ref, c.tol, c.tol));
        ref.backward(g.to(kFloat64));
        out.backward(g.to(gpu));
        CHECK(allclose(dev.grad().to(kCPU).to(kFloat64), cpu.grad(), c.tol, c.tol));
        // No atomics: a second run gives the same bits.
        CHECK(
            equal(cross_entropy_rows(dev, targets.to(gpu), weighted ? weight.to(gpu) : Tensor(), -1, smoothing), out));
      }
    }
  }
}
