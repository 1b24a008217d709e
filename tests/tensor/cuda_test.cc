// CUDA availability tests: the device query agrees with itself in every build, and where a
// GPU is present a kernel really runs on it. Skips (with a reason) without a device.
#include <functional>

#include "tests/test_util.h"

using namespace tinyddp::tensor;

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

// `op` on the GPU copies of `inputs` equals `op` on the CPU tensors (within `tol`, relative).
void expect_matches_cpu(const std::vector<Tensor>& inputs, const std::function<Tensor(const std::vector<Tensor>&)>& op,
                        const std::string& what, double tol) {
  std::vector<Tensor> on_gpu;
  for (const Tensor& t : inputs) on_gpu.push_back(t.to(kGpu));
  const Tensor want = op(inputs);
  const Tensor got = op(on_gpu);
  INFO(what);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  CHECK(allclose(got.to(kCPU), want, tol, tol, /*equal_nan=*/true));
}

}  // namespace

TEST_CASE("without a GPU, creating a CUDA tensor fails naming the device and the reason", "[cuda]") {
  if (cuda::is_available()) TINYDDP_SKIP("a CUDA device is present");
  CHECK_THROWS_WITH(empty({2, 3}, TensorOptions().device(kGpu)),
                    Catch::Contains("cannot allocate a tensor on cuda:0") && Catch::Contains(cuda::unavailable_reason()));
  CHECK_THROWS_WITH(ones({2}).to(kGpu), Catch::Contains("cuda:0"));
  CHECK(cuda::allocator_stats().requests == 0);
  cuda::empty_cache();  // harmless
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
    CHECK(equal(host.t().to(kGpu).to(kCPU), host.t().contiguous()));            // strided source
    CHECK(equal(dev.t().contiguous().to(kCPU), host.t().contiguous()));          // strided on the GPU
    const Tensor wide = zeros({3, 5, 7}, TensorOptions().dtype(dtype).device(kGpu));
    wide.copy_(host);                                                            // broadcast on the GPU
    CHECK(equal(wide.to(kCPU), host.expand({3, 5, 7}).contiguous()));
    const Tensor converted = zeros({5, 7}, TensorOptions().dtype(kFloat64).device(kGpu));
    converted.copy_(dev);                                                        // dtype conversion on the GPU
    CHECK(equal(converted.to(kCPU), host.to(kFloat64)));
    const Tensor back = zeros({5, 7}, dtype);
    back.copy_(dev);                                                             // device to host, in place
    CHECK(equal(back, host));
  }
}

TEST_CASE("CUDA: elementwise ops match the CPU on random inputs, broadcast and strided", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const double tol = dtype == kBFloat16 ? 1e-2 : dtype == kFloat16 ? 2e-3 : dtype == kFloat32 ? 1e-5 : 1e-12;
    const Tensor a = randn({6, 5}).to(dtype);
    const Tensor b = randn({5}).to(dtype);            // broadcast over rows
    const Tensor c = randn({5, 6}).to(dtype).t();     // strided
    const Tensor pos = (rand({6, 5}) + 0.1).to(dtype);
    const std::string d = dtype_name(dtype);
    expect_matches_cpu({a, b}, [](const auto& v) { return add(v[0], v[1], 0.5); }, "add alpha " + d, tol);
    expect_matches_cpu({a, c}, [](const auto& v) { return mul(v[0], v[1]); }, "mul strided " + d, tol);
    expect_matches_cpu({a, pos}, [](const auto& v) { return div(v[0], v[1]); }, "div " + d, tol);
    expect_matches_cpu({a, b}, [](const auto& v) { return maximum(v[0], v[1]); }, "maximum " + d, tol);
    expect_matches_cpu({a, c}, [](const auto& v) { return minimum(v[0], v[1]); }, "minimum " + d, tol);
    expect_matches_cpu({a, b}, [](const auto& v) { return lt(v[0], v[1]); }, "lt " + d, 0);
    expect_matches_cpu({a, c}, [](const auto& v) { return eq(v[0], v[1]); }, "eq " + d, 0);
    expect_matches_cpu({a}, [](const auto& v) { return neg(v[0]); }, "neg " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return abs(v[0]); }, "abs " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return relu(v[0]); }, "relu " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return exp(v[0]); }, "exp " + d, tol);
    expect_matches_cpu({pos}, [](const auto& v) { return log(v[0]); }, "log " + d, tol);
    expect_matches_cpu({pos}, [](const auto& v) { return sqrt(v[0]); }, "sqrt " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return tanh(v[0]); }, "tanh " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return sigmoid(v[0]); }, "sigmoid " + d, tol);
    expect_matches_cpu({pos}, [](const auto& v) { return pow(v[0], 1.7); }, "pow " + d, tol);
    expect_matches_cpu({a}, [](const auto& v) { return pow(v[0], 2.0); }, "square " + d, tol);
  }
  const Tensor i = (randn({4, 3}) * 10.0).to(kInt64);
  const Tensor j = (randn({3}) * 10.0).to(kInt64);
  expect_matches_cpu({i, j}, [](const auto& v) { return add(v[0], v[1]); }, "add int64", 0);
  expect_matches_cpu({i, j}, [](const auto& v) { return mul(v[0], v[1]); }, "mul int64", 0);
  expect_matches_cpu({i, j}, [](const auto& v) { return ge(v[0], v[1]); }, "ge int64", 0);
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
  cuda::empty_cache();
  CHECK(cuda::allocator_stats().reserved_bytes < after.reserved_bytes);
}
