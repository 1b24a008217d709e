// ZeroRedundancyOptimizer with overlap_with_ddp (the optimizer step inside DDP's communication
// hook) against PyTorch's, in a world of one, from the same initial parameters and batches
// (fixtures/make_zero_overlap_fixture.py): SGD with momentum and Adam, the parameters after
// each of 7 iterations (the first two update nothing while ZeRO learns DDP's buckets).
// Over gloo on the CPU (PyTorch 1.13, fixtures/zero_overlap_gloo.json), and over NCCL on a
// GPU against PyTorch 2.x's run there (fixtures/zero_overlap_nccl.json, made on a GPU
// machine); the NCCL case skips without a GPU or without that fixture.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tests/test_util.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/comm/store.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using comm::ProcessGroup;
using tensor::Tensor;
using testing::borrow;
using testing::Expectations;

namespace {

Tensor from_json(const nlohmann::json& values, const tensor::Shape& shape, const tensor::Device& device) {
  return tensor::from_vector(values.get<std::vector<double>>(), shape).to(tensor::kFloat32).to(device);
}

ZeroRedundancyOptimizer::OptimizerFactory factory(const std::string& kind) {
  if (kind == "sgd") return optimizer_class<nn::SGD>(nn::SGDOptions(0.05).momentum(0.9));
  return optimizer_class<nn::Adam>(nn::AdamOptions(0.01));
}

// The fixture's runs on `pg` (its device: the model's), compared iteration by iteration.
void check_against_fixture(const nlohmann::json& fixture, ProcessGroup& pg, const tensor::Device& device,
                           Expectations& e) {
  const auto widths = fixture["widths"].get<std::vector<int64_t>>();
  const int64_t batch = fixture["batch"];
  for (const auto& [kind, history] : fixture["parameters_after_iteration"].items()) {
    const auto model = nn::mlp(widths);
    {
      tensor::NoGradGuard no_grad;
      const std::vector<Tensor> params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        params[i].copy_(from_json(fixture["initial"][i], params[i].sizes(), {}));
    }
    model->to(device);
    DistributedDataParallel ddp(model, borrow(pg));
    ZeroOptions options;
    options.overlap_with_ddp(true);
    ZeroRedundancyOptimizer zero(model->parameters(), factory(kind), borrow(pg), options);
    ddp.register_comm_hook(hook_with_zero_step(hooks::allreduce(borrow(pg)), ddp, zero));
    for (size_t k = 0; k < history.size(); ++k) {
      model->zero_grad();
      const Tensor x = from_json(fixture["inputs"][k], {batch, widths.front()}, device);
      const Tensor y = from_json(fixture["targets"][k], {batch, widths.back()}, device);
      nn::mse_loss(ddp(x), y).backward();
      const std::vector<Tensor> params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor want = from_json(history[k][i], params[i].sizes(), {});
        const Tensor got = params[i].detach().to(tensor::kCPU);
        e.expect(tensor::allclose(got, want, 1e-5, 1e-6),
                 fmt::format("{} ({}), iteration {}, parameter {}: largest difference {}", kind,
                             fixture["backend"].get<std::string>(), k, i,
                             tensor::max(tensor::abs(tensor::sub(got, want))).item<double>()));
      }
    }
  }
}

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("ZeRO overlap_with_ddp equals PyTorch's over gloo in a world of one", "[ddp][zero][overlap]") {
  const nlohmann::json fixture = load("tests/ddp/fixtures/zero_overlap_gloo.json");
  INFO("fixture from PyTorch " << fixture["torch_version"].get<std::string>());
  testing::require_no_failures(testing::run_threads(1, [&](ProcessGroup& pg, Expectations& e) {
    check_against_fixture(fixture, pg, tensor::Device(tensor::kCPU), e);
  }));
}

TEST_CASE("ZeRO overlap_with_ddp equals PyTorch's over NCCL on a GPU (a world of one)",
          "[ddp][zero][overlap][cuda][nccl]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const std::string path = "tests/ddp/fixtures/zero_overlap_nccl.json";
  if (!std::filesystem::exists(path)) {
    TINYDDP_SKIP("no " << path << " yet: run make_zero_overlap_fixture.py --device cuda on a GPU machine");
  }
  const nlohmann::json fixture = load(path);
  INFO("fixture from PyTorch " << fixture["torch_version"].get<std::string>());
  comm::ProcessGroupNccl pg(std::make_shared<comm::HashStore>(), 0, 1);
  Expectations e;
  check_against_fixture(fixture, pg, tensor::Device::cuda(0), e);
  testing::require_no_failures(e.failures);
}
