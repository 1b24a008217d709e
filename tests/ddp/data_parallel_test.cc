// DataParallel and its four steps on CPU replicas (the device list names the CPU several
// times, each replica on a thread of its own). The reference is the plain module on the whole
// batch: over several SGD-momentum steps DataParallel with 1, 2 and 3 replicas gives the same
// loss, .grad and parameters to 1e-6 (each replica sums its own rows, so the float32 sums are
// grouped differently: equal to rounding, not bitwise). Also each step alone (scatter's
// chunks, replicate's copies and where their gradients go, parallel_apply's threads and
// errors, gather), buffers (only the module's own, through replica 0, are updated), and the
// errors PyTorch gives. On a GPU (skipped without one): one device, and the device twice.
#include <thread>

#include "tests/test_util.h"

#include <atomic>

#include "tinyddp/ddp/data_parallel.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using Catch::Contains;
using ddp::DataParallel;
using tensor::Device;
using tensor::Shape;
using tensor::Tensor;

namespace {
std::vector<Device> cpus(int n) { return std::vector<Device>(static_cast<size_t>(n), Device()); }

double max_diff(const Tensor& a, const Tensor& b) {
  return tensor::max(tensor::abs(tensor::sub(a.detach(), b.detach()))).item<double>();
}
}  // namespace

TEST_CASE("DataParallel over 1, 2 and 3 CPU replicas trains as the module on the whole batch", "[ddp][dp]") {
  for (const int replicas : {1, 2, 3}) {
    INFO(replicas << " replica(s)");
    tensor::manual_seed(5);
    auto plain = nn::mlp({6, 16, 12, 3});
    tensor::manual_seed(5);
    auto wrapped_module = nn::mlp({6, 16, 12, 3});
    DataParallel dp(wrapped_module, cpus(replicas));
    CHECK(dp.named_parameters().keys().front() == "module.0.weight");
    nn::SGD a(plain->parameters(), nn::SGDOptions(0.1).momentum(0.9));
    nn::SGD b(dp.parameters(), nn::SGDOptions(0.1).momentum(0.9));
    tensor::Generator gen(7);
    for (int step = 0; step < 4; ++step) {
      const Tensor x = tensor::randn({10, 6}, {}, &gen);  // 10 rows: chunks of 4, 4, 2 on 3 replicas
      const Tensor y = tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 1}, Shape{10});
      a.zero_grad();
      b.zero_grad();
      const Tensor la = nn::cross_entropy(plain->forward(x), y);
      const Tensor lb = nn::cross_entropy(dp.forward(x), y);
      la.backward();
      lb.backward();
      CHECK(std::fabs(la.item<double>() - lb.item<double>()) < 1e-6);
      const std::vector<Tensor> pa = plain->parameters(), pb = wrapped_module->parameters();
      for (size_t i = 0; i < pa.size(); ++i) CHECK(max_diff(pa[i].grad(), pb[i].grad()) < 1e-6);
      a.step();
      b.step();
      for (size_t i = 0; i < pa.size(); ++i) CHECK(max_diff(pa[i], pb[i]) < 1e-6);
    }
  }
}

TEST_CASE("scatter, replicate, parallel_apply and gather, one at a time", "[ddp][dp]") {
  const Tensor x = tensor::arange(0.0, 7.0).reshape({7, 1});
  const auto chunks = ddp::scatter({x}, cpus(3));
  REQUIRE(chunks.size() == 3);  // torch.chunk: 3, 3, 1
  CHECK(chunks[2][0].size(0) == 1);
  CHECK(ddp::scatter({x.narrow(0, 0, 2)}, cpus(3)).size() == 2);  // fewer rows than devices: fewer replicas

  tensor::manual_seed(1);
  auto module = std::make_shared<nn::Linear>(3, 2);
  const std::string before = tensor::default_generator().get_state();
  const auto replicas = ddp::replicate(module, cpus(2));
  CHECK(tensor::default_generator().get_state() == before);  // replicating draws nothing
  auto* copy = dynamic_cast<nn::Linear*>(replicas[1].get());
  REQUIRE(copy != nullptr);
  CHECK(tensor::equal(copy->weight, module->weight));
  CHECK_FALSE(copy->weight.is_leaf());  // an autograd copy of the module's weight
  // Both replicas' gradients land in the module's one .grad.
  const Tensor in = tensor::ones({4, 3});
  const auto outs = ddp::parallel_apply(replicas, {{in.narrow(0, 0, 2)}, {in.narrow(0, 2, 2)}});
  const std::vector<Tensor> joined = ddp::gather(outs, Device());
  CHECK(joined[0].sizes() == Shape{4, 2});
  tensor::sum(joined[0]).backward();
  CHECK(tensor::equal(module->weight.grad(), tensor::full({2, 3}, 4.0)));  // 4 rows of ones
  CHECK(tensor::equal(module->bias.grad(), tensor::full({2}, 4.0)));
  // A 0-dim output per replica (a loss) gathers into a vector.
  CHECK(ddp::gather({{tensor::scalar_tensor(1.0)}, {tensor::scalar_tensor(2.0)}}, Device())[0].sizes() == Shape{2});

  // A replica that throws: every thread ends, and the error names the replica.
  auto bad = std::make_shared<nn::Linear>(5, 2);
  CHECK_THROWS_WITH(ddp::parallel_apply(ddp::replicate(bad, cpus(2)), {{tensor::ones({1, 5})}, {tensor::ones({1, 4})}}),
                    Contains("parallel_apply: replica 1 failed: Linear: expected input with last dimension 5"));
}

TEST_CASE("DataParallel: buffers are the module's through replica 0; errors as PyTorch's", "[ddp][dp][errors]") {
  tensor::manual_seed(2);
  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  DataParallel dp(bn, cpus(2));
  const Tensor x = tensor::randn({8, 3});
  dp.forward(x);
  // Replica 0 normalised rows 0..3 and updated the module's running mean from them; replica 1's
  // copy was dropped (momentum 0.1 from zeros).
  const Tensor want = tensor::mul(tensor::mean(x.narrow(0, 0, 4), {0}), 0.1);
  CHECK(max_diff(bn->running_mean, want) < 1e-6);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);

  CHECK_THROWS_WITH(DataParallel(bn, std::vector<Device>{}), Contains("DataParallel: device_ids is empty"));
  CHECK_THROWS_WITH(DataParallel(bn, std::vector<Device>{Device::cuda(0)}),
                    Contains("the module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
                             "found 'weight' on device cpu"));
  struct Custom : nn::Module {
    Custom() : nn::Module("Custom") { register_parameter("w", tensor::ones({2})); }
    Tensor forward(const Tensor& t) override { return t; }
  };
  DataParallel custom(std::make_shared<Custom>(), cpus(2));
  CHECK_THROWS_WITH(custom.forward(tensor::ones({4, 2})),
                    Contains("Custom cannot be replicated: its class does not override Module::clone_structure()"));
}

TEST_CASE("DataParallel over a GPT (tied head): two CPU replicas give the module's loss and gradients",
          "[ddp][dp][gpt]") {
  nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  tensor::manual_seed(3);
  auto model = std::make_shared<nn::GPT>(c);
  DataParallel dp(model, cpus(2));
  tensor::Generator gen(4);
  const Tensor ids = tensor::mul(tensor::rand({6, 8}, {}, &gen), 11.0).to(tensor::kInt64);
  const Tensor targets = tensor::mul(tensor::rand({6, 8}, {}, &gen), 11.0).to(tensor::kInt64);
  const std::vector<Tensor> out = dp(ids, targets);  // {logits [6, 8, 11], loss of each replica}
  REQUIRE(out.size() == 2);
  CHECK(out[1].sizes() == Shape{2});
  tensor::mean(out[1]).backward();  // equal halves: the mean of the replicas' means
  std::vector<Tensor> dp_grads;
  for (const Tensor& p : model->parameters()) dp_grads.push_back(p.grad().clone());
  model->zero_grad();
  const Tensor loss = (*model)(ids, targets)[1];
  loss.backward();
  CHECK(std::fabs(loss.item<double>() - tensor::mean(out[1]).item<double>()) < 1e-6);
  const std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(max_diff(params[i].grad(), dp_grads[i]) < 1e-6);
}

TEST_CASE("DataParallel on one GPU, and on the GPU twice, trains as the module", "[ddp][dp][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  for (const size_t replicas : {size_t{1}, size_t{2}}) {
    INFO(replicas << " replica(s) on cuda:0");
    tensor::manual_seed(5);
    auto plain = nn::mlp({6, 16, 3});
    tensor::manual_seed(5);
    auto module = nn::mlp({6, 16, 3});
    plain->to(gpu);
    module->to(gpu);
    DataParallel dp(module, std::vector<Device>(replicas, gpu));
    tensor::Generator gen(7);
    const Tensor x = tensor::randn({10, 6}, {}, &gen).to(gpu);
    const Tensor y = tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 1}, Shape{10}).to(gpu);
    const Tensor la = nn::cross_entropy(plain->forward(x), y), lb = nn::cross_entropy(dp.forward(x), y);
    la.backward();
    lb.backward();
    CHECK(std::fabs(la.item<double>() - lb.item<double>()) < 1e-6);
    const std::vector<Tensor> pa = plain->parameters(), pb = module->parameters();
    for (size_t i = 0; i < pa.size(); ++i) CHECK(max_diff(pa[i].grad().to(Device()), pb[i].grad().to(Device())) < 1e-6);
  }
}

TEST_CASE("DataParallel: each replica runs the module's hooks, as PyTorch's replicate shares them",
          "[ddp][dp][hooks]") {
  tensor::manual_seed(4);
  auto model = std::make_shared<nn::Linear>(3, 2);
  std::atomic<int> calls{0};
  model->register_forward_hook(
      [&](nn::Module&, const nn::Tensors&, const nn::Tensors& out) -> std::optional<nn::Tensors> {
        ++calls;
        return nn::Tensors{tensor::mul(out[0], 2.0)};
      });
  DataParallel dp(model, cpus(2));
  const Tensor x = tensor::randn({4, 3});
  const Tensor y = dp.forward(x);
  CHECK(calls == 2);  // once per replica
  CHECK(max_diff(y, tensor::mul(model->forward(x), 2.0)) < 1e-6);
}
