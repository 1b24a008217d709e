// Modules with several inputs and outputs under DDP (Module::forward_many), against PyTorch's
// DDP: fixtures/make_multi_io_fixture.py ran a model of (x, z) -> (y, w) on 2 gloo ranks with
// find_unused_parameters=True, its branch c used by both ranks, by one, or by none depending
// on the step, and recorded every parameter and .grad after each backward and step. This test
// runs the same on 2 rank threads with tinyddp and compares every record (1e-6; "no gradient"
// exactly).
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using json = nlohmann::json;
using tensor::Tensor;
using testing::Expectations;

namespace {

const json& reference() {
  static const json data = [] {
    std::ifstream in("tests/ddp/fixtures/multi_io_reference.json");
    if (!in) throw std::runtime_error("cannot open tests/ddp/fixtures/multi_io_reference.json");
    return json::parse(in);
  }();
  return data;
}

// The fixture's model: (x [B, 4], z [B, 3]) -> (y, w), y = a(relu(trunk(x))) (+ c(h) when
// use_c), w = b(z) * mean(y).
struct TwoInTwoOut : nn::Module {
  std::shared_ptr<nn::Linear> trunk, a, b, c;
  bool use_c = true;
  TwoInTwoOut() : Module("TwoInTwoOut") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(4, 5));
    a = register_module("a", std::make_shared<nn::Linear>(5, 2));
    b = register_module("b", std::make_shared<nn::Linear>(3, 2));
    c = register_module("c", std::make_shared<nn::Linear>(5, 2));
  }
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override {
    TDDP_CHECK(inputs.size() == 2, "TwoInTwoOut takes (x, z), got {} inputs", inputs.size());
    const Tensor h = tensor::relu(trunk->forward(inputs[0]));
    Tensor y = a->forward(h);
    if (use_c) y = y + c->forward(h);
    const Tensor w = tensor::mul(b->forward(inputs[1]), tensor::mean(y));
    return {y, w};
  }
};

Tensor from_json(const json& values, const tensor::Shape& shape) {
  return tensor::from_vector(values.get<std::vector<float>>(), shape);
}

void compare(const json& expected, const nn::Module& model, const std::string& where, Expectations& e) {
  for (const auto& [name, p] : model.named_parameters()) {
    const json& want = expected.at(name);
    const std::vector<float> param = p.detach().contiguous().to_vector<float>();
    const std::vector<float> want_param = want["param"].get<std::vector<float>>();
    for (size_t i = 0; i < param.size(); ++i) {
      e.expect(std::fabs(param[i] - want_param[i]) < 1e-6,
               fmt::format("{}: {}[{}] = {}, PyTorch {}", where, name, i, param[i], want_param[i]));
    }
    if (want["grad"].is_null()) {
      e.expect(!p.grad().defined(), fmt::format("{}: {}.grad is defined, PyTorch's is None", where, name));
      continue;
    }
    if (!p.grad().defined()) {
      e.expect(false, fmt::format("{}: {}.grad is undefined, PyTorch has one", where, name));
      continue;
    }
    const std::vector<float> grad = p.grad().contiguous().to_vector<float>();
    const std::vector<float> want_grad = want["grad"].get<std::vector<float>>();
    for (size_t i = 0; i < grad.size(); ++i) {
      e.expect(std::fabs(grad[i] - want_grad[i]) < 1e-6,
               fmt::format("{}: {}.grad[{}] = {}, PyTorch {}", where, name, i, grad[i], want_grad[i]));
    }
  }
}

}  // namespace

TEST_CASE("DDP: a model with two inputs, two outputs and a branch unused on some steps equals PyTorch's DDP",
          "[ddp][multi_io][fixture]") {
  const json& ref = reference();
  const int64_t batch = ref["batch"].get<int64_t>();
  const std::vector<std::string> failures = testing::run_threads(ref["world"].get<int>(), [&](comm::ProcessGroup& pg,
                                                                                              Expectations& e) {
    const int rank = pg.rank();
    const json& mine = ref["ranks"][rank];
    auto model = std::make_shared<TwoInTwoOut>();
    {
      tensor::NoGradGuard no_grad;
      for (const auto& [name, t] : model->state_dict()) t.copy_(from_json(mine["initial"][name], t.sizes()));
    }
    ddp::DDPOptions options;
    options.find_unused_parameters(true);
    auto ddp_model = std::make_shared<ddp::DistributedDataParallel>(
        model, std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {}), options);
    nn::SGD optimizer(model->parameters(), nn::SGDOptions(ref["lr"].get<double>()));
    size_t record = 0;
    for (size_t step = 0; step < mine["batches"].size(); ++step) {
      const json& b = mine["batches"][step];
      model->use_c = ref["use_c"][step][rank].get<bool>();
      optimizer.zero_grad();
      // model(x, z) calls forward_many: DDP forwards both inputs and searches from both outputs.
      const std::vector<Tensor> out = (*ddp_model)(from_json(b[0], {batch, 4}), from_json(b[1], {batch, 3}));
      e.expect(out.size() == 2, "two outputs");
      const Tensor loss =
          nn::mse_loss(out[0], from_json(b[2], {batch, 2})) + nn::mse_loss(out[1], from_json(b[3], {batch, 2}));
      loss.backward();
      const json& after_backward = mine["records"][record++];
      e.expect(std::fabs(loss.item<double>() - after_backward["loss"].get<double>()) < 1e-6,
               fmt::format("rank {} step {}: loss {}, PyTorch {}", rank, step, loss.item<double>(),
                           after_backward["loss"].get<double>()));
      compare(after_backward["state"], *model, fmt::format("rank {} step {} after backward", rank, step), e);
      optimizer.step();
      compare(mine["records"][record++]["state"], *model, fmt::format("rank {} step {} after the step", rank, step), e);
    }
  });
  CHECK(failures.empty());
  if (!failures.empty()) FAIL_CHECK(failures.size() << " differences, the first: " << failures.front());
}

TEST_CASE("Module::forward_many: one input by default, clear errors otherwise", "[nn][multi_io]") {
  auto linear = std::make_shared<nn::Linear>(3, 2);
  const Tensor x = tensor::randn({4, 3});
  const std::vector<Tensor> one = linear->forward_many({x});
  REQUIRE(one.size() == 1);
  CHECK(tensor::equal(one[0], linear->forward(x)));
  CHECK_THROWS_WITH((*linear)(x, x), Catch::Contains("Linear: forward takes one input tensor, got 2"));
  TwoInTwoOut two;
  CHECK_THROWS_WITH(two.forward(x), Catch::Contains("TwoInTwoOut: forward(const Tensor&) is not implemented"));
}
