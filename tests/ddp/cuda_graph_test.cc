// DDP inside a CUDA graph (comm/nccl/process_group_nccl.h, "Collectives in a CUDA graph"): on
// NCCL (a world of one on the one GPU), a training step whose buckets' allreduces are captured
// replays the eager DDP steps bit for bit; what a graph cannot hold (a barrier's host wait, a
// group's first collective) is refused by name, and so is a replay on a group that has failed.
// Without a GPU every case skips.

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using Catch::Contains;
using testing::borrow;

namespace {

constexpr int kSteps = 8;
constexpr int kEagerSteps = 3;  // the bucket rebuild happens in the second

struct Batches {
  std::vector<Tensor> x, y;
};
Batches make_batches() {
  tensor::Generator g(11);
  Batches b;
  for (int s = 0; s < kSteps; ++s) {
    b.x.push_back(tensor::randn({32, 64}, {}, &g));
    b.y.push_back(tensor::randn({32, 8}, {}, &g));
  }
  return b;
}

// An MLP in several buckets (the caps below), SGD with momentum, the same initial weights.
struct Trainer {
  Trainer(comm::ProcessGroup& pg, tensor::Device gpu, const DDPOptions& options) {
    tensor::manual_seed(3);
    model = nn::mlp({64, 256, 256, 8});
    model->to(gpu);
    ddp = std::make_unique<DistributedDataParallel>(model, borrow(pg), options);
    opt = std::make_unique<nn::SGD>(model->parameters(), nn::SGDOptions(0.05).momentum(0.9));
  }
  void step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    nn::mse_loss((*ddp)(x), y).backward();
    opt->step();
  }
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<nn::SGD> opt;
};

}  // namespace

TEST_CASE("CUDA: a DDP step captured in a CUDA graph replays the eager DDP steps bit for bit",
          "[ddp][cuda][nccl][graph]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  comm::ProcessGroupNccl pg(std::make_shared<comm::HashStore>(), 0, 1);
  const Batches b = make_batches();
  for (const bool as_view : {false, true}) {
    INFO("gradient_as_bucket_view " << as_view);
    // Three buckets once rebuilt (bytes, gradients ready from the last layer): [W3, b3] 8,224
    // closes past 0.005 MB, [W2, b2] 263,168 and [W1, b1] 66,560 each past 0.05 MB.
    const DDPOptions options =
        DDPOptions().first_bucket_cap_mb(0.005).bucket_cap_mb(0.05).gradient_as_bucket_view(as_view);
    Trainer eager(pg, gpu, options), graphed(pg, gpu, options);
    for (int s = 0; s < kSteps; ++s) eager.step(b.x[s].to(gpu), b.y[s].to(gpu));

    for (int s = 0; s < kEagerSteps; ++s) graphed.step(b.x[s].to(gpu), b.y[s].to(gpu));
    const Tensor x = b.x[kEagerSteps].to(gpu), y = b.y[kEagerSteps].to(gpu);
    tensor::cuda::CudaGraph graph;
    graphed.opt->zero_grad();
    graph.capture_begin(0);
    nn::mse_loss((*graphed.ddp)(x), y).backward();
    graphed.opt->step();
    graph.capture_end();
    REQUIRE(graphed.ddp->stats().bucket_bytes.size() > 2);  // several buckets' allreduces in the graph
    for (int s = kEagerSteps; s < kSteps; ++s) {
      x.copy_(b.x[s].to(gpu));
      y.copy_(b.y[s].to(gpu));
      graph.replay();
    }
    const auto want = eager.model->parameters(), got = graphed.model->parameters();
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("parameter " << i);
      // The same kernels on the same values in the same order: the same bits.
      CHECK(tensor::equal(got[i].to(tensor::kCPU), want[i].to(tensor::kCPU)));
    }
    // The guard of the comparison: training moved the parameters.
    CHECK_FALSE(
        tensor::equal(got[0].to(tensor::kCPU), Trainer(pg, gpu, options).model->parameters()[0].to(tensor::kCPU)));
    graph.reset();  // before the group goes: the graph holds its communicator's kernels
  }
}

TEST_CASE("CUDA: what a CUDA graph cannot hold of NCCL is refused by name", "[ddp][cuda][nccl][graph][errors]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  const Tensor t = tensor::ones({16}).to(gpu);
  {
    // The group's first collective creates the communicator: not inside a capture.
    comm::ProcessGroupNccl fresh(std::make_shared<comm::HashStore>(), 0, 1);
    tensor::cuda::CudaGraph graph;
    graph.capture_begin(0);
    CHECK_THROWS_WITH(fresh.allreduce(t), Contains("the group's first collective cannot be captured"));
    graph.reset();
  }
  comm::ProcessGroupNccl pg(std::make_shared<comm::HashStore>(), 0, 1);
  pg.allreduce(t)->wait();
  {
    // A barrier waits on the host: refused, and the capture with it.
    tensor::cuda::CudaGraph graph;
    graph.capture_begin(0);
    CHECK_THROWS_WITH(pg.barrier(), Contains("ProcessGroupNccl::barrier: cuda:0 is capturing a CUDA graph"));
    CHECK_THROWS_WITH(graph.capture_end(), Contains("was refused during it"));
  }
  // A captured collective's Work: waited for inside the capture (the compute stream waits), not
  // by the host, and not after.
  tensor::cuda::CudaGraph graph;
  graph.capture_begin(0);
  const std::shared_ptr<comm::Work> work = pg.allreduce(t);
  CHECK_THROWS_WITH(work->wait(comm::Millis(100)), Contains("was captured into a CUDA graph"));
  work->wait();
  graph.capture_end();
  CHECK_THROWS_WITH(work->wait(), Contains("was captured into a CUDA graph"));
  graph.replay();
  CHECK(tensor::sum(t.to(tensor::kCPU)).item<float>() == 16.0f);  // a sum over one rank
  graph.reset();
}

TEST_CASE("CUDA: a replay on a failed NCCL group is refused, naming the failure", "[ddp][cuda][nccl][graph][errors]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const Tensor t = tensor::ones({16}).to(tensor::Device::cuda(0));
  comm::ProcessGroupNccl pg(std::make_shared<comm::HashStore>(), 0, 1);
  pg.allreduce(t)->wait();
  // Left allocated on purpose: an aborted communicator is freed at once, and NCCL's part of a
  // graph that held its kernels must not be destroyed after it.
  auto* graph = new tensor::cuda::CudaGraph();
  graph->capture_begin(0);
  pg.allreduce(t)->wait();
  graph->capture_end();
  graph->replay();
  tensor::cuda::synchronize(0);
  pg.abort("aborted by the test");
  CHECK_THROWS_WITH(graph->replay(), Contains("refused") && Contains("aborted by the test"));
}
