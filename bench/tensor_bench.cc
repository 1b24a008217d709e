// Tensor benchmarks (Google Benchmark): float32 and bfloat16 matmul at 256/512/1024 and at the
// GEMM shapes of the MLP 784-1024-1024-10 training step (batch 128), elementwise adds of 16 M
// floats and the memcpy they are measured against, an add and a relu on channels-last tensors,
// x[rows, cols], an in-place op on a view with its backward, and batch_norm's backward sums at
// the digits CNN's shapes. Build with -c opt;
// bench/compare.py runs this beside PyTorch (bench/torch_indexing.py the last two).
#include "bench/bench_main.h"

#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "tinyddp/tensor/all.h"
#include "tinyddp/tensor/cpu_isa.h"

namespace t = tinyddp::tensor;

namespace {

enum class Transposed { kNone, kA, kB };

// c = a @ b for n x n float32 operands; a or b is a transposed view when `transposed` says so.
void run_matmul(benchmark::State& state, Transposed transposed) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = transposed == Transposed::kA ? t::randn({n, n}, {}, &g).t() : t::randn({n, n}, {}, &g);
  const t::Tensor b = transposed == Transposed::kB ? t::randn({n, n}, {}, &g).t() : t::randn({n, n}, {}, &g);
  for (auto _ : state) {
    t::Tensor c = t::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_Matmul(benchmark::State& state) { run_matmul(state, Transposed::kNone); }
BENCHMARK(BM_Matmul)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

// x @ W^T, the Linear layer's product: the transposed view is used in place.
void BM_MatmulTransposedB(benchmark::State& state) { run_matmul(state, Transposed::kB); }
BENCHMARK(BM_MatmulTransposedB)->Arg(1024)->Unit(benchmark::kMillisecond);

// a^T @ b, the weight gradient's product at a square size: the left operand read transposed.
void BM_MatmulTransposedA(benchmark::State& state) { run_matmul(state, Transposed::kA); }
BENCHMARK(BM_MatmulTransposedA)->Arg(1024)->Unit(benchmark::kMillisecond);

// The same products in bfloat16 (autocast's matmuls): oneDNN under AVX-512, float32 kernels
// below (bench/README.md).
void BM_MatmulBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n, n}, {}, &g).to(t::kBFloat16), b = t::randn({n, n}, {}, &g).to(t::kBFloat16);
  for (auto _ : state) {
    t::Tensor c = t::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetLabel(t::cpu_bf16_matmul_engine(n, n, n));
}
BENCHMARK(BM_MatmulBf16)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

// The MLP step's GEMMs, as Linear and autograd issue them. Forward: x [128, in] @ W^T with W
// [out, in]. Backward: grad_x = g [128, out] @ W, grad_W = g^T @ x (a transposed view).
// Arguments: batch, in, out, which (0 forward, 1 grad_x, 2 grad_W).
void run_mlp_gemm(benchmark::State& state, t::DType dtype) {
  const int64_t batch = state.range(0), in = state.range(1), out = state.range(2), which = state.range(3);
  t::Generator g(0);
  const t::Tensor x = t::randn({batch, in}, {}, &g).to(dtype);
  const t::Tensor w = t::randn({out, in}, {}, &g).to(dtype);
  const t::Tensor grad = t::randn({batch, out}, {}, &g).to(dtype);
  for (auto _ : state) {
    t::Tensor c = which == 0 ? t::matmul(x, w.t()) : which == 1 ? t::matmul(grad, w) : t::matmul(grad.t(), x);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * batch * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  if (dtype == t::kBFloat16) state.SetLabel(t::cpu_bf16_matmul_engine(batch, in, out));
}
void BM_MlpGemm(benchmark::State& state) { run_mlp_gemm(state, t::kFloat32); }
void BM_MlpGemmBf16(benchmark::State& state) { run_mlp_gemm(state, t::kBFloat16); }
// Registers `shapes` ({batch, in, out, which} each) with their argument names.
void linear_shapes(benchmark::internal::Benchmark* b, const std::vector<std::vector<int64_t>>& shapes) {
  b->ArgNames({"batch", "in", "out", "which"});
  for (const std::vector<int64_t>& shape : shapes) b->Args(shape);
  b->Unit(benchmark::kMillisecond);
}
// The MLP 784-1024-1024-10's products at `batch` rows.
std::vector<std::vector<int64_t>> mlp_products(int64_t batch) {
  return {{batch, 784, 1024, 0}, {batch, 1024, 1024, 0}, {batch, 1024, 10, 0},   {batch, 1024, 1024, 1},
          {batch, 1024, 10, 1},  {batch, 784, 1024, 2},  {batch, 1024, 1024, 2}, {batch, 1024, 10, 2}};
}
void mlp_shapes(benchmark::internal::Benchmark* b) { linear_shapes(b, mlp_products(128)); }
BENCHMARK(BM_MlpGemm)->Apply(mlp_shapes);
BENCHMARK(BM_MlpGemmBf16)->Apply(mlp_shapes);

// The same MLP's products on one chunk of 16 or 32 rows (train --deterministic --chunk_size 16
// or 32: each chunk is its own forward and backward), float32.
void chunk_shapes(benchmark::internal::Benchmark* b) {
  std::vector<std::vector<int64_t>> shapes = mlp_products(16);
  for (const std::vector<int64_t>& shape : mlp_products(32)) shapes.push_back(shape);
  linear_shapes(b, shapes);
}
void BM_ChunkGemm(benchmark::State& state) { run_mlp_gemm(state, t::kFloat32); }
BENCHMARK(BM_ChunkGemm)->Apply(chunk_shapes);

// x @ W^T on few rows (2-32: a chunk, a small batch, a decoding step) for the example GPT's,
// GPT-2's and the huge MLP's widths, float32: where the dots loop (isa/gemm_kernels.cc) reads
// W once in place and a general GEMM packs it for every call (speed_rules.cc: gemm_engine).
void few_rows_shapes(benchmark::internal::Benchmark* b) {
  std::vector<std::vector<int64_t>> shapes;
  for (const int64_t rows : {2, 8, 16, 32, 48}) {
    for (const auto& [in, out] :
         {std::pair<int64_t, int64_t>{128, 512}, {256, 1024}, {512, 2048}, {768, 3072}, {3072, 768}, {4096, 4096}}) {
      shapes.push_back({rows, in, out, 0});
    }
  }
  linear_shapes(b, shapes);
}
void BM_FewRowsGemm(benchmark::State& state) { run_mlp_gemm(state, t::kFloat32); }
BENCHMARK(BM_FewRowsGemm)->Apply(few_rows_shapes);

// The example GPT's Linear products on one process (examples/train_gpt's defaults: 32 windows
// of 64 tokens, 128 wide): attention's q/k/v and output projections, the MLP's two layers,
// and the backward of its first. The same arguments as the MLP's.
void gpt_shapes(benchmark::internal::Benchmark* b) {
  linear_shapes(b, {{2048, 128, 384, 0},
                    {2048, 128, 128, 0},
                    {2048, 128, 512, 0},
                    {2048, 512, 128, 0},
                    {2048, 128, 512, 1},
                    {2048, 128, 512, 2}});
}
void BM_GptGemm(benchmark::State& state) { run_mlp_gemm(state, t::kFloat32); }
void BM_GptGemmBf16(benchmark::State& state) { run_mlp_gemm(state, t::kBFloat16); }
BENCHMARK(BM_GptGemm)->Apply(gpt_shapes);
BENCHMARK(BM_GptGemmBf16)->Apply(gpt_shapes);

// The bandwidth the elementwise ops are held to: std::memcpy of n floats (read n, write n).
void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  for (auto _ : state) {
    std::memcpy(b.raw_data_ptr(), a.raw_data_ptr(), static_cast<size_t>(n) * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Memcpy)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

// add into an existing output (torch.add(a, b, out=c)): three streams, no allocation.
void BM_AddOut(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  const t::Tensor c = t::empty({n});
  for (auto _ : state) {
    t::add_out(c, a, b, 1.0, "add");
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_AddOut)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

void BM_Add(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  for (auto _ : state) {
    t::Tensor c = t::add(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  // Bytes moved: read a and b, write c.
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Add)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

void BM_AddInPlace(benchmark::State& state) {
  const int64_t n = state.range(0);
  t::Generator g(0);
  const t::Tensor a = t::randn({n}, {}, &g);
  const t::Tensor b = t::randn({n}, {}, &g);
  for (auto _ : state) {
    a.add_(b);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_AddInPlace)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

// The same ops on channels-last activations [32, 64, 56, 56] (a ResNet stage's shape): an
// in-place add of two such tensors (a residual `out += identity`) and relu into a new one.
// The loops walk memory order, so these run as the row-major ones do.
t::Tensor channels_last_activation(t::Generator& g) {
  return t::randn({32, 64, 56, 56}, {}, &g).contiguous(t::MemoryFormat::kChannelsLast);
}

void BM_AddInPlaceChannelsLast(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor a = channels_last_activation(g), b = channels_last_activation(g);
  for (auto _ : state) {
    a.add_(b);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * a.numel() * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_AddInPlaceChannelsLast)->Unit(benchmark::kMillisecond);

void BM_ReluChannelsLast(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor a = channels_last_activation(g);
  for (auto _ : state) {
    t::Tensor c = t::relu(a);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 2 * a.numel() * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_ReluChannelsLast)->Unit(benchmark::kMillisecond);

// Copies between layouts that disagree on the inner dimension: x.t().contiguous() of a
// [n, n] float32 (Arg 0) or bfloat16 (Arg 1) matrix, and an NCHW activation made channels-last
// (bench/torch_bench.py does the same).
void BM_TransposeCopy(benchmark::State& state) {
  t::Generator g(0);
  const int64_t n = state.range(0);
  const t::Tensor x = t::randn({n, n}, {}, &g).to(state.range(1) == 0 ? t::kFloat32 : t::kBFloat16);
  for (auto _ : state) {
    t::Tensor c = x.t().contiguous();
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}
BENCHMARK(BM_TransposeCopy)->Args({1024, 0})->Args({1024, 1})->Args({4096, 0})->Unit(benchmark::kMillisecond);

void BM_ToChannelsLast(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({32, 64, 56, 56}, {}, &g);
  for (auto _ : state) {
    t::Tensor c = x.contiguous(t::MemoryFormat::kChannelsLast);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}
BENCHMARK(BM_ToChannelsLast)->Unit(benchmark::kMillisecond);

// x[rows, cols] (several tensor indices, NumPy's advanced indexing): 1 M elements picked from
// a [4096, 1024] float32 tensor, negative positions among them (bench/torch_indexing.py).
void BM_IndexPairs(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({4096, 1024}, {}, &g);
  const t::Tensor rows = t::sub(t::randint(0, 8192, {1 << 20}, &g), 4096.0);
  const t::Tensor cols = t::randint(0, 1024, {1 << 20}, &g);
  for (auto _ : state) {
    t::Tensor picked = x.index({rows, cols});
    benchmark::DoNotOptimize(picked.raw_data_ptr());
  }
}
BENCHMARK(BM_IndexPairs)->Unit(benchmark::kMillisecond);

// index_add: 16384 rows of 256 floats added into a [4096, 256] tensor at random rows (repeats
// sum), and the backward of x[rows, cols] (64 K elements picked from a [1024, 256] tensor, whose
// gradient adds them back through index_add), both beside bench/torch_indexing.py.
void BM_IndexAdd(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({4096, 256}, {}, &g), src = t::randn({16384, 256}, {}, &g);
  const t::Tensor index = t::randint(0, 4096, {16384}, &g);
  for (auto _ : state) {
    t::Tensor out = t::index_add(x, 0, index, src);
    benchmark::DoNotOptimize(out.raw_data_ptr());
  }
}
BENCHMARK(BM_IndexAdd)->Unit(benchmark::kMillisecond);

void BM_IndexPairsBackward(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({1024, 256}, {}, &g).requires_grad_();
  const t::Tensor rows = t::randint(0, 1024, {1 << 16}, &g), cols = t::randint(0, 256, {1 << 16}, &g);
  for (auto _ : state) {
    t::sum(x.index({rows, cols})).backward();
    benchmark::DoNotOptimize(x.grad().raw_data_ptr());
    x.mutable_grad() = t::Tensor();
  }
}
BENCHMARK(BM_IndexPairsBackward)->Unit(benchmark::kMillisecond);

// An in-place op on a view under autograd and the backward through it (CopySlices): y = x * 1,
// y[:, :512] *= w, y.sum().backward(), x [1024, 1024] and w [1024, 512] requiring grad.
void BM_InPlaceViewBackward(benchmark::State& state) {
  t::Generator g(0);
  const t::Tensor x = t::randn({1024, 1024}, {}, &g).requires_grad_();
  const t::Tensor w = t::randn({1024, 512}, {}, &g).requires_grad_();
  for (auto _ : state) {
    const t::Tensor y = t::mul(x, 1.0);
    y.narrow(1, 0, 512).mul_(w);
    t::sum(y).backward();
    benchmark::DoNotOptimize(x.grad().raw_data_ptr());
  }
}
BENCHMARK(BM_InPlaceViewBackward)->Unit(benchmark::kMillisecond);

// batch_norm's backward sums (sum dy, sum dy (x - mean) per channel) at the digits CNN's two
// shapes, [64, 16, 8, 8] and [64, 32, 4, 4] (rows of 64 and 16 elements), float32.
void BM_BatchNormBackwardReduce(benchmark::State& state) {
  const int64_t channels = state.range(0), side = state.range(1);
  t::Generator g(0);
  const t::Tensor x = t::randn({64, channels, side, side}, {}, &g), dy = t::randn({64, channels, side, side}, {}, &g);
  const t::Tensor mean = t::zeros({channels});
  for (auto _ : state) {
    auto sums = t::batch_norm_backward_reduce(dy, x, mean);
    benchmark::DoNotOptimize(std::get<0>(sums).raw_data_ptr());
  }
}
BENCHMARK(BM_BatchNormBackwardReduce)->Args({16, 8})->Args({32, 4})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // The JSON's context then says which kernels ran (bench/compare.py prints it).
  benchmark::AddCustomContext("cpu_kernels", t::cpu_kernels_summary());
  return tinyddp::bench::run_benchmarks(argc, argv, "tensor_bench");
}
