// Keyword arguments: nn::Value's non-tensor leaves (bool, int, float, string), a dict as a
// forward's kwargs (Module::forward_kwargs, call_kwargs), and the kwargs forms of the forward
// hooks (PyTorch 2.x's with_kwargs=True). The first two cases port PyTorch's test_kwarg_hooks
// and test_remove_kwarg_hooks (test/nn/test_module_hooks.py): their references are formulas
// (x + 2 bias, x + 4 bias), as in the test; Debian's PyTorch 1.13 predates with_kwargs, so
// there is no fixture to make. The rest: order among plain and kwargs hooks, always_call with
// kwargs, and the errors.
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/layers.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

// PyTorch's KwargModel: forward(x, bias=None) = x + bias (x when bias is None).
struct KwargModel : Module {
  KwargModel() : Module("KwargModel") {}
  Value forward_kwargs(const Tensors& args, const Value& kwargs) override {
    const Value bias = kwargs.get("bias");
    return bias.is_none() ? Value(args.at(0)) : Value(tensor::add(args.at(0), bias.tensor()));
  }
};

// The test's kwarg_forward_pre_hook: bias' = 2 bias.
ForwardPreHookWithKwargs doubling_pre_hook(std::vector<int>& fired, const Module& expected, int id) {
  return [&fired, &expected, id](Module& module, const Tensors& args,
                                 const Value& kwargs) -> std::optional<std::pair<Tensors, Value>> {
    fired.push_back(id);
    CHECK(&module == &expected);
    CHECK(args.size() == 1);
    Value changed = kwargs;
    changed.set("bias", tensor::mul(kwargs["bias"].tensor(), 2.0));
    return std::make_pair(args, changed);
  };
}

// The test's kwarg_forward_hook: out + bias (the bias the forward saw).
ForwardHookWithKwargs adding_hook(std::vector<int>& fired, const Module& expected, int id) {
  return [&fired, &expected, id](Module& module, const Tensors& args, const Value& kwargs,
                                 const Tensors& out) -> std::optional<Tensors> {
    fired.push_back(id);
    CHECK(&module == &expected);
    CHECK(args.size() == 1);
    return Tensors{tensor::add(out.at(0), kwargs["bias"].tensor())};
  };
}

bool near(const Value& got, const Tensor& want) { return tensor::allclose(got.tensor(), want, 0.0, 1e-5); }

}  // namespace

TEST_CASE("PyTorch's test_kwarg_hooks: kwargs pre-hooks and forward hooks see and change the kwargs",
          "[nn][hooks][kwargs][port]") {
  const Tensor x = tensor::ones({10, 10}), bias = tensor::ones({10, 10});
  const Value kwargs = Value::dict({{"bias", bias}});
  {  // 1. a forward pre-hook: out = x + 2 bias
    std::vector<int> fired;
    auto model = std::make_shared<KwargModel>();
    model->register_forward_pre_hook(doubling_pre_hook(fired, *model, 0));
    CHECK(fired.empty());
    const Value out = model->call_kwargs({x}, kwargs);
    CHECK(fired == std::vector<int>{0});
    CHECK(near(out, tensor::add(x, tensor::mul(bias, 2.0))));
  }
  {  // 2. forward pre-hook and forward hook (registered first, runs after): out = x + 4 bias
    std::vector<int> fired;
    auto model = std::make_shared<KwargModel>();
    model->register_forward_hook(adding_hook(fired, *model, 1));
    model->register_forward_pre_hook(doubling_pre_hook(fired, *model, 0));
    const Value out = model->call_kwargs({x}, kwargs);
    CHECK(fired == std::vector<int>{0, 1});
    CHECK(near(out, tensor::add(x, tensor::mul(bias, 4.0))));
  }
  {  // 3. a hook that reads the module's own state (the test's bound method): out = x + 2 bias
    auto model = std::make_shared<KwargModel>();
    model->register_forward_hook(
        [](Module& m, const Tensors&, const Value& kw, const Tensors& out) -> std::optional<Tensors> {
          CHECK(m.type_name() == "KwargModel");
          return Tensors{tensor::add(out.at(0), kw["bias"].tensor())};
        });
    CHECK(near(model->call_kwargs({x}, kwargs), tensor::add(x, tensor::mul(bias, 2.0))));
  }
  // The caller's kwargs are not changed by a hook that changes its copy.
  CHECK(tensor::equal(kwargs["bias"].tensor(), bias));
}

TEST_CASE("PyTorch's test_remove_kwarg_hooks: removed kwargs hooks no longer run", "[nn][hooks][kwargs][port]") {
  const Tensor x = tensor::ones({10, 10}), bias = tensor::ones({10, 10});
  const Value kwargs = Value::dict({{"bias", bias}});
  std::vector<int> fired;
  auto model = std::make_shared<KwargModel>();
  autograd::RemovableHandle forward_handle = model->register_forward_hook(adding_hook(fired, *model, 1));
  autograd::RemovableHandle pre_handle = model->register_forward_pre_hook(doubling_pre_hook(fired, *model, 0));
  CHECK(near(model->call_kwargs({x}, kwargs), tensor::add(x, tensor::mul(bias, 4.0))));
  CHECK(fired == std::vector<int>{0, 1});
  forward_handle.remove();
  CHECK(near(model->call_kwargs({x}, kwargs), tensor::add(x, tensor::mul(bias, 2.0))));
  CHECK(fired == std::vector<int>{0, 1, 0});
  pre_handle.remove();
  CHECK(near(model->call_kwargs({x}, kwargs), tensor::add(x, bias)));
  CHECK(fired == std::vector<int>{0, 1, 0});
}

TEST_CASE("Kwargs hooks: one order with the plain hooks, prepend, always_call, gradients through kwargs",
          "[nn][hooks][kwargs]") {
  std::vector<std::string> order;
  auto model = std::make_shared<KwargModel>();
  model->register_forward_pre_hook([&](Module&, const Tensors&) -> std::optional<Tensors> {
    order.push_back("plain pre");
    return std::nullopt;
  });
  model->register_forward_pre_hook(
      [&](Module&, const Tensors&, const Value& kw) -> std::optional<std::pair<Tensors, Value>> {
        order.push_back("kwargs pre, prepended, sees " + kw.describe());
        return std::nullopt;
      },
      /*prepend=*/true);
  model->register_forward_hook([&](Module&, const Tensors&, const Value& kw, const Tensors&) -> std::optional<Tensors> {
    order.push_back("kwargs forward, scale " + kw.get("scale").describe());
    return std::nullopt;
  });
  model->register_forward_hook([&](Module&, const Tensors&, const Tensors&) -> std::optional<Tensors> {
    order.push_back("plain forward");
    return std::nullopt;
  });
  // The bias is a leaf that requires grad: the gradient reaches it through the kwargs.
  const Tensor x = tensor::full({2}, 3.0), bias = tensor::full({2}, 0.5).requires_grad_();
  const Value out = model->call_kwargs({x}, Value::dict({{"bias", bias}, {"scale", 0.25}}));
  CHECK(order == std::vector<std::string>{"kwargs pre, prepended, sees dict{bias: tensor [2], scale: 0.25}",
                                          "plain pre", "kwargs forward, scale 0.25", "plain forward"});
  tensor::sum(out.tensor()).backward();
  CHECK(tensor::equal(bias.grad(), tensor::ones({2})));

  // call_nested is call_kwargs with none: the hooks see an empty dict.
  order.clear();
  model->call_nested({x});
  CHECK(order.front() == "kwargs pre, prepended, sees dict{}");

  // always_call: a kwargs forward hook runs when forward throws, with the kwargs, no outputs.
  auto failing = std::make_shared<KwargModel>();
  std::string seen;
  failing->register_forward_hook(
      [&](Module&, const Tensors&, const Value& kw, const Tensors& out) -> std::optional<Tensors> {
        seen = kw.describe() + ", " + std::to_string(out.size()) + " outputs";
        return std::nullopt;
      },
      false, /*always_call=*/true);
  CHECK_THROWS_WITH(failing->call_kwargs({x}, Value::dict({{"bias", "not a tensor"}})),
                    Contains("expected a tensor, got 'not a tensor'"));
  CHECK(seen == "dict{bias: 'not a tensor'}, 0 outputs");
}

TEST_CASE("Kwargs: a forward that takes none names the ones it got; hooks that return bad kwargs",
          "[nn][hooks][kwargs]") {
  auto linear = std::make_shared<Linear>(2, 2);
  const Tensor x = tensor::ones({1, 2});
  CHECK(tensor::equal(linear->call_kwargs({x}, Value::dict()).tensor(), linear->forward(x)));
  CHECK_THROWS_WITH(linear->call_kwargs({x}, Value::dict({{"bias", x}, {"scale", 2}})),
                    Contains("Linear: forward got keyword arguments it does not take: 'bias', 'scale'"));
  CHECK_THROWS_WITH(linear->call_kwargs({x}, Value::list({x})), Contains("keyword arguments must be a dict"));
  // A kwargs pre-hook that adds one, on a module called as model(x).
  autograd::RemovableHandle adds = linear->register_forward_pre_hook(
      [](Module&, const Tensors& args, const Value&) -> std::optional<std::pair<Tensors, Value>> {
        return std::make_pair(args, Value::dict({{"extra", true}}));
      });
  CHECK_THROWS_WITH((*linear)(x), Contains("does not take: 'extra'"));
  adds.remove();
  linear->register_forward_pre_hook(
      [](Module&, const Tensors& args, const Value&) -> std::optional<std::pair<Tensors, Value>> {
        return std::make_pair(args, Value(1.5));
      });
  CHECK_THROWS_WITH((*linear)(x), Contains("Linear: a forward pre-hook returned keyword arguments that are 1.5"));
}
