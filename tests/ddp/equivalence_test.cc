// DDP trains like one process: N ranks (threads, processes) on their shares of each global
// batch end with the parameters of one process training on the whole batches, also with
// no_sync accumulation; with a GPU, on CUDA through Gloo's host staging (2 ranks sharing the
// GPU) and through NCCL (a world of one), whose allreduces overlap backward.

#include <fmt/ranges.h>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using Catch::Contains;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_processes;
using testing::run_threads;

namespace {

// The data of the equivalence tests: `steps` global batches of `global` rows.
struct Data {
  std::vector<Tensor> inputs, targets;
};
Data make_data(int steps, int64_t global) {
  tensor::Generator g(42);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.inputs.push_back(tensor::randn({global, 6}, {}, &g));
    d.targets.push_back(tensor::randn({global, 3}, {}, &g));
  }
  return d;
}

// One process training on whole batches from `initial`: the reference.
std::vector<Tensor> train_reference(const nn::OrderedDict<Tensor>& initial, const Data& d, int steps) {
  auto model = nn::mlp({6, 8, 3});
  model->load_state_dict(initial);
  nn::SGD opt(model->parameters(), nn::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    nn::mse_loss(model->forward(d.inputs[s]), d.targets[s]).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : model->parameters()) out.push_back(p.clone());
  return out;
}

constexpr int kSteps = 5;
constexpr int64_t kGlobalBatch = 12;

// Each rank trains on its rows [r*B/W, (r+1)*B/W) of every global batch; its final
// parameters must equal the single-process run from rank 0's initial weights.
// On `device`, the model and the data are moved there; the reference runs on the CPU.
void train_rank_and_compare(ProcessGroup& pg, Expectations& e, const DDPOptions& options, bool accumulate,
                            tensor::Device device = tensor::kCPU) {
  const Data d = make_data(kSteps, kGlobalBatch);
  tensor::Generator init(7 + pg.rank());  // different on each rank: DDP must broadcast rank 0's
  auto model = nn::mlp({6, 8, 3});
  {
    tensor::NoGradGuard no_grad;
    for (const Tensor& p : model->parameters()) tensor::uniform_(p, -0.5, 0.5, &init);
  }
  model->to(device);
  DistributedDataParallel ddp(model, borrow(pg), options);
  const nn::OrderedDict<Tensor> initial = [&] {
    nn::OrderedDict<Tensor> copy;
    for (const auto& [k, v] : model->state_dict()) copy.insert(k, v.to(tensor::kCPU).clone());
    return copy;
  }();
  nn::SGD opt(model->parameters(), nn::SGDOptions(0.1).momentum(0.9));
  const int64_t rows = kGlobalBatch / pg.size();
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    const Tensor x = d.inputs[s].narrow(0, pg.rank() * rows, rows).to(device);
    const Tensor y = d.targets[s].narrow(0, pg.rank() * rows, rows).to(device);
    if (accumulate) {
      // no_sync on the first half of the rows, synchronised on the second half: the sum of
      // the two half-batch gradients, halved, is the full local batch's gradient.
      const int64_t half = rows / 2;
      {
        auto guard = ddp.no_sync();
        tensor::mul(nn::mse_loss(ddp(x.narrow(0, 0, half)), y.narrow(0, 0, half)), 0.5).backward();
      }
      tensor::mul(nn::mse_loss(ddp(x.narrow(0, half, rows - half)), y.narrow(0, half, rows - half)), 0.5).backward();
    } else {
      nn::mse_loss(ddp(x), y).backward();
    }
    opt.step();
  }
  const std::vector<Tensor> expected = train_reference(initial, d, kSteps);
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    e.expect_close(params[i].to(tensor::kCPU), expected[i],
                   fmt::format("parameter {} against single-process training", i), 1e-5, 1e-5);
  }
}

}  // namespace

TEST_CASE("N ranks train like one process on the concatenated batches (threads)", "[ddp][equivalence]") {
  for (int size : {2, 3}) {
    INFO("world size " << size);
    require_no_failures(run_threads(
        size, [](ProcessGroup& pg, Expectations& e) { train_rank_and_compare(pg, e, DDPOptions(), false); }));
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      train_rank_and_compare(pg, e, DDPOptions().gradient_as_bucket_view(true).first_bucket_cap_mb(1e-4), false);
    }));
  }
}

TEST_CASE("N ranks train like one process on the concatenated batches (processes)", "[ddp][equivalence][processes]") {
  require_no_failures(
      run_processes(2, [](ProcessGroup& pg, Expectations& e) { train_rank_and_compare(pg, e, DDPOptions(), false); }));
  require_no_failures(run_processes(3, [](ProcessGroup& pg, Expectations& e) {
    train_rank_and_compare(pg, e, DDPOptions().find_unused_parameters(true), false);
  }));
}

TEST_CASE("no_sync accumulation equals one large batch", "[ddp][no_sync]") {
  require_no_failures(
      run_threads(2, [](ProcessGroup& pg, Expectations& e) { train_rank_and_compare(pg, e, DDPOptions(), true); }));
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    train_rank_and_compare(pg, e, DDPOptions().gradient_as_bucket_view(true).find_unused_parameters(true), true);
  }));
}

TEST_CASE("DDP on CUDA: 2 ranks sharing one GPU through gloo train like one CPU process", "[ddp][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  require_no_failures(run_threads(
      2, [&](ProcessGroup& pg, Expectations& e) { train_rank_and_compare(pg, e, DDPOptions(), false, gpu); }));
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    train_rank_and_compare(
        pg, e, DDPOptions().gradient_as_bucket_view(true).first_bucket_cap_mb(1e-4).find_unused_parameters(true), false,
        gpu);
  }));
}

TEST_CASE("DDP on CUDA over NCCL (a world of one): trains like one process, allreduces overlap backward",
          "[ddp][cuda][nccl]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  comm::ProcessGroupNccl pg(std::make_shared<comm::HashStore>(), 0, 1);
  Expectations e;
  train_rank_and_compare(pg, e, DDPOptions().first_bucket_cap_mb(1e-4), false, gpu);
  train_rank_and_compare(pg, e, DDPOptions().find_unused_parameters(true), true, gpu);
  require_no_failures(e.failures);
  // A CPU module under NCCL is refused with the fix in the message.
  CHECK_THROWS_WITH(DistributedDataParallel(nn::mlp({4, 4}), borrow(pg)),
                    Contains("nccl backend needs the module on this rank's GPU"));
  // The timeline: several buckets, the first launched while backward still runs.
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  auto model = nn::mlp({256, 512, 512, 512, 10});
  model->to(gpu);
  DistributedDataParallel ddp(model, borrow(pg),
                              DDPOptions().first_bucket_cap_mb(0.5).bucket_cap_mb(1).timeline(dir + "/nccl_timeline"));
  const Tensor x = tensor::randn({64, 256}).to(gpu), y = tensor::zeros({64, 10}).to(gpu);
  for (int it = 0; it < 3; ++it) nn::mse_loss(ddp(x), y).backward();
  const DDPStats s = ddp.stats();
  CHECK(s.bucket_bytes.size() > 2);
  CHECK(s.last_backward_comm_us > 0);
  CHECK(s.last_overlap_us > 0);  // the first bucket's allreduce ran while backward went on
}

TEST_CASE("DDP's deterministic option on CUDA over NCCL (a world of one): the bits of the same steps over Gloo",
          "[ddp][cuda][nccl][exact]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  const Data data = make_data(3, 8);
  // Three deterministic steps of SGD on pg (its int64 sums staged through the GPU on NCCL,
  // comm/host_staging.h); the parameters after them.
  const auto train = [&](ProcessGroup& pg) {
    auto model = nn::mlp({6, 16, 3});
    tensor::Generator init(3);
    {
      tensor::NoGradGuard no_grad;
      for (const Tensor& p : model->parameters()) tensor::uniform_(p, -0.5, 0.5, &init);
    }
    model->to(gpu);
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().deterministic(true).chunk_size(2));
    nn::SGD opt(model->parameters(), nn::SGDOptions(0.05));
    for (int s = 0; s < 3; ++s) {
      ddp.deterministic_step(data.inputs[s].to(gpu), data.targets[s].to(gpu),
                             [&](const Tensor& x, const Tensor& y) { return nn::mse_loss(ddp.forward(x), y); });
      opt.step();
    }
    std::vector<double> params;
    for (const Tensor& p : model->parameters()) {
      for (double v : p.to(tensor::kCPU).to(tensor::kFloat64).to_vector<double>()) params.push_back(v);
    }
    return params;
  };
  comm::ProcessGroupNccl nccl(std::make_shared<comm::HashStore>(), 0, 1);
  const std::vector<double> over_nccl = train(nccl);
  std::vector<double> over_gloo;
  require_no_failures(run_threads(1, [&](ProcessGroup& pg, Expectations&) { over_gloo = train(pg); }));
  CHECK(over_nccl == over_gloo);  // bit for bit
}
