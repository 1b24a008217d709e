// Where a second thread starts to pay, kernel by kernel: the elementwise, reduction and
// normalisation kernels and the digits CNN's layers at sizes around the intra-op grain
// (kElementwiseGrain, 32768 elements: below twice that a loop stays on one thread). Run at
// TINYDDP_NUM_THREADS=1 and at every core (bench/grain_compare.sh) and compare: a size where the
// threads' time is not below one thread's is a size the kernel should not split.
// Arguments: the op (the kOps index) and the elements of its input.
#include "bench/bench_main.h"

#include <array>
#include <string>

#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

namespace {

// Each op's name and its work on x (the input, [numel / 64, 64], or as images [N, 16, 8, 8] for
// the convolutional layers: N = numel / 1024) and y (another tensor like x).
struct Op {
  const char* name;
  bool images;
  t::Tensor (*run)(const t::Tensor& x, const t::Tensor& y, const t::Tensor& weight);
};

const std::array<Op, 10> kOps = {{
    {"add", false, [](const t::Tensor& x, const t::Tensor& y, const t::Tensor&) { return t::add(x, y); }},
    {"relu", false, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::relu(x); }},
    {"exp", false, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::exp(x); }},
    {"gelu", false, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::gelu(x); }},
    {"sum_rows", false, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::sum(x, {-1}); }},
    {"softmax", false, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::softmax(x, -1); }},
    {"layer_norm", false,
     [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::layer_norm(x, {x.size(-1)}); }},
    {"batch_norm", true,
     [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) {
       return t::batch_norm(x, t::Tensor(), t::Tensor(), t::Tensor(), t::Tensor(), true);
     }},
    {"max_pool2d", true, [](const t::Tensor& x, const t::Tensor&, const t::Tensor&) { return t::max_pool2d(x, 2); }},
    {"conv2d", true,
     [](const t::Tensor& x, const t::Tensor&, const t::Tensor& w) { return t::conv2d(x, w, t::Tensor(), 1, 1); }},
}};

void BM_Grain(benchmark::State& state) {
  const Op& op = kOps.at(static_cast<size_t>(state.range(0)));
  const int64_t numel = state.range(1);
  t::Generator g(0);
  const t::Shape shape = op.images ? t::Shape{numel / 1024, 16, 8, 8} : t::Shape{numel / 64, 64};
  const t::Tensor x = t::randn(shape, {}, &g), y = t::randn(shape, {}, &g);
  const t::Tensor weight = t::randn({32, 16, 3, 3}, {}, &g);
  for (auto _ : state) {
    t::Tensor out = op.run(x, y, weight);
    benchmark::DoNotOptimize(out.raw_data_ptr());
  }
  state.SetLabel(op.name);
}

void grain_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"op", "numel"});
  for (int64_t op = 0; op < static_cast<int64_t>(kOps.size()); ++op) {
    for (int64_t numel : {16384, 32768, 65536, 131072, 262144, 1048576}) b->Args({op, numel});
  }
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Grain)->Apply(grain_args);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "grain_bench"); }
