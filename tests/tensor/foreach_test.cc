// foreach_norm and foreach_mul_ (tensor/fused.h): against each tensor's own norm and product,
// their errors, and (with a GPU) the list kernels of backends/cuda/optim.cu against the CPU in
// every floating dtype, over more tensors than one launch takes and one longer than a chunk;
// clip_grad_norm_, which uses them, on the GPU against the CPU.
#include <cmath>

#include "tests/test_util.h"
#include "tinyddp/nn/clip_grad.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {

// 45 tensors: the first of 70,000 elements (past a GPU block's chunk of 65,536), the rest small.
std::vector<Tensor> draw_list(DType dtype, const Device& device) {
  std::vector<Tensor> list;
  for (int i = 0; i < 45; ++i) {
    list.push_back(randn(i == 0 ? Shape{700, 100} : Shape{3 + i % 5, 4}).to(dtype).to(device));
  }
  return list;
}

std::vector<Tensor> to_cpu64(const std::vector<Tensor>& list) {
  std::vector<Tensor> out;
  for (const Tensor& t : list) out.push_back(t.to(kCPU).to(kFloat64));
  return out;
}

}  // namespace

TEST_CASE("foreach_norm is each tensor's 2-norm, foreach_mul_ each tensor's product", "[foreach]") {
  manual_seed(1);
  for (const DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    INFO(dtype_name(dtype));
    const std::vector<Tensor> list = draw_list(dtype, kCPU);
    const Tensor norms = foreach_norm(list);
    REQUIRE(norms.sizes() == Shape{45});
    CHECK(norms.dtype() == dtype);
    for (size_t i = 0; i < list.size(); i += 11) {
      const Tensor wide = list[i].to(kFloat64);
      CHECK(allclose(norms[i].to(kFloat64), sqrt(sum(mul(wide, wide))), dtype == kBFloat16 ? 8e-3 : 1e-6, 0.0));
    }
    std::vector<Tensor> copies;
    for (const Tensor& t : list) copies.push_back(t.clone());
    const Tensor scale = full({}, 0.37, TensorOptions(kFloat32));
    foreach_mul_(copies, scale);
    for (size_t i = 0; i < list.size(); ++i) CHECK(equal(copies[i], mul(list[i], scale.to(dtype))));
  }
}

TEST_CASE("foreach_norm and foreach_mul_ refuse mixed, integer and undefined tensors", "[foreach]") {
  const Tensor a = ones({3}), b = ones({3}, TensorOptions(kFloat64));
  CHECK_THROWS_WITH(foreach_norm({a, b}), Contains("one dtype and device, tensor 1 is float64"));
  CHECK_THROWS_WITH(foreach_norm({ones({2}, TensorOptions(kInt64))}), Contains("floating-point tensors"));
  CHECK_THROWS_WITH(foreach_norm({a, Tensor()}), Contains("tensor 1 is undefined"));
  CHECK_THROWS_WITH(foreach_norm({}), Contains("at least one tensor"));
  CHECK_THROWS_WITH(foreach_mul_({a}, ones({2})), Contains("one-element scale"));
  foreach_mul_({}, ones({1}));  // nothing to scale
}

TEST_CASE("CUDA: foreach_norm and foreach_mul_ equal the CPU's over a list of many tensors", "[foreach][cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  const Device gpu = Device::cuda(0);
  manual_seed(2);
  // float32: sums of up to 70,000 squares in a float per thread and a tree; 16-bit: the result's rounding.
  for (const auto& [dtype, tol] :
       {std::pair<DType, double>{kFloat32, 1e-5}, {kFloat64, 1e-12}, {kBFloat16, 8e-3}, {kFloat16, 1e-3}}) {
    INFO(dtype_name(dtype));
    const std::vector<Tensor> list = draw_list(dtype, gpu);
    const Tensor norms = foreach_norm(list);
    REQUIRE(norms.is_cuda());
    CHECK(allclose(norms.to(kCPU).to(kFloat64), foreach_norm(to_cpu64(list)), tol, 0.0));
    CHECK(equal(foreach_norm(list), norms));  // no atomics: the same bits every run
    std::vector<Tensor> copies;
    for (const Tensor& t : list) copies.push_back(t.clone());
    const Tensor scale = full({}, 0.37, TensorOptions(kFloat32).device(gpu));
    foreach_mul_(copies, scale);
    for (size_t i = 0; i < list.size(); ++i) CHECK(equal(copies[i], mul(list[i], scale.to(dtype))));
  }
  // clip_grad_norm_ on the GPU (the list ops) against the CPU (composed).
  std::vector<Tensor> dev, host;
  for (const Tensor& g : draw_list(kFloat32, kCPU)) {
    dev.push_back(zeros(g.sizes(), TensorOptions().device(gpu)).requires_grad_());
    dev.back().mutable_grad() = g.to(gpu);
    host.push_back(zeros(g.sizes()).requires_grad_());
    host.back().mutable_grad() = g.clone();
  }
  const Tensor total = tinyddp::nn::clip_grad_norm_(dev, 1.0), ref = tinyddp::nn::clip_grad_norm_(host, 1.0);
  CHECK(allclose(total.to(kCPU), ref, 1e-5, 0.0));
  for (size_t i = 0; i < dev.size(); i += 11) CHECK(allclose(dev[i].grad().to(kCPU), host[i].grad(), 1e-5, 1e-7));
}
