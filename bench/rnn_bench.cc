// Recurrent layer benchmarks (Google Benchmark): an LSTM and a GRU forward + backward (the
// input's and every weight's gradients, as a training step computes them), batch_first, at the
// char-LSTM example's default shape (2 layers, 64 steps, batch 32, 32 -> 128) and a wider one
// (1 layer, 32 steps, batch 16, 256 -> 256); and the same over a packed batch whose lengths
// fall evenly from T to about T/2 (packing and unpacking included, as a training step has them).
// Build with -c opt; bench/torch_rnn_bench.py times the same in PyTorch.
#include <array>
#include <vector>

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
// The same step over a packed batch: the lengths fall from `steps` by steps / (2 * batch) a sequence.
template <class Layer>
void packed_step(benchmark::State& state) {
  const int64_t layers = state.range(0), steps = state.range(1), batch = state.range(2), in = state.range(3),
                hidden = state.range(4);
  t::manual_seed(0);
  Layer layer(in, hidden, layers, true, /*batch_first=*/true);
  t::Generator g(1);
  const t::Tensor x = t::randn({batch, steps, in}, {}, &g).requires_grad_();
  const t::Tensor grad = t::randn({batch, steps, hidden}, {}, &g);
  std::vector<int64_t> lengths;
  for (int64_t k = 0; k < batch; ++k) lengths.push_back(steps - k * steps / (2 * batch));
  for (auto _ : state) {
    const auto out = std::get<0>(layer.forward(nn::pack_padded_sequence(x, lengths, /*batch_first=*/true)));
    const t::Tensor y = std::get<0>(nn::pad_packed_sequence(out, /*batch_first=*/true));
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
// An LSTM with proj_size (the fifth argument, P) over T steps, batch 32, 32 -> 128: its backward
// is O(T) as one node (before it, composed of per-step ops, O(T^2) in the input's gradient).
void BM_LSTM_proj(benchmark::State& state) {
  const int64_t steps = state.range(0), batch = 32, in = 32, hidden = 128, proj = state.range(1);
  t::manual_seed(0);
  nn::LSTM layer(nn::LSTMOptions(in, hidden).batch_first(true).proj_size(proj));
  t::Generator g(1);
  const t::Tensor x = t::randn({batch, steps, in}, {}, &g).requires_grad_();
  const t::Tensor grad = t::randn({batch, steps, proj}, {}, &g);
  for (auto _ : state) {
    const t::Tensor y = layer.forward(x);
    y.backward(grad);
    x.mutable_grad() = t::Tensor();
    layer.zero_grad();
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
}
BENCHMARK(BM_LSTM_proj)->ArgNames({"steps", "proj"})->Args({64, 64})->Args({256, 64})->Unit(benchmark::kMillisecond);

void BM_LSTM_packed(benchmark::State& state) { packed_step<nn::LSTM>(state); }
BENCHMARK(BM_LSTM_packed)->Apply(shapes);
void BM_GRU_packed(benchmark::State& state) { packed_step<nn::GRU>(state); }
BENCHMARK(BM_GRU_packed)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "rnn_bench"); }
