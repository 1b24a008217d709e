// Module hooks against PyTorch's (fixtures/make_module_hooks_fixture.py), in float64 (1e-12): a
// Sequential with a forward pre-hook, a forward hook, a full backward pre-hook and full
// backward hooks on three modules: the output, every gradient, what each hook saw and the
// order they ran in, with the input requiring grad and without (then the full hooks run as the
// outputs' gradients arrive, grad_input undefined); a module of two inputs and two outputs;
// handles that remove; prepend; celu. Also errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/layers.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::doubles;

void check_close(const Tensor& got, const nlohmann::json& want) {
  if (want.is_null()) {
    CHECK_FALSE(got.defined());
    return;
  }
  REQUIRE(got.defined());
  CHECK(tensor::allclose(got, doubles(want, got.sizes()), 1e-12, 1e-12));
}

struct Seen {
  std::vector<std::string> events;
  std::map<std::string, std::pair<Tensors, Tensors>> grads;  // hook -> (grad_input, grad_output)
};

// The fixture's model, hooks and run; what the hooks saw.
Seen hooked_run(const nlohmann::json& ref, const nlohmann::json& want, bool x_requires_grad) {
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Linear>(3, 4));
  model->push_back(std::make_shared<Tanh>());
  model->push_back(std::make_shared<Linear>(4, 2));
  model->to(tensor::kFloat64);
  OrderedDict<Tensor> state;
  for (const auto& [name, t] : model->state_dict()) state.insert(name, doubles(ref["state"][name], t.sizes()));
  model->load_state_dict(state);
  Seen seen;
  (*model)[0]->register_forward_pre_hook([&](Module&, const Tensors& in) -> std::optional<Tensors> {
    seen.events.push_back("forward_pre 0");
    return Tensors{tensor::relu(in[0])};
  });
  (*model)[2]->register_forward_hook([&](Module&, const Tensors&, const Tensors& out) -> std::optional<Tensors> {
    seen.events.push_back("forward 2");
    return Tensors{tensor::gelu(out[0])};
  });
  (*model)[2]->register_full_backward_pre_hook([&](Module&, const Tensors& grad_out) -> std::optional<Tensors> {
    seen.events.push_back("backward_pre 2");
    seen.grads["backward_pre 2"] = {{}, grad_out};
    return Tensors{tensor::mul(grad_out[0], 2.0)};
  });
  const auto full = [&](const std::string& name, std::optional<double> scale) {
    return [&seen, name, scale](Module&, const Tensors& grad_in, const Tensors& grad_out) -> std::optional<Tensors> {
      seen.events.push_back("backward " + name);
      seen.grads["backward " + name] = {grad_in, grad_out};
      if (!scale || !grad_in[0].defined()) return std::nullopt;
      return Tensors{tensor::mul(grad_in[0], *scale)};
    };
  };
  (*model)[0]->register_full_backward_hook(full("0", 0.5));
  (*model)[1]->register_full_backward_hook(full("1", std::nullopt));
  model->register_full_backward_hook(full("model", std::nullopt));
  const Tensor x = doubles(ref["x"], {5, 3});
  if (x_requires_grad) x.requires_grad_();
  const Tensor y = (*model)(x);
  check_close(y, want["out"]);
  y.backward(doubles(want["upstream"], y.sizes()));
  if (x_requires_grad) check_close(x.grad(), want["grad_x"]);
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    check_close(p.grad(), want["grads"][name]);
  }
  return seen;
}

void check_seen(const Seen& seen, const nlohmann::json& want) {
  CHECK(seen.events == want["events"].get<std::vector<std::string>>());
  for (const auto& [hook, grads] : seen.grads) {
    INFO(hook);
    const nlohmann::json& w = want["seen"][hook];
    if (hook == "backward_pre 2") {
      check_close(grads.second[0], w[0]);
      continue;
    }
    REQUIRE(grads.first.size() == w["grad_input"].size());
    for (size_t k = 0; k < grads.first.size(); ++k) check_close(grads.first[k], w["grad_input"][k]);
    for (size_t k = 0; k < grads.second.size(); ++k) check_close(grads.second[k], w["grad_output"][k]);
  }
}

// (a, b) -> (a b, a + 2 b)
struct TwoInTwoOut : Module {
  TwoInTwoOut() : Module("TwoInTwoOut") {}
  std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override {
    return {tensor::mul(in[0], in[1]), tensor::add(in[0], in[1], 2.0)};
  }
};

}  // namespace

TEST_CASE("Module hooks run as PyTorch's: values, gradients, what each hook sees, the order", "[nn][hooks][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("module_hooks_reference.json");
  SECTION("the input requires grad") { check_seen(hooked_run(ref, ref["with_grad"], true), ref["with_grad"]); }
  SECTION("it does not: the full hooks run with the outputs' gradients") {
    check_seen(hooked_run(ref, ref["without_grad"], false), ref["without_grad"]);
  }
  SECTION("two inputs, two outputs") {
    const nlohmann::json& c = ref["two"];
    auto two = std::make_shared<TwoInTwoOut>();
    Tensors seen_in, seen_out;
    two->register_full_backward_hook([&](Module&, const Tensors& in, const Tensors& out) -> std::optional<Tensors> {
      seen_in = in;
      seen_out = out;
      return Tensors{tensor::mul(in[0], 3.0), in[1]};
    });
    const Tensor a = doubles(c["a"], {4}).requires_grad_(), b = doubles(c["b"], {4}).requires_grad_();
    const std::vector<Tensor> pq = (*two)(a, b);
    (tensor::sum(pq[0]) + tensor::sum(pq[1] * pq[1])).backward();
    for (size_t k = 0; k < 2; ++k) {
      check_close(seen_in[k], c["seen"]["grad_input"][k]);
      check_close(seen_out[k], c["seen"]["grad_output"][k]);
    }
    check_close(a.grad(), c["grad_a"]);
    check_close(b.grad(), c["grad_b"]);
  }
}

TEST_CASE("Module hooks: handles remove, prepend runs first, forward() runs none, errors", "[nn][hooks]") {
  auto linear = std::make_shared<Linear>(2, 2);
  std::vector<int> order;
  auto first = linear->register_forward_hook([&](Module&, const Tensors&, const Tensors&) -> std::optional<Tensors> {
    order.push_back(1);
    return std::nullopt;
  });
  linear->register_forward_hook(
      [&](Module&, const Tensors&, const Tensors&) -> std::optional<Tensors> {
        order.push_back(0);
        return std::nullopt;
      },
      /*prepend=*/true);
  const Tensor x = tensor::ones({1, 2});
  (*linear)(x);
  CHECK(order == std::vector<int>{0, 1});
  linear->forward(x);  // forward itself: no hooks, as in PyTorch
  CHECK(order.size() == 2);
  first.remove();
  first.remove();  // idempotent
  (*linear)(x);
  CHECK(order == std::vector<int>{0, 1, 0});
  linear->register_forward_pre_hook([](Module&, const Tensors& in) -> std::optional<Tensors> {
    return Tensors{in[0], in[0]};
  });
  CHECK_THROWS_WITH((*linear)(x), Contains("Linear: a forward pre-hook returned 2 tensors for 1"));
}

TEST_CASE("celu equals PyTorch's; gradcheck; CELU module", "[nn][hooks][fixture]") {
  const nlohmann::json c = tinyddp::testing::read_nn_json_fixture("module_hooks_reference.json")["celu"];
  const Tensor x = doubles(c["x"], {6}).requires_grad_();
  const Tensor y = tensor::celu(x, c["alpha"].get<double>());
  check_close(y, c["out"]);
  tensor::sum(y).backward();
  check_close(x.grad(), c["grad"]);
  tensor::Generator gen(2);
  const Tensor z = tensor::randn({3, 4}, tensor::kFloat64, &gen).requires_grad_();
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& v) { return tensor::celu(v[0], 0.7); }, {z}) == "");
  CHECK(CELU(2.0).repr() == "CELU(alpha=2)");
  CHECK_THROWS_WITH(tensor::celu(z, 0.0), Contains("celu: alpha must not be 0"));
}

namespace {

struct Failing : Module {
  Failing() : Module("Failing") {}
  Tensor forward(const Tensor&) override { throw Error("Failing: forward failed on purpose"); }
};

}  // namespace

TEST_CASE("Module hooks: an always_call forward hook runs when forward throws, and the error goes on", "[nn][hooks]") {
  auto failing = std::make_shared<Failing>();
  int always = 0, plain = 0;
  failing->register_forward_hook(
      [&](Module&, const Tensors& in, const Tensors& out) -> std::optional<Tensors> {
        ++always;
        CHECK(in.size() == 1);
        CHECK(out.empty());  // forward returned nothing
        throw Error("dropped: forward's error is the one reported");
      },
      false, /*always_call=*/true);
  failing->register_forward_hook([&](Module&, const Tensors&, const Tensors&) -> std::optional<Tensors> {
    ++plain;
    return std::nullopt;
  });
  CHECK_THROWS_WITH((*failing)(tensor::ones({1})), Contains("Failing: forward failed on purpose"));
  CHECK(always == 1);
  CHECK(plain == 0);
}
