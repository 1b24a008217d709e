// Activation checkpointing under DDP against PyTorch's DDP
// (fixtures/make_checkpoint_ddp_fixture.py): a layer checkpointed twice (nn::checkpoint, as
// torch.utils.checkpoint's reentrant variant), so the backward recomputes it in two nested
// passes and its gradient hook fires from both, trained 3 SGD steps with static_graph on 2
// rank threads; each rank's loss and input gradient, every gradient after each backward and
// every weight after each step equal PyTorch's (1e-6).
#include <cmath>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/fixture_records.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using json = nlohmann::json;
using tensor::Tensor;
using testing::Expectations;

namespace {

// x [N, 6] -> out(step(step(x))), step(v) = tanh(shared(v)), each step checkpointed.
struct CheckpointedTwice : nn::Module {
  std::shared_ptr<nn::Linear> shared, out;
  CheckpointedTwice() : Module("CheckpointedTwice") {
    nn::SkipInitGuard no_draws;  // the weights come from the fixture; rank threads share the generator
    shared = register_module("shared", std::make_shared<nn::Linear>(6, 6));
    out = register_module("out", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    const auto step = [this](const Tensor& v) { return tensor::tanh((*shared)(v)); };
    return (*out)(nn::checkpoint(step, nn::checkpoint(step, x)));
  }
};

std::vector<float> floats(const json& values) { return values.get<std::vector<float>>(); }

}  // namespace

TEST_CASE("DDP with static_graph: a layer checkpointed twice trains as under PyTorch's DDP",
          "[ddp][checkpoint][static_graph][fixture]") {
  const json ref = testing::read_ddp_fixture("checkpoint_ddp_reference.json");
  const int64_t batch = ref["batch"], width = ref["width"], outputs = ref["out"];
  testing::require_no_failures(
      testing::run_threads(ref["world"].get<int>(), [&](comm::ProcessGroup& pg, Expectations& e) {
        const int rank = pg.rank();
        const json& mine = ref["ranks"][rank];
        auto model = std::make_shared<CheckpointedTwice>();
        testing::load_initial(*model, mine["initial"]);
        ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg), ddp::DDPOptions().static_graph(true));
        nn::SGD optimizer(model->parameters(), nn::SGDOptions(ref["lr"].get<double>()));
        for (size_t step = 0; step < mine["batches"].size(); ++step) {
          const json& b = mine["batches"][step];
          const std::string where = fmt::format("rank {} step {}", rank, step);
          optimizer.zero_grad();
          const Tensor x = tensor::from_vector(floats(b["x"]), tensor::Shape{batch, width}).requires_grad_();
          const Tensor loss =
              nn::mse_loss(ddp_model(x), tensor::from_vector(floats(b["target"]), tensor::Shape{batch, outputs}));
          loss.backward();
          // The rank's own loss and input gradient: [loss, *x.grad].
          const std::vector<float> want = floats(mine["losses"][step]);
          const std::vector<float> x_grad = x.grad().contiguous().to_vector<float>();
          e.expect(std::fabs(loss.item<double>() - want[0]) < 1e-6,
                   fmt::format("{}: loss {}, PyTorch {}", where, loss.item<double>(), want[0]));
          for (size_t i = 0; i < x_grad.size(); ++i) {
            e.expect(std::fabs(x_grad[i] - want[i + 1]) < 1e-6,
                     fmt::format("{}: x.grad[{}] = {}, PyTorch {}", where, i, x_grad[i], want[i + 1]));
          }
          testing::compare_records(ref["steps"][step]["grads"], testing::grads_of(*model), where + " gradients", e);
          optimizer.step();
          testing::compare_records(ref["steps"][step]["params"], model->named_parameters(), where + " weights", e);
        }
      }));
}
