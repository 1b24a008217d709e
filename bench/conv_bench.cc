// Convolution benchmarks (Google Benchmark): conv2d forward, and forward + backward (the input's
// and the weight's gradients, as a training step computes them), 3x3 kernels with padding 1,
// at the digits CNN's two layers (batch 64 of 1x8x8 and 16x4x4) and a larger layer (batch 64,
// 32 -> 64 channels, 32x32). Build with -c opt; `python3 bench/compare.py conv` runs this
// beside PyTorch (bench/torch_conv_bench.py).
#include "bench/bench_main.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

namespace {

// Arguments: batch, in channels, out channels, image size, which (0 forward, 1 forward + backward).
void BM_Conv2d(benchmark::State& state) {
  const int64_t batch = state.range(0), in = state.range(1), out = state.range(2), size = state.range(3);
  const bool backward = state.range(4) == 1;
  t::Generator g(0);
  const t::Tensor x = t::randn({batch, in, size, size}, {}, &g).requires_grad_(backward);
  const t::Tensor w = t::randn({out, in, 3, 3}, {}, &g).requires_grad_(backward);
  const t::Tensor b = t::randn({out}, {}, &g).requires_grad_(backward);
  const t::Tensor grad = t::randn({batch, out, size, size}, {}, &g);
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
BENCHMARK(BM_Conv2d)
    ->ArgNames({"batch", "in", "out", "size", "which"})
    ->Args({64, 1, 16, 8, 0})
    ->Args({64, 1, 16, 8, 1})
    ->Args({64, 16, 32, 4, 0})
    ->Args({64, 16, 32, 4, 1})
    ->Args({64, 32, 64, 32, 0})
    ->Args({64, 32, 64, 32, 1})
    ->Unit(benchmark::kMillisecond);

// max_pool2d(2) forward + backward at the digits CNN's first pooling layer: [64, 16, 8, 8].
void BM_MaxPool2d(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({64, 16, 8, 8}, {}, &g).requires_grad_();
  const t::Tensor grad = t::randn({64, 16, 4, 4}, {}, &g);
  for (auto _ : state) {
    const t::Tensor y = t::max_pool2d(x, 2);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_MaxPool2d)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "conv_bench"); }
