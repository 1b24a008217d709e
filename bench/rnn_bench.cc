// Recurrent layer benchmarks (Google Benchmark): an LSTM and a GRU forward + backward (the
// input's and every weight's gradients, as a training step computes them), batch_first, at the
// char-LSTM example's default shape (2 layers, 64 steps, batch 32, 32 -> 128) and a wider one
// (1 layer, 32 steps, batch 16, 256 -> 256). Build with -c opt; bench/torch_rnn_bench.py times
// the same in PyTorch.
#include <array>

#include "bench/bench_main.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/nn/rnn.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;

namespace {

// Arguments: layers, steps, batch, input size, hidden size.
template <class Layer>
void recurrent_step(benchmark::State& state) {
  const int64_t layers = state.range(0), steps = state.range(1), batch = state.range(2), in = state.range(3),
                hidden = state.range(4);
  t::manual_seed(0);
  Layer layer(in, hidden, layers, true, /*batch_first=*/true);
  t::Generator g(1);
  const t::Tensor x = t::randn({batch, steps, in}, {}, &g).requires_grad_();
  const t::Tensor grad = t::randn({batch, steps, hidden}, {}, &g);
  for (auto _ : state) {
    const t::Tensor y = layer.forward(x);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    layer.zero_grad();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layers", "steps", "batch", "in", "hidden"});
  b->Args({2, 64, 32, 32, 128});
  b->Args({1, 32, 16, 256, 256});
  b->Unit(benchmark::kMillisecond);
}
void BM_LSTM(benchmark::State& state) { recurrent_step<nn::LSTM>(state); }
BENCHMARK(BM_LSTM)->Apply(shapes);
void BM_GRU(benchmark::State& state) { recurrent_step<nn::GRU>(state); }
BENCHMARK(BM_GRU)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "rnn_bench"); }
