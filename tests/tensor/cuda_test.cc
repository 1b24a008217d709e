// CUDA tests: the device query agrees with itself in every build and CUDA entry points fail
// clearly without a GPU; where a GPU is present, every CUDA op, gradient and optimizer step
// is checked against the CPU on random inputs. GPU cases skip (with a reason) without one.
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <tuple>

#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

#if TINYDDP_WITH_CUDA
#include <cuda_runtime_api.h>

#include "tests/cuda_test_util.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#endif

using namespace tinyddp::tensor;
using tinyddp::testing::expect_matches_cpu;

TEST_CASE("the device query is consistent", "[cuda]") {
  const int count = cuda::device_count();
  CHECK(count >= 0);
  CHECK(cuda::is_available() == (count > 0));
  CHECK(static_cast<int>(cuda::device_properties().size()) == count);
  CHECK_FALSE(cuda::unavailable_reason().empty());
  if (!cuda::is_built()) CHECK(count == 0);
}

TEST_CASE("a kernel runs on every CUDA device", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (const cuda::DeviceProperties& p : cuda::device_properties()) {
    INFO("device " << p.index << " " << p.name);
    CHECK(p.total_memory > 0);
    CHECK(p.major >= 3);
    CHECK(cuda::smoke_test(p.index).empty());
  }
}

// ---- CUDA tensors -----------------------------------------------------------------------------

namespace {

const Device kGpu = Device::cuda(0);

}  // namespace

TEST_CASE("without a GPU, creating a CUDA tensor fails naming the device and the reason", "[cuda]") {
  if (cuda::is_available()) TINYDDP_SKIP("a CUDA device is present");
  CHECK_THROWS_WITH(
      empty({2, 3}, TensorOptions().device(kGpu)),
      Catch::Contains("cannot allocate a tensor on cuda:0") && Catch::Contains(cuda::unavailable_reason()));
  CHECK_THROWS_WITH(ones({2}).to(kGpu), Catch::Contains("cuda:0"));
  CHECK(cuda::allocator_stats().requests == 0);
  cuda::empty_cache();  // harmless
  cuda::reset_peak_memory_stats();
  cuda::synchronize();
}

TEST_CASE("CUDA: copies between host and device round-trip every dtype, strided and broadcast", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool}) {
    INFO(dtype_name(dtype));
    const Tensor host = (randn({5, 7}) * 4.0).to(dtype);
    const Tensor dev = host.to(kGpu);
    CHECK(dev.is_cuda());
    CHECK(equal(dev.to(kCPU), host));
    CHECK(equal(host.t().to(kGpu).to(kCPU), host.t().contiguous()));     // strided source
    CHECK(equal(dev.t().contiguous().to(kCPU), host.t().contiguous()));  // strided on the GPU
    const Tensor wide = zeros({3, 5, 7}, TensorOptions().dtype(dtype).device(kGpu));
    wide.copy_(host);  // broadcast on the GPU
    CHECK(equal(wide.to(kCPU), host.expand({3, 5, 7}).contiguous()));
    const Tensor converted = zeros({5, 7}, TensorOptions().dtype(kFloat64).device(kGpu));
    converted.copy_(dev);  // dtype conversion on the GPU
    CHECK(equal(converted.to(kCPU), host.to(kFloat64)));
    const Tensor back = zeros({5, 7}, dtype);
    back.copy_(dev);  // device to host, in place
    CHECK(equal(back, host));
  }
}

TEST_CASE("CUDA: elementwise ops match the CPU on random inputs, broadcast and strided", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const double tol = dtype == kBFloat16 ? 1e-2 : dtype == kFloat16 ? 2e-3 : dtype == kFloat32 ? 1e-5 : 1e-12;
    const Tensor a = randn({6, 5}).to(dtype);
    const Tensor b = randn({5}).to(dtype);         // broadcast over rows
    const Tensor c = randn({5, 6}).to(dtype).t();  // strided
    const Tensor pos = (rand({6, 5}) + 0.1).to(dtype);
    const std::string d = dtype_name(dtype);
    expect_matches_cpu(
        {a, b}, [](const auto& v) { return add(v[0], v[1], 0.5); }, "add alpha " + d, tol);
    expect_matches_cpu(
        {a, c}, [](const auto& v) { return mul(v[0], v[1]); }, "mul strided " + d, tol);
    expect_matches_cpu(
        {a, pos}, [](const auto& v) { return div(v[0], v[1]); }, "div " + d, tol);
    expect_matches_cpu(
        {a, b}, [](const auto& v) { return maximum(v[0], v[1]); }, "maximum " + d, tol);
    expect_matches_cpu(
        {a, c}, [](const auto& v) { return minimum(v[0], v[1]); }, "minimum " + d, tol);
    expect_matches_cpu(
        {a, b}, [](const auto& v) { return lt(v[0], v[1]); }, "lt " + d, 0);
    expect_matches_cpu(
        {a, c}, [](const auto& v) { return eq(v[0], v[1]); }, "eq " + d, 0);
    expect_matches_cpu(
        {a, lt(c, 0.0)}, [](const auto& v) { return masked_fill(v[0], v[1], -1.5); }, "masked_fill " + d, 0);
    // Unary ops of a (any sign) or of pos (positive).
    const std::vector<std::tuple<std::string, Tensor, Tensor (*)(const Tensor&)>> unary = {
        {"neg", a, [](const Tensor& x) { return neg(x); }},
        {"abs", a, [](const Tensor& x) { return abs(x); }},
        {"relu", a, [](const Tensor& x) { return relu(x); }},
        {"exp", a, [](const Tensor& x) { return exp(x); }},
        {"log", pos, [](const Tensor& x) { return log(x); }},
        {"sqrt", pos, [](const Tensor& x) { return sqrt(x); }},
        {"tanh", a, [](const Tensor& x) { return tanh(x); }},
        {"sigmoid", a, [](const Tensor& x) { return sigmoid(x); }},
        {"gelu", a, [](const Tensor& x) { return gelu(x); }},
        {"gelu tanh", a, [](const Tensor& x) { return gelu(x, "tanh"); }},
        {"pow(0.9, x)", a, [](const Tensor& x) { return pow(0.9, x); }},
    };
    for (const auto& [name, input, f] : unary) {
      expect_matches_cpu(
          {input}, [f = f](const auto& v) { return f(v[0]); }, name + " " + d, tol);
    }
    expect_matches_cpu(
        {pos}, [](const auto& v) { return pow(v[0], 1.7); }, "pow " + d, tol);
    expect_matches_cpu(
        {a}, [](const auto& v) { return pow(v[0], 2.0); }, "square " + d, tol);
  }
  const Tensor i = (randn({4, 3}) * 10.0).to(kInt64);
  const Tensor j = (randn({3}) * 10.0).to(kInt64);
  expect_matches_cpu(
      {i, j}, [](const auto& v) { return add(v[0], v[1]); }, "add int64", 0);
  expect_matches_cpu(
      {i, j}, [](const auto& v) { return mul(v[0], v[1]); }, "mul int64", 0);
  expect_matches_cpu(
      {i, j}, [](const auto& v) { return ge(v[0], v[1]); }, "ge int64", 0);
  // In place, fill, and accumulation into a destination whose elements share memory.
  const Tensor x = randn({4, 4});
  const Tensor xg = x.to(kGpu);
  xg.mul_(2.0).add_(1.0);
  CHECK(allclose(xg.to(kCPU), x * 2.0 + 1.0));
  xg.fill_(3.5);
  CHECK(equal(xg.to(kCPU), full({4, 4}, 3.5)));
  const Tensor acc = zeros({1}, TensorOptions().device(kGpu)).expand({1000});
  accumulate_into(acc, ones({1000}, TensorOptions().device(kGpu)));
  CHECK(acc.to(kCPU).to_vector<float>()[0] == 1000.0f);
}

TEST_CASE("CUDA: the caching allocator reuses freed blocks and empties its cache", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  cuda::synchronize();
  cuda::empty_cache();
  const auto before = cuda::allocator_stats();
  for (int k = 0; k < 20; ++k) {
    const Tensor t = empty({1 << 20}, TensorOptions().device(kGpu));  // 4 MiB, freed each time
    CHECK(t.is_cuda());
  }
  const auto after = cuda::allocator_stats();
  CHECK(after.requests - before.requests == 20);
  CHECK(after.cuda_malloc_calls - before.cuda_malloc_calls == 1);  // once, then reused
  CHECK(after.cache_hits - before.cache_hits == 19);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.peak_allocated_bytes >= (4u << 20));
  cuda::reset_peak_memory_stats();  // the peak starts again from the live blocks
  CHECK(cuda::allocator_stats().peak_allocated_bytes == cuda::allocator_stats().allocated_bytes);
  cuda::empty_cache();
  CHECK(cuda::allocator_stats().reserved_bytes < after.reserved_bytes);
}

TEST_CASE("CUDA: reductions, softmax and matmul match the CPU on random inputs", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const auto tol_of = [](DType d) { return d == kFloat64 ? 1e-10 : d == kFloat32 ? 1e-5 : 2e-2; };
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const std::string name = dtype_name(dtype);
    const double tol = tol_of(dtype);
    const Tensor x = randn({6, 300, 5}).to(dtype);  // 300: more than one block's threads
    using V = std::vector<Tensor>;
    expect_matches_cpu(
        {x}, [](const V& v) { return sum(v[0]); }, name + " sum()", tol * 10);
    expect_matches_cpu(
        {x}, [](const V& v) { return sum(v[0], {1}, false); }, name + " sum over the middle dim", tol);
    expect_matches_cpu(
        {x}, [](const V& v) { return sum(v[0], {0}, false); }, name + " sum over the leading dim (columns)", tol);
    expect_matches_cpu(
        {x},
        [](const V& v) {
          return sum(v[0], {0, 1}, true);
        },
        name + " sum over leading dims, keepdim", tol);
    expect_matches_cpu(
        {x}, [](const V& v) { return mean(v[0], {2}, false); }, name + " mean over the last dim", tol);
    expect_matches_cpu(
        {x.transpose(0, 2)}, [](const V& v) { return mean(v[0], {1}, true); }, name + " mean, strided", tol);
    expect_matches_cpu(
        {x}, [](const V& v) { return max(v[0]); }, name + " max()", 0);
    expect_matches_cpu(
        {x}, [](const V& v) { return std::get<0>(max(v[0], 1, false)); }, name + " max values", 0);
    expect_matches_cpu(
        {x}, [](const V& v) { return std::get<1>(max(v[0], 1, false)); }, name + " max indices", 0);
    expect_matches_cpu(
        {x}, [](const V& v) { return argmax(v[0]); }, name + " argmax()", 0);
    for (int64_t dim : {0, 1, 2}) {
      expect_matches_cpu(
          {x}, [dim](const V& v) { return softmax(v[0], dim); }, name + " softmax dim " + std::to_string(dim), tol);
      expect_matches_cpu(
          {x}, [dim](const V& v) { return log_softmax(v[0], dim); }, name + " log_softmax dim " + std::to_string(dim),
          tol);
    }
    const Tensor a = randn({33, 70}).to(dtype), b = randn({70, 45}).to(dtype);
    const double mm_tol = dtype == kFloat32 ? 1e-4 : tol * 5;  // TF32 is off by default
    expect_matches_cpu(
        {a, b}, [](const V& v) { return mm(v[0], v[1]); }, name + " mm", mm_tol);
    expect_matches_cpu(
        {a.t().contiguous(), b}, [](const V& v) { return mm(v[0].t(), v[1]); }, name + " mm, a transposed", mm_tol);
    expect_matches_cpu(
        {a, b.t().contiguous()}, [](const V& v) { return mm(v[0], v[1].t()); }, name + " mm, b transposed", mm_tol);
    expect_matches_cpu(
        {randn({4, 33, 70}).to(dtype), b}, [](const V& v) { return matmul(v[0], v[1]); }, name + " batched matmul",
        mm_tol);
    const Tensor w = randn({12, 70}).to(dtype), bias = randn({12}).to(dtype);
    expect_matches_cpu(
        {a, w, bias}, [](const V& v) { return linear(v[0], v[1], v[2]); }, name + " linear", mm_tol);
  }
  // Integers and bools: sums count in int64; NaN wins max as on the CPU.
  const Tensor ints = (randn({40, 9}) * 100.0).to(kInt64);
  expect_matches_cpu(
      {ints}, [](const std::vector<Tensor>& v) { return sum(v[0], {0}, false); }, "int64 sum", 0);
  expect_matches_cpu(
      {gt(ints, 0.0)}, [](const std::vector<Tensor>& v) { return sum(v[0]); }, "bool sum", 0);
  Tensor with_nan = randn({4, 600});
  with_nan.narrow(1, 450, 1).fill_(std::nan(""));
  expect_matches_cpu(
      {with_nan}, [](const std::vector<Tensor>& v) { return std::get<1>(max(v[0], 1, false)); }, "max index of NaN", 0);
  CHECK_THROWS_WITH(mm(ints.to(kGpu), ints.t().to(kGpu)),
                    Catch::Contains("matmul: not supported for dtype int64 on CUDA"));
}

TEST_CASE("CUDA: TF32 is off by default and can be enabled", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  CHECK_FALSE(cuda::allow_tf32());
  const Tensor a = randn({256, 256}), b = randn({256, 256});
  const Tensor want = mm(a.to(kFloat64), b.to(kFloat64));
  const double exact_error = max(abs(sub(mm(a.to(kGpu), b.to(kGpu)).to(kCPU).to(kFloat64), want))).item<double>();
  cuda::set_allow_tf32(true);
  const double tf32_error = max(abs(sub(mm(a.to(kGpu), b.to(kGpu)).to(kCPU).to(kFloat64), want))).item<double>();
  cuda::set_allow_tf32(false);
  CHECK(exact_error < 1e-3);
  CHECK(tf32_error > exact_error);  // 10-bit mantissas: visibly coarser on a 256-long dot product
}

TEST_CASE("CUDA: gradients of an MLP and its loss on the GPU equal the CPU's", "[cuda][autograd]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  // Every differentiable op kind on the way: linear, relu, tanh, sigmoid, softmax, log_softmax,
  // mul/div/sub with broadcasting, pow, sum/mean/max, matmul.
  const auto loss_of = [](const std::vector<Tensor>& p, const Tensor& x, const Tensor& targets) {
    const Tensor h = relu(linear(x, p[0], p[1]));
    const Tensor g = add(tanh(h), mul(sigmoid(h), p[2]));
    const Tensor logits = div(matmul(g, p[3]), add(pow(p[4], 2.0), 1.0));
    const Tensor extra = add(mean(softmax(logits, 0)), max(logits));
    return add(sum(mul(log_softmax(logits, 1), targets)), mul(extra, 0.1));
  };
  manual_seed(3);
  std::vector<Tensor> cpu_params{randn({16, 8}), randn({16}), randn({16}), randn({16, 5}), randn({5})};
  const Tensor x = randn({12, 8}), targets = softmax(randn({12, 5}), 1);
  std::vector<Tensor> gpu_params;
  for (Tensor& p : cpu_params) {
    gpu_params.push_back(p.to(kGpu).requires_grad_(true));
    p.requires_grad_(true);
  }
  loss_of(cpu_params, x, targets).backward();
  const Tensor gpu_loss = loss_of(gpu_params, x.to(kGpu), targets.to(kGpu));
  gpu_loss.backward();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(gpu_params[i].grad().defined());
    CHECK(gpu_params[i].grad().is_cuda());
    CHECK(allclose(gpu_params[i].grad().to(kCPU), cpu_params[i].grad(), 1e-4, 1e-5));
  }
}

TEST_CASE("CUDA: Module::to, SGD and Adam on the GPU follow the CPU", "[cuda][nn]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (const std::string optimizer : {"sgd", "adam"}) {
    INFO(optimizer);
    manual_seed(11);
    const auto cpu_model = tinyddp::nn::mlp({6, 10, 3});
    manual_seed(11);
    const auto gpu_model = tinyddp::nn::mlp({6, 10, 3});
    gpu_model->to(kGpu);
    for (const Tensor& p : gpu_model->parameters()) REQUIRE(p.device() == kGpu);
    const auto make = [&](const std::shared_ptr<tinyddp::nn::Module>& m) -> std::unique_ptr<tinyddp::nn::Optimizer> {
      if (optimizer == "sgd")
        return std::make_unique<tinyddp::nn::SGD>(m->parameters(), tinyddp::nn::SGDOptions(0.1).momentum(0.9));
      return std::make_unique<tinyddp::nn::Adam>(m->parameters(), tinyddp::nn::AdamOptions(0.01));
    };
    auto cpu_opt = make(cpu_model), gpu_opt = make(gpu_model);
    for (int step = 0; step < 5; ++step) {
      const Tensor x = randn({8, 6});
      const Tensor y = (rand({8}) * 3.0).to(kInt64);
      for (auto [model, opt, device] :
           {std::tuple{cpu_model, cpu_opt.get(), Device(kCPU)}, std::tuple{gpu_model, gpu_opt.get(), kGpu}}) {
        opt->zero_grad();
        tinyddp::nn::cross_entropy(model->forward(x.to(device)), y.to(device)).backward();
        opt->step();
      }
    }
    const auto cpu_state = cpu_model->parameters(), gpu_state = gpu_model->parameters();
    for (size_t i = 0; i < cpu_state.size(); ++i) CHECK(allclose(gpu_state[i].to(kCPU), cpu_state[i], 1e-4, 1e-5));
  }
}

TEST_CASE("CUDA: pinned host memory is reused only after its copies ran", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Tensor host = randn({1 << 20});
  CHECK_FALSE(host.is_pinned());
  const Tensor pinned = host.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK(pinned.is_cpu());
  CHECK(pinned.pin_memory().is_same(pinned));
  CHECK(equal(pinned, host));
  // Many host-to-device copies queued without waiting, each from a staging block that goes
  // back to the cache at once: every destination still gets its own source's values.
  std::vector<Tensor> sources, copies;
  for (int i = 0; i < 20; ++i) {
    sources.push_back(full({1 << 16}, static_cast<double>(i)));
    copies.push_back(sources.back().to(kGpu));
  }
  for (int i = 0; i < 20; ++i) CHECK(equal(copies[i].to(kCPU), sources[i]));
  CHECK_THROWS_WITH(ones({2}).to(kGpu).pin_memory(), Catch::Contains("only CPU tensors can be pinned"));
}

TEST_CASE("pin_memory without a GPU says why", "[cuda]") {
  if (cuda::is_available()) TINYDDP_SKIP("a CUDA device is present");
  CHECK_THROWS_WITH(ones({2}).pin_memory(), Catch::Contains("pin_memory: needs a GPU"));
  CHECK_FALSE(ones({2}).is_pinned());
}

// ---- stream ordering (GPU cases) ---------------------------------------------------------------

#if TINYDDP_WITH_CUDA
using namespace std::chrono_literals;
using tinyddp::testing::seconds_since;
using tinyddp::testing::StreamGate;
#endif

TEST_CASE("CUDA: a copy from memory the caller pinned has run when copy_ returns, unless non_blocking",
          "[cuda][streams]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
#if TINYDDP_WITH_CUDA
  const int64_t n = 1 << 22;
  const Tensor pinned = ones({n}).pin_memory();
  const Tensor gpu = zeros({n}, TensorOptions().device(kGpu));
  {
    StreamGate gate(cuda::compute_stream(0));
    std::thread opener = gate.open_after(300ms);
    const auto start = std::chrono::steady_clock::now();
    gpu.copy_(pinned);  // must wait for the gated stream, then for the copy
    CHECK(seconds_since(start) > 0.2);
    pinned.fill_(2.0);  // the caller's memory is theirs again: the GPU keeps the ones
    opener.join();
  }
  CHECK(sum(gpu).item<double>() == static_cast<double>(n));
  {
    StreamGate gate(cuda::compute_stream(0));
    const auto start = std::chrono::steady_clock::now();
    gpu.copy_(pinned, /*non_blocking=*/true);  // queued behind the gate; returns at once
    CHECK(seconds_since(start) < 0.2);
    gate.open();
    cuda::synchronize();
  }
  CHECK(sum(gpu).item<double>() == 2.0 * static_cast<double>(n));
  // A pageable source is staged through the allocator's pinned block: no wait, source free at once.
  const Tensor pageable = full({n}, 3.0);
  {
    StreamGate gate(cuda::compute_stream(0));
    const auto start = std::chrono::steady_clock::now();
    gpu.copy_(pageable);
    CHECK(seconds_since(start) < 0.2);
    pageable.fill_(4.0);
  }
  CHECK(sum(gpu).item<double>() == 3.0 * static_cast<double>(n));
  // Device to pinned host memory, non_blocking: queued; the values are there after a sync.
  const Tensor back = empty({n}).pin_memory();
  back.copy_(gpu, /*non_blocking=*/true);
  cuda::synchronize();
  CHECK(sum(back).item<double>() == 3.0 * static_cast<double>(n));
  CHECK(gpu.to(kCPU, /*non_blocking=*/true).is_pinned());
#endif
}

TEST_CASE("CUDA: a copy between two GPUs is ordered on both devices' streams", "[cuda][streams]") {
  if (cuda::device_count() < 2) TINYDDP_SKIP("needs two CUDA devices, found " << cuda::device_count());
#if TINYDDP_WITH_CUDA
  const int64_t n = 1 << 22;
  const Device second = Device::cuda(1);
  const Tensor src = ones({n}, TensorOptions().device(kGpu));
  const Tensor dst = zeros({n}, TensorOptions().device(second));
  const Tensor strided = ones({n, 2}, TensorOptions().device(kGpu)).select(1, 0);  // through a temporary
  const Tensor dst2 = zeros({n}, TensorOptions().device(second));
  {
    StreamGate gate(cuda::compute_stream(1));  // the copy waits on device 1
    dst.copy_(src);
    dst2.copy_(strided);
    src.fill_(5.0);  // device 0's stream must wait for the copy before this kernel writes src
    for (int i = 0; i < 4; ++i) (void)full({n}, 7.0, TensorOptions().device(kGpu));  // reuse the temporary's block
  }
  CHECK(sum(dst).item<double>() == static_cast<double>(n));
  CHECK(sum(dst2).item<double>() == static_cast<double>(n));
#endif
}

TEST_CASE("CUDA: empty_cache waits for busy blocks without holding the allocator", "[cuda][streams]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
#if TINYDDP_WITH_CUDA
  const cudaStream_t side = cuda::acquire_stream(0);
  {
    StreamGate gate(side);  // a collective that does not end, as far as the allocator knows
    {
      const Tensor busy = empty({1 << 20}, TensorOptions().device(kGpu));
      cuda::record_stream(busy.raw_data_ptr(), 0, side);
    }  // freed: pending until the side stream passes the gate
    auto emptied = std::async(std::launch::async, [] { cuda::empty_cache(); });
    std::this_thread::sleep_for(100ms);
    CHECK(emptied.wait_for(0ms) == std::future_status::timeout);  // it waits for the block...
    // ...while allocations and frees on the device go on.
    auto allocated = std::async(std::launch::async, [] {
      for (int i = 0; i < 10; ++i) (void)empty({1 << 10}, TensorOptions().device(kGpu));
    });
    CHECK(allocated.wait_for(5s) == std::future_status::ready);
    gate.open();
    CHECK(emptied.wait_for(20s) == std::future_status::ready);
  }
  cuda::release_stream(0, side);
#endif
}
