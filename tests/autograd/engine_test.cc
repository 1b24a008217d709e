// Engine, AccumulateGrad and hook tests: post-hooks fire once per backward per reached leaf,
// after .grad holds the new value, in graph order; unreached leaves get no call; removal;
// queue_callback from a hook; accumulation across backward calls; retain_graph and the freed
// graph error; grad mode; detach; diamonds and fan-out; in-place safety; tensor hooks.
#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::AccumulateGrad;
using tinyddp::autograd::Engine;
using tinyddp::autograd::RemovableHandle;

namespace {
Tensor param(std::initializer_list<double> values) {
  Tensor t = from_vector(std::vector<double>(values));
  t.requires_grad_();
  return t;
}
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }
}  // namespace

TEST_CASE("leaves, grad_fn and requires_grad", "[engine]") {
  const Tensor w = param({1, 2});
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  CHECK(w.grad_fn() == nullptr);
  CHECK_FALSE(w.grad().defined());
  const Tensor y = mul(w, 3.0);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "MulBackward");
  CHECK(y.t().grad_fn()->name() == "AliasBackward");
  CHECK(w.narrow(0, 0, 1).grad_fn()->name() == "NarrowBackward");
  CHECK(sum(y).grad_fn()->next_edges()[0].function == y.grad_fn());
  CHECK(y.grad_fn()->next_edges()[0].function == w.grad_accumulator());
  CHECK_FALSE(y.grad_fn()->next_edges()[1].is_valid());  // the scalar does not require grad
  CHECK(y.grad_fn()->sequence_nr() < sum(y).grad_fn()->sequence_nr());
  // Ops on tensors that do not require grad record nothing.
  const Tensor plain = tensor({1.0, 2.0});
  CHECK_FALSE(mul(plain, plain).requires_grad());
  CHECK(mul(plain, plain).grad_fn() == nullptr);
  CHECK_THROWS_WITH(
      y.requires_grad_(),
      Contains("requires_grad_: only leaf tensors can change requires_grad (this one was produced by MulBackward)"));
  CHECK_THROWS_WITH(arange(3).requires_grad_(),
                    Contains("only floating-point tensors can require gradients, got dtype int64"));
  CHECK(w.grad_accumulator() == w.grad_accumulator());  // created once
  CHECK_THROWS_WITH(y.grad_accumulator(), Contains("only leaf tensors have one"));
}

TEST_CASE("backward of a simple expression and accumulation across calls", "[engine]") {
  const Tensor w = param({1, 2, 3});
  const Tensor x = tensor({4, 5, 6}, kFloat64);
  sum(mul(w, x)).backward();
  CHECK(grad_of(w) == std::vector<double>{4, 5, 6});
  sum(mul(w, w)).backward();  // accumulates: + 2w
  CHECK(grad_of(w) == std::vector<double>{6, 9, 12});
  w.mutable_grad() = Tensor();  // zero_grad(set_to_none)
  sum(w).backward();
  CHECK(grad_of(w) == std::vector<double>{1, 1, 1});
  // Explicit root gradient for a non-scalar root.
  w.mutable_grad() = Tensor();
  mul(w, 2.0).backward(tensor({1, 10, 100}, kFloat64));
  CHECK(grad_of(w) == std::vector<double>{2, 20, 200});
}

TEST_CASE("backward errors", "[engine][errors]") {
  const Tensor w = param({1, 2});
  CHECK_THROWS_WITH(tensor({1.0}).backward(),
                    Contains("backward: root 0 (shape [1]) does not require grad and has no grad_fn"));
  CHECK_THROWS_WITH(
      mul(w, 2.0).backward(),
      Contains("a gradient can be created implicitly only for one-element outputs, but root 0 has shape [2]"));
  CHECK_THROWS_WITH(mul(w, 2.0).backward(ones({3}, kFloat64)),
                    Contains("the gradient for root 0 has shape [3] but the root has shape [2]"));
  CHECK_THROWS_WITH(mul(w, 2.0).backward(ones({2})),
                    Contains("the gradient for root 0 is float32 on cpu but the root is float64"));
  // Twice through a freed graph.
  const Tensor loss = sum(mul(w, w));
  loss.backward();
  CHECK_THROWS_WITH(loss.backward(), Contains("SumBackward: trying to backward through the graph a second time"));
  CHECK_THROWS_WITH(Engine::queue_callback([] {}), Contains("queue_callback: no backward pass is running"));
}

TEST_CASE("retain_graph keeps the graph for a second backward", "[engine]") {
  const Tensor w = param({3});
  const Tensor loss = sum(mul(w, w));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward(Tensor(), true);
  CHECK(grad_of(w) == std::vector<double>{12});
  loss.backward();  // frees it
  CHECK(grad_of(w) == std::vector<double>{18});
  CHECK_THROWS_WITH(loss.backward(), Contains("second time"));
}

TEST_CASE("a diamond graph and a leaf feeding many ops sum their gradients", "[engine]") {
  const Tensor x = param({2});
  // Diamond: a = x * 3, b = exp(a), c = a * a, y = b + c: dy/dx = 3 (exp(3x) + 2 * 3x)
  const Tensor a = mul(x, 3.0);
  const Tensor y = add(exp(a), mul(a, a));
  y.backward();
  CHECK(std::fabs(grad_of(x)[0] - 3 * (std::exp(6.0) + 12.0)) < 1e-9);
  // Fan-out: one leaf used by ten ops.
  const Tensor w = param({1.5});
  Tensor total = zeros({1}, kFloat64);
  for (int i = 1; i <= 10; ++i) total = add(total, mul(w, static_cast<double>(i)));
  total.backward();
  CHECK(grad_of(w) == std::vector<double>{55});
}

TEST_CASE("gradients meeting at a node are summed in place only where nothing else holds them", "[engine]") {
  // Gradients fanning out of add(u, v) and meeting again at u's node and at x's: the sums are
  // right whichever tensor takes them.
  const Tensor x = param({1, 2});
  const Tensor u = mul(x, 2.0), v = mul(x, 3.0);
  const Tensor a = sum(mul(u, 5.0));
  const Tensor b = sum(add(u, v));
  add(b, a).backward();
  CHECK(grad_of(x) == std::vector<double>{2 * (1 + 5) + 3, 2 * (1 + 5) + 3});
  // A root gradient the caller holds is never summed into, nor one a hook kept.
  const Tensor y = mul(x, 1.0);
  const Tensor g1 = tensor({1.0, 1.0}, kFloat64), g2 = tensor({2.0, 3.0}, kFloat64);
  std::vector<Tensor> kept;
  auto handle = y.register_hook([&](const Tensor& g) {
    kept.push_back(g);
    return Tensor();
  });
  Engine::backward({y, y}, {g1, g2});
  CHECK(g1.to_vector<double>() == std::vector<double>{1, 1});
  CHECK(g2.to_vector<double>() == std::vector<double>{2, 3});
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].to_vector<double>() == std::vector<double>{3, 4});
  handle.remove();
}

TEST_CASE("grad mode: NoGradGuard records nothing", "[engine][grad_mode]") {
  const Tensor w = param({1});
  {
    NoGradGuard no_grad;
    const Tensor y = mul(w, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    w.mul_(5);  // in-place updates of parameters are fine without grad mode (optimizer steps)
    {
      EnableGradGuard enable;
      CHECK(mul(w, 2.0).requires_grad());
    }
    CHECK_FALSE(GradMode::is_enabled());
  }
  CHECK(GradMode::is_enabled());
  CHECK(w.item<double>() == 5);
}

TEST_CASE("grad mode as torch spells it: set_grad_enabled, AutoGradMode, InferenceMode", "[engine][grad_mode]") {
  const Tensor w = param({1});
  {
    AutoGradMode off(false);  // with torch.set_grad_enabled(False):
    CHECK_FALSE(mul(w, 2.0).requires_grad());
    {
      AutoGradMode on(true);
      CHECK(mul(w, 2.0).requires_grad());
    }
    CHECK_FALSE(is_grad_enabled());
  }
  CHECK(is_grad_enabled());
  set_grad_enabled(false);
  CHECK_FALSE(mul(w, 2.0).requires_grad());
  set_grad_enabled(true);
  CHECK(mul(w, 2.0).requires_grad());
  {
    InferenceMode guard;
    CHECK(InferenceMode::is_enabled());
    CHECK_FALSE(is_grad_enabled());
    CHECK_FALSE(mul(w, 2.0).requires_grad());
    {
      InferenceMode off(false);  // as PyTorch's: grad mode comes back inside
      CHECK_FALSE(InferenceMode::is_enabled());
      CHECK(mul(w, 2.0).requires_grad());
    }
    CHECK(InferenceMode::is_enabled());
  }
  CHECK_FALSE(InferenceMode::is_enabled());
  CHECK(is_grad_enabled());
}

TEST_CASE("detach cuts the graph and shares the data", "[engine]") {
  const Tensor w = param({2, 3});
  const Tensor d = w.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage(w));
  sum(mul(w, d)).backward();  // d is a constant: grad = d
  CHECK(grad_of(w) == std::vector<double>{2, 3});
}

TEST_CASE("post-hooks on gradient accumulators", "[engine][hooks]") {
  const Tensor w1 = param({1, 2});
  const Tensor w2 = param({3});
  const Tensor unused = param({7});
  std::vector<std::string> calls;
  std::vector<double> seen_w1;
  const auto h1 = w1.grad_accumulator()->add_post_hook([&] {
    calls.push_back("w1");
    seen_w1 = grad_of(w1);  // .grad already holds the new value
  });
  w2.grad_accumulator()->add_post_hook([&] { calls.push_back("w2"); });
  unused.grad_accumulator()->add_post_hook([&] { calls.push_back("unused"); });
  // w2 is used last in the forward, so its gradient is ready first.
  const Tensor loss = sum(mul(relu(mul(w1, 2.0)), w2));
  loss.backward();
  CHECK(calls == std::vector<std::string>{"w2", "w1"});
  CHECK(seen_w1 == std::vector<double>{6, 6});
  // Each backward fires each hook exactly once; removal stops it.
  calls.clear();
  sum(mul(w1, w1)).backward();
  CHECK(calls == std::vector<std::string>{"w1"});
  CHECK(seen_w1 == std::vector<double>{8, 10});  // accumulated 6 + 2, 6 + 4
  RemovableHandle handle = h1;
  handle.remove();
  handle.remove();  // idempotent
  calls.clear();
  sum(w1).backward();
  CHECK(calls.empty());
}

TEST_CASE("a hook queues a callback that runs after every gradient is final", "[engine][hooks]") {
  const Tensor a = param({1});
  const Tensor b = param({2});
  const Tensor c = param({3});
  std::vector<double> at_callback;
  int callbacks = 0;
  a.grad_accumulator()->add_post_hook([&] {
    // Queued while other gradients may still be pending.
    if (callbacks == 0) {
      Engine::queue_callback([&] {
        ++callbacks;
        at_callback = {grad_of(a)[0], grad_of(b)[0], grad_of(c)[0]};
        CHECK(Engine::in_backward());
      });
    }
  });
  const Tensor loss = add(add(mul(a, b), mul(b, c)), mul(a, c));
  loss.backward();
  CHECK(callbacks == 1);
  CHECK(at_callback == std::vector<double>{5, 4, 3});  // b + c, a + c, a + b
  CHECK_FALSE(Engine::in_backward());
}

TEST_CASE("AccumulateGrad adds in place into an aliasing .grad and adopts buffers otherwise", "[engine][accumulate]") {
  const Tensor w = param({1, 2, 3});
  // As DDP's gradient_as_bucket_view: .grad is a view into a larger bucket.
  const Tensor bucket = zeros({5}, kFloat64);
  w.mutable_grad() = bucket.narrow(0, 1, 3);
  sum(mul(w, w)).backward();
  CHECK(bucket.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 0});
  CHECK(w.grad().shares_storage(bucket));
  sum(w).backward();
  CHECK(bucket.to_vector<double>() == std::vector<double>{0, 3, 5, 7, 0});
  // With .grad undefined, a contiguous engine buffer becomes .grad without a copy; an
  // expanded one (sum's gradient) is copied into contiguous memory.
  const Tensor v = param({1, 2});
  sum(v).backward();
  CHECK(v.grad().is_contiguous());
  CHECK(v.grad().strides() == Shape{1});
  const Tensor u = param({1, 2});
  const Tensor given = tensor({5, 7}, kFloat64);
  mul(u, 1.0).backward(given);
  CHECK_FALSE(u.grad().shares_storage(given));  // the caller's gradient is never adopted
  given.fill_(0);
  CHECK(grad_of(u) == std::vector<double>{5, 7});
}

TEST_CASE("tensor hooks see and may replace gradients; retain_grad keeps non-leaf gradients", "[engine][hooks]") {
  const Tensor w = param({1, 2});
  const Tensor h = mul(w, 3.0);
  h.retain_grad();
  std::vector<double> seen;
  auto handle = h.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);  // replaces the gradient flowing on
  });
  sum(mul(h, h)).backward();
  CHECK(seen == std::vector<double>{6, 12});           // 2h
  CHECK(grad_of(w) == std::vector<double>{180, 360});  // 3 * 10 * 2h
  CHECK(grad_of(h).size() == 2);
  handle.remove();
  // A leaf hook runs before accumulation.
  const Tensor z = param({1});
  z.register_hook([](const Tensor& g) { return mul(g, -1.0); });
  sum(mul(z, 4.0)).backward();
  CHECK(grad_of(z) == std::vector<double>{-4});
  CHECK_THROWS_WITH(tensor({1.0}).register_hook([](const Tensor& g) { return g; }),
                    Contains("register_hook: cannot register a hook on a tensor that does not require grad"));
  auto bad = w.register_hook([](const Tensor&) { return zeros({3}, kFloat64); });
  CHECK_THROWS_WITH(sum(mul(w, 1.0)).backward(),
                    Contains("the replacement gradient has shape [3] but the gradient has shape [2]"));
  bad.remove();
  sum(mul(w, 1.0)).backward();  // the engine recovers after an error
}

TEST_CASE("in-place ops never give silently wrong gradients", "[engine][inplace]") {
  const Tensor w = param({1, 2});
  // A leaf that requires grad is refused, as PyTorch refuses it, also through a view.
  CHECK_THROWS_WITH(w.add_(1), Contains("add_: a leaf tensor that requires grad is used in an in-place operation"));
  CHECK_THROWS_WITH(w.narrow(0, 0, 1).zero_(),
                    Contains("fill_: a view of a leaf tensor that requires grad is used in an in-place operation"));
  CHECK_THROWS_WITH(uniform_(w), Contains("uniform_: in-place sampling into a tensor that requires grad"));
  // Anything else is recorded: the gradient of sum(3 * (2w * 2)) is 12, of copies and sums
  // what flows into the source.
  const Tensor doubled = mul(w, 2.0);
  doubled.mul_(2);
  sum(mul(doubled, 3.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{12, 12});
  w.mutable_grad() = Tensor();
  const Tensor plain = zeros({2}, kFloat64);
  plain.copy_(w);
  plain.add_(w);
  sum(mul(plain, 3.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{6, 6});
  // A tensor saved for backward and modified afterwards is detected at backward time.
  const Tensor c = tensor({3, 4}, kFloat64);
  const Tensor loss = sum(mul(w, c));
  c.mul_(2);
  CHECK_THROWS_WITH(loss.backward(), Contains("MulBackward: one of the tensors needed for gradient computation has "
                                              "been modified by an in-place operation: [float64 [2]]"));
}

TEST_CASE("unreached parameters and partial graphs", "[engine]") {
  const Tensor a = param({1});
  const Tensor b = param({2});
  sum(mul(a, 2.0)).backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());  // never reached: stays undefined
  // Only the branch that requires grad is traversed.
  const Tensor c = tensor({5}, kFloat64);
  sum(add(mul(a, c), c)).backward();
  CHECK(grad_of(a) == std::vector<double>{7});
}

TEST_CASE("graphs are freed with their outputs: no reference cycles", "[engine][memory]") {
  const Tensor w = param({1, 2});
  std::weak_ptr<tinyddp::autograd::Node> exp_node, sum_node;
  std::weak_ptr<TensorImpl> output;
  {
    const Tensor e = exp(w);  // saves its own output
    e.retain_grad();          // a hook on its grad_fn that refers back to e
    const Tensor loss = sum(e);
    exp_node = e.grad_fn();
    sum_node = loss.grad_fn();
    output = e.impl_ptr();
    loss.backward(Tensor(), /*retain_graph=*/true);
  }
  CHECK(exp_node.expired());
  CHECK(sum_node.expired());
  CHECK(output.expired());
  // The leaf's accumulator lives exactly as long as the leaf.
  std::weak_ptr<AccumulateGrad> accumulator;
  {
    const Tensor leaf = param({3});
    accumulator = leaf.grad_accumulator();
    CHECK_FALSE(accumulator.expired());
  }
  CHECK(accumulator.expired());
}
