// Autocast on a GPU (Autocast(kCUDA, bfloat16 or float16): cuBLAS products and cuDNN
// convolutions in 16 bits with float32 sums) against the CPU's autocast run on the same values,
// which tests/tensor/autocast_test.cc checks against PyTorch: the same output dtypes, values
// within one 16-bit step (each side sums in float32 in its own order and rounds once), the
// float32 leaves' gradients float32 and within the same bound. And float16 training with a
// GradScaler on the GPU. Every GPU case skips, saying why, without a GPU (and in a build
// without CUDA).
#include <cmath>
#include <functional>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/grad_scaler.h"
#include "tinyddp/nn/layers.h"
#include "tinyddp/nn/loss.h"
#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp::tensor;

namespace {

const Device kGpu = Device::cuda(0);

using Body = std::function<Tensor(const std::vector<Tensor>&)>;

// Within one step of `dtype` (bfloat16: 2^-7, float16: 2^-10) relative, plus one step of the
// reference's largest magnitude per `steps` (rounded terms a later sum cancels).
bool within_step(const Tensor& got, const Tensor& want, DType dtype, double steps) {
  const double step = dtype == kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
  const Tensor reference = want.to(kCPU).to(kFloat64);  // float16's reference is the GPU's float32 run
  const double scale = max(abs(reference)).item<double>();
  return allclose(got.to(kCPU).to(kFloat64), reference, steps * step, steps * step * scale);
}

// Runs `body` under autocast to `dtype` on CPU leaves and on their GPU copies (the CPU in
// bfloat16, the only CPU autocast dtype: for float16 on the GPU the reference is the GPU's
// float32 run within float16's step); backward outside the scope from the same upstream
// gradient; compares outputs and gradients.
void check_case(const std::string& name, DType dtype, const std::vector<Tensor>& inputs, const Body& body,
                double steps = 1) {
  INFO("case " << name << ", " << dtype_name(dtype));
  std::vector<Tensor> ref, gpu;
  for (const Tensor& t : inputs) {
    ref.push_back(t.detach().to(dtype == kBFloat16 ? kCPU : kGpu).requires_grad_());
    gpu.push_back(t.detach().to(kGpu).requires_grad_());
  }
  Tensor ref_out, gpu_out;
  if (dtype == kBFloat16) {
    const Autocast autocast(DeviceType::kCPU);
    ref_out = body(ref);
  } else {
    ref_out = body(ref);  // float32 on the GPU
  }
  {
    const Autocast autocast(DeviceType::kCUDA, dtype);
    gpu_out = body(gpu);
  }
  REQUIRE(gpu_out.is_cuda());
  if (dtype == kBFloat16) CHECK(gpu_out.dtype() == ref_out.dtype());
  CHECK(within_step(gpu_out, ref_out, dtype, steps));
  Generator gen(2);
  const Tensor upstream = randn(gpu_out.sizes(), {}, &gen).to(gpu_out.dtype());
  ref_out.backward(upstream.to(ref_out.dtype()).to(ref_out.device()));
  gpu_out.backward(upstream.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(gpu[i].grad().defined());
    CHECK(gpu[i].grad().dtype() == kFloat32);  // the float32 leaf's gradient comes back float32
    CHECK(within_step(gpu[i].grad(), ref[i].grad().to(kCPU), dtype, steps));
  }
}

}  // namespace

TEST_CASE("CUDA autocast: products, attention, convolution and a loss against the CPU's", "[cuda][autocast]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  Generator gen(5);
  // Values that float16 holds exactly (so that float16's reference, the float32 run, sees the
  // same inputs).
  const auto r = [&](const Shape& s) { return randn(s, {}, &gen).to(kFloat16).to(kFloat32); };
  for (const DType dtype : {kBFloat16, kFloat16}) {
    check_case("linear", dtype, {r({16, 40}), r({24, 40}), r({24})},
               [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); });
    check_case("conv2d", dtype, {r({2, 3, 8, 8}), r({8, 3, 3, 3}), r({8})},
               [](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], 1, 1); });
  }
  // bfloat16 only (the CPU's reference rounds where the GPU does): q @ k^T and att @ v on
  // [batch, heads] views with the causal softmax between, and an MLP's loss.
  check_case(
      "attention", kBFloat16, {r({2, 9, 3, 2, 8})},
      [](const std::vector<Tensor>& t) {
        const auto part = [&](int64_t i) { return t[0].select(2, i).transpose(1, 2); };
        const Tensor att = causal_softmax(matmul(part(0), part(1).transpose(-2, -1)), 1.0 / std::sqrt(8.0));
        return matmul(att, part(2));
      },
      4);
  std::vector<int64_t> classes(32);
  for (size_t i = 0; i < classes.size(); ++i) classes[i] = static_cast<int64_t>(i * 7 % 10);
  const Tensor targets = from_vector<int64_t>(classes, Shape{32});
  check_case(
      "MLP with cross-entropy", kBFloat16, {r({32, 20}), mul(r({64, 20}), 0.2), mul(r({10, 64}), 0.1)},
      [&](const std::vector<Tensor>& t) {
        return tinyddp::nn::cross_entropy(linear(relu(linear(t[0], t[1])), t[2]), targets.to(t[0].device()));
      },
      2);
}

TEST_CASE("CUDA float16 autocast with a GradScaler: clean steps step, an inf skips and backs off", "[cuda][autocast]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  manual_seed(8);
  const auto model = tinyddp::nn::mlp({20, 64, 10});
  model->to(Device::cuda(0));
  tinyddp::nn::SGD opt(model->parameters(), tinyddp::nn::SGDOptions(0.1));
  tinyddp::nn::GradScaler scaler(tinyddp::nn::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 3});
  Generator gen(9);
  const Tensor x = randn({32, 20}, {}, &gen).to(Device::cuda(0));
  const Tensor y = randn({32, 10}, {}, &gen).to(Device::cuda(0));
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step) {
    INFO("step " << step);
    opt.zero_grad();
    Tensor loss;
    {
      Autocast autocast(DeviceType::kCUDA, kFloat16);
      loss = tinyddp::nn::mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    if (step == 4) model->parameters()[0].grad().narrow(0, 0, 1).fill_(INFINITY);
    const Tensor before = model->parameters()[0].detach().to(kCPU);
    CHECK(scaler.step(opt) == (step != 4));
    CHECK(equal(model->parameters()[0].detach().to(kCPU), before) == (step == 4));
    scaler.update();
    losses.push_back(loss.to(kFloat32).item<double>());
    CHECK(std::isfinite(losses.back()));
  }
  CHECK(scaler.get_scale() == 2048.0);  // grown after steps 0-2, halved at 4, 5-7 clean: grown again
  CHECK(losses.back() < losses.front());
}
