// In-place ops under autograd, as PyTorch's: relu_, x += y, mul_, masked_fill_, copy_ and
// nn::ReLU(inplace) are recorded (the tensor takes the op's history), give the gradients of
// their out-of-place twins bit for bit and pass gradcheck (and gradgradcheck: what a formula
// saves of the overwritten tensor is a copy from before); in-place ops on views write into
// their base's history (PyTorch's CopySlices), against PyTorch fixtures
// (fixtures/make_inplace_view_fixtures.py); a leaf that requires grad (or a view of one), a
// tensor saved for backward and modified later, and the views PyTorch refuses are errors that
// name the op and the tensor.
#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/layers.h"
#include "tinyddp/tensor/indexing.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using tinyddp::autograd::gradgradcheck;
using Inputs = std::vector<Tensor>;

namespace {
Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, kFloat64, &g).requires_grad_();
}

// A residual block, h = relu(x W1); out = relu(h W2 + x), written in place (as a ResNet's
// forward: relu_, out += identity) or out of place; returns the loss sum(out^2).
Tensor block(const Tensor& x, const Tensor& w1, const Tensor& w2, bool in_place) {
  if (!in_place) {
    const Tensor h = relu(matmul(x, w1));
    const Tensor out = relu(add(matmul(h, w2), x));
    return sum(mul(out, out));
  }
  Tensor h = matmul(x, w1);
  h.relu_();
  Tensor out = matmul(h, w2);
  out += x;
  out.relu_();
  return sum(out * out);
}
}  // namespace

TEST_CASE("a residual block written in place gives the out-of-place gradients bit for bit", "[autograd][inplace]") {
  Inputs grads[2];
  for (const bool in_place : {false, true}) {
    const Tensor x = leaf({4, 3}, 1), w1 = leaf({3, 5}, 2), w2 = leaf({5, 3}, 3);
    block(x, w1, w2, in_place).backward();
    grads[in_place] = {x.grad(), w1.grad(), w2.grad()};
  }
  for (size_t i = 0; i < 3; ++i) CHECK(equal(grads[0][i], grads[1][i]));
  // The written tensor takes the op's history: a non-leaf whose grad_fn computed its values.
  const Tensor x = leaf({2}, 4);
  Tensor y = mul(x, 2.0);
  y.relu_();
  CHECK(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()).find("Relu") != std::string::npos);
}

TEST_CASE("in-place ops pass gradcheck and gradgradcheck, the overwritten values saved as they were",
          "[autograd][inplace][gradcheck]") {
  const auto f = [](const Inputs& v) {
    const Tensor& a = v[0];
    const Tensor& b = v[1];
    Tensor t = mul(a, 1.5);
    t.mul_(b);  // its backward needs t from before the write (and b)
    t.sigmoid_();
    t.div_(add(b, 3.0));
    t.masked_fill_(gt(a, 0.5), 0.0);
    t.clamp_(-0.4, 0.4);
    t.add_(b, 2.0);
    t.sub_(mul(b, b));
    t.copy_(add(t, a));  // add saves nothing (mul(t, a) would save t, then overwritten: an error, as in PyTorch)
    return t;
  };
  CHECK(gradcheck(f, {leaf({3, 4}, 5), leaf({3, 4}, 6)}) == "");
  const auto g = [](const Inputs& v) {
    Tensor t = mul(v[0], v[0]);
    t.mul_(v[0]);  // a^3, its formula saving a^2 from before the write
    t.exp_();
    return t;
  };
  const Tensor a = mul(leaf({5}, 7), 0.3).detach().requires_grad_();
  CHECK(gradcheck(g, {a}) == "");
  CHECK(gradgradcheck(g, {a}) == "");
}

TEST_CASE("nn::ReLU(inplace) overwrites its input, as torch's ReLU(inplace=True)", "[autograd][inplace][nn]") {
  tinyddp::nn::ReLU inplace(true), plain;
  CHECK(inplace.repr() == "ReLU(inplace=True)");
  CHECK(plain.repr() == "ReLU()");
  const Tensor x = leaf({6}, 8), z = x.detach().clone().requires_grad_();
  const Tensor h = mul(x, 2.0), k = mul(z, 2.0);
  const Tensor out = inplace(h);
  CHECK(out.is_same(h));
  sum(mul(out, h)).backward();
  sum(mul(plain(k), k)).backward();  // h is relu(2x) now, as k's relu is
  CHECK(equal(x.grad(), z.grad()));
  CHECK(inplace.clone_structure()->repr() == "ReLU(inplace=True)");
}

TEST_CASE("in-place errors name the op and the tensor", "[autograd][inplace][errors]") {
  const Tensor w = leaf({2, 3}, 9);
  CHECK_THROWS_WITH(w.relu_(), Contains("relu_: a leaf tensor that requires grad is used in an in-place operation"));
  CHECK_THROWS_WITH(w.mul_(2), Contains("mul_: a leaf tensor that requires grad is used in an in-place operation"));
  CHECK_THROWS_WITH(w.narrow(0, 0, 1).relu_(),
                    Contains("relu_: a view of a leaf tensor that requires grad is used in an in-place operation"));
  const Tensor h = mul(w, 1.0);
  // Views PyTorch refuses to write: one of several an op returned, one taken under no_grad.
  CHECK_THROWS_WITH(h.chunk(3, 1)[0].add_(1),
                    Contains("add_: the view (float64 [2, 1]) is one of several views that chunk returned"));
  CHECK_THROWS_WITH(h.unbind(0)[1].mul_(2),
                    Contains("mul_: the view (float64 [3]) is one of several views that unbind"));
  Tensor quiet;
  {
    NoGradGuard no_grad;
    quiet = h.select(0, 0);
  }
  CHECK_THROWS_WITH(quiet.fill_(0), Contains("fill_: a view (float64 [3]) taken in no_grad mode is being modified"));
  CHECK_THROWS_WITH(h.expand({2, 2, 3}).mul_(2), Contains("more than one element of the written-to tensor"));
  // Saved for a backward, then overwritten: the backward names the node and the tensor.
  const Tensor saved = mul(w, 1.0);
  const Tensor loss = sum(mul(saved, w));
  saved.relu_();
  CHECK_THROWS_WITH(loss.backward(), Contains("MulBackward: one of the tensors needed for gradient computation has "
                                              "been modified by an in-place operation: [float64 [2, 3]]"));
  // A view used, then written through itself: what its use saved is stale, as PyTorch says.
  const Tensor written = mul(w, 1.0);
  const Tensor row = written.select(0, 1);
  const Tensor used = sum(mul(row, row));
  row.mul_(2.0);
  CHECK_THROWS_WITH(used.backward(), Contains("MulBackward: one of the tensors needed for gradient computation has "
                                              "been modified by an in-place operation: [float64 [3]]"));
  // A view whose base is gone and whose storage was written: nothing holds the write's history.
  Tensor orphan;
  {
    const Tensor gone = mul(w, 1.0);
    orphan = gone.select(0, 1);
    gone.relu_();
  }
  CHECK_THROWS_WITH(mul(orphan, 2.0), Contains("an input (float64 [3]) is a view taken before its storage was "
                                               "modified by an in-place operation"));
  // Outside grad mode nothing is recorded, as before (an optimizer's update).
  {
    NoGradGuard no_grad;
    w.mul_(0.5).relu_();
  }
  CHECK(w.is_leaf());
}

namespace {
const tinyddp::testing::Fixture& view_fixture() {
  static const tinyddp::testing::Fixture f("tests/autograd/fixtures/inplace_view_reference.txt");
  return f;
}

using tinyddp::testing::written_copy;
}  // namespace

TEST_CASE("in-place ops on views write into their base's history, as PyTorch's CopySlices",
          "[autograd][inplace][fixture]") {
  using V = std::vector<Tensor>;
  const auto& f = view_fixture();
  f.check_case("view_mul", {{"x", {3, 4}}, {"v", {3, 2}}}, {3, 4},
               [](const V& v) { return written_copy(v[0], [&](const Tensor& y) { y.narrow(1, 1, 2).mul_(v[1]); }); });
  f.check_case("view_relu_then_use", {{"x", {3, 4}}}, {3, 4}, [](const V& v) {
    const Tensor y = written_copy(v[0], [](const Tensor& t) { t.narrow(0, 0, 2).relu_(); });
    return mul(y, y);
  });
  f.check_case("view_of_view", {{"x", {3, 4}}, {"v", {2}}}, {3, 4}, [](const V& v) {
    return sin(written_copy(v[0], [&](const Tensor& y) { y.select(0, 1).narrow(0, 1, 2).add_(v[1]); }));
  });
  f.check_case("view_zero", {{"x", {2, 3}}}, {2, 3},
               [](const V& v) { return mul(written_copy(v[0], [](const Tensor& y) { y[0].zero_(); }), v[0]); });
  f.check_case("view_copy_into_constant", {{"v", {3}}}, {3, 4}, [](const V& v) {
    const Tensor y = zeros({3, 4}, kFloat64);
    y.select(1, 2).copy_(v[0]);
    CHECK(y.requires_grad());
    return mul(y, 2.0);
  });
  f.check_case("stale_sibling", {{"x", {4, 3}}}, {2, 3}, [](const V& v) {
    const Tensor y = mul(v[0], 1.0);
    const Tensor a = y.narrow(0, 0, 2), b = y.narrow(0, 2, 2);
    a.mul_(3.0);
    return add(mul(b, sum(a)), y.narrow(0, 1, 2));  // b, taken before the write, rebuilt from y
  });
  f.check_case("transposed_view", {{"x", {3, 4}}, {"v", {3}}}, {3, 4},
               [](const V& v) { return exp(written_copy(v[0], [&](const Tensor& y) { y.t()[1].add_(v[1]); })); });
  f.check_case("view_written_twice", {{"x", {3, 4}}, {"v", {4}}}, {3, 4}, [](const V& v) {
    const Tensor y = written_copy(v[0], [&](const Tensor& t) {
      const Tensor row = t[2];
      row.mul_(v[1]);
      row.add_(mul(sum(row), v[1]));
    });
    return mul(y, y);
  });
  f.check_case("whole_fill", {{"x", {2, 2}}}, {2, 2},
               [](const V& v) { return mul(written_copy(v[0], [](const Tensor& y) { y.fill_(2.0); }), 3.0); });
  CHECK(gradcheck(
            [](const V& v) {
              const Tensor y = mul(v[0], 1.0);
              y.index({indexing::Slice(), indexing::Slice(1, indexing::None, 2)}).mul_(v[1]);
              y.select(0, 0).add_(sum(y));
              return y;
            },
            {leaf({3, 4}, 31), leaf({3, 2}, 32)}) == "");
  CHECK(gradgradcheck(
            [](const V& v) {
              const Tensor y = mul(v[0], v[0]);
              y.narrow(1, 0, 2).mul_(v[1]);
              return y;
            },
            {leaf({2, 3}, 33), leaf({2, 2}, 34)}) == "");
}
