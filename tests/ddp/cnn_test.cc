// The digits CNN (Conv2d, BatchNorm2d, MaxPool2d, Linear) under DDP against PyTorch's DDP:
// fixtures/make_cnn_fixture.py trained it 10 SGD-momentum steps on 2 gloo ranks from rank 0's
// initial state (rank 1 started elsewhere: DDP broadcasts parameters and buffers). This test
// runs the same on 2 rank threads and compares every rank's loss and BatchNorm buffers after
// every step (they differ between ranks: each normalises its own batch, then DDP broadcasts
// rank 0's before the next forward), and the gradients and parameters of three steps, with
// the fixture's exact (float64) run, within its float32 spread (rounding.h).
#include <cmath>

#include "examples/models.h"
#include "tests/comm/comm_test_util.h"
#include "tests/ddp/rounding.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using tensor::Tensor;
using testing::Expectations;

namespace {

const nn::OrderedDict<Tensor>& reference() {
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/cnn_ddp_reference.safetensors");
  return file.tensors;
}

// The fixture's float64 run, the exact answer this float32 run rounds.
testing::ExactRun exact_run() { return testing::ExactRun(reference(), ""); }

void expect_close(const Tensor& got, const std::string& key, const std::string& where, Expectations& e) {
  for (const auto& failure : exact_run().check(got, key, tensor::kFloat32)) e.expect(false, where + ": " + failure);
}

}  // namespace

TEST_CASE("DDP: the digits CNN with BatchNorm equals PyTorch's DDP (losses, buffers per rank, grads, params)",
          "[ddp][cnn][fixture]") {
  const Tensor inputs = reference().at("inputs"), targets = reference().at("targets");
  const Tensor losses = exact_run().exact("loss");
  const int64_t steps = inputs.size(0), world = losses.size(1), batch = inputs.size(1) / world;
  const std::vector<std::string> failures =
      testing::run_threads(static_cast<int>(world), [&](comm::ProcessGroup& pg, Expectations& e) {
        const int rank = pg.rank();
        auto model = examples::digits_cnn(0.0);
        if (rank == 0) {  // rank 1 keeps its own initial weights: DDP must replace them with rank 0's
          tensor::NoGradGuard no_grad;
          for (const auto& [name, t] : model->state_dict()) t.copy_(reference().at("init." + name));
        }
        ddp::DistributedDataParallel ddp_model(model, testing::borrow(pg));
        nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.05).momentum(0.9));
        for (int64_t step = 0; step < steps; ++step) {
          const std::string where = fmt::format("rank {} step {}", rank, step);
          optimizer.zero_grad();
          const Tensor x = inputs[step].narrow(0, rank * batch, batch),
                       y = targets[step].narrow(0, rank * batch, batch);
          const Tensor loss = nn::cross_entropy(ddp_model.forward(x), y);
          loss.backward();
          const double want = losses[step][rank].item<double>();
          e.expect(std::fabs(loss.item<double>() - want) <= exact_run().tolerance("loss", step, want, tensor::kFloat32),
                   fmt::format("{}: loss {}, exact {}", where, loss.item<double>(), want));
          const bool snapshot = reference().contains(fmt::format("grad.step{}.0.weight", step));
          if (snapshot) {
            for (const auto& [name, p] : model->named_parameters()) {
              expect_close(p.grad(), fmt::format("grad.step{}.{}", step, name), where, e);
            }
          }
          optimizer.step();
          if (snapshot) {
            for (const auto& [name, p] : model->named_parameters()) {
              expect_close(p, fmt::format("param.step{}.{}", step, name), where, e);
            }
          }
          for (const auto& [name, b] : model->named_buffers()) {
            expect_close(b, fmt::format("buffers.rank{}.step{}.{}", rank, step, name), where, e);
          }
        }
      });
  CHECK(failures.empty());
  if (!failures.empty()) FAIL_CHECK(failures.size() << " differences, the first: " << failures.front());
}
