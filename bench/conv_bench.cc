// Convolution benchmarks (Google Benchmark): conv2d forward, and forward + backward (the input's
// and the weight's gradients, as a training step computes them), 3x3 kernels with padding 1,
// at the digits CNN's two layers (batch 64 of 1x8x8 and 16x4x4) and a larger layer (batch 64,
// 32 -> 64 channels, 32x32), in float32 (BM_Conv2d) and bfloat16 (BM_Conv2dBf16: oneDNN's
// bfloat16 convolution under AVX-512). Build with -c opt; `python3 bench/compare.py conv` runs
// this beside PyTorch (bench/torch_conv_bench.py).
#include <array>

#include "bench/bench_main.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

namespace {

// Arguments: batch, in channels, out channels, image size, which (0 forward, 1 forward + backward).
void conv2d_in(benchmark::State& state, t::DType dtype) {
  const int64_t batch = state.range(0), in = state.range(1), out = state.range(2), size = state.range(3);
  const bool backward = state.range(4) == 1;
  t::Generator g(0);
  const t::Tensor x = t::randn({batch, in, size, size}, {}, &g).to(dtype).requires_grad_(backward);
  const t::Tensor w = t::randn({out, in, 3, 3}, {}, &g).to(dtype).requires_grad_(backward);
  const t::Tensor b = t::randn({out}, {}, &g).to(dtype).requires_grad_(backward);
  const t::Tensor grad = t::randn({batch, out, size, size}, {}, &g).to(dtype);
  for (auto _ : state) {
    const t::Tensor y = t::conv2d(x, w, b, 1, 1);
    if (backward) {
      y.backward(grad);
      x.mutable_grad() = t::Tensor();
      w.mutable_grad() = t::Tensor();
      b.mutable_grad() = t::Tensor();
    }
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
  const double flops = 2.0 * batch * out * size * size * in * 9 * (backward ? 3 : 1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "in", "out", "size", "which"});
  for (const auto& [in, out, size] : {std::array<int64_t, 3>{1, 16, 8}, {16, 32, 4}, {32, 64, 32}}) {
    for (const int64_t which : {0, 1}) b->Args({64, in, out, size, which});
  }
  b->Unit(benchmark::kMillisecond);
}
void BM_Conv2d(benchmark::State& state) { conv2d_in(state, t::kFloat32); }
BENCHMARK(BM_Conv2d)->Apply(conv_shapes);
void BM_Conv2dBf16(benchmark::State& state) { conv2d_in(state, t::kBFloat16); }
BENCHMARK(BM_Conv2dBf16)->Apply(conv_shapes);

// max_pool2d(2) forward + backward at the digits CNN's first pooling layer: [64, 16, 8, 8], in
// float32 and (autocast's activations) bfloat16; and at its second, [64, 32, 4, 4], channels-last
// (as oneDNN's convolutions leave a map).
void max_pool2d_in(benchmark::State& state, t::DType dtype, bool channels_last = false) {
  t::Generator g(0);
  const t::Shape shape = channels_last ? t::Shape{64, 32, 4, 4} : t::Shape{64, 16, 8, 8};
  t::Tensor x = t::randn(shape, {}, &g).to(dtype);
  if (channels_last) x = x.contiguous(t::MemoryFormat::kChannelsLast);
  x.requires_grad_();
  const t::Tensor grad = t::randn({shape[0], shape[1], shape[2] / 2, shape[3] / 2}, {}, &g).to(dtype);
  for (auto _ : state) {
    const t::Tensor y = t::max_pool2d(x, 2);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
void BM_MaxPool2d(benchmark::State& state) { max_pool2d_in(state, t::kFloat32); }
BENCHMARK(BM_MaxPool2d)->Unit(benchmark::kMicrosecond);
void BM_MaxPool2dBf16(benchmark::State& state) { max_pool2d_in(state, t::kBFloat16); }
BENCHMARK(BM_MaxPool2dBf16)->Unit(benchmark::kMicrosecond);
void BM_MaxPool2dChannelsLast(benchmark::State& state) { max_pool2d_in(state, t::kFloat32, true); }
BENCHMARK(BM_MaxPool2dChannelsLast)->Unit(benchmark::kMicrosecond);
void BM_MaxPool2dChannelsLastBf16(benchmark::State& state) { max_pool2d_in(state, t::kBFloat16, true); }
BENCHMARK(BM_MaxPool2dChannelsLastBf16)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "conv_bench"); }
