// Autograd engine benchmarks (Google Benchmark, manual timing of backward only): a chain of
// 1,000 small elementwise ops, and a 10-layer MLP of width 16. Reports ns per graph node.
// Build with -c opt: bazel run -c opt //bench:autograd_bench
#include "bench/bench_main.h"

#include <chrono>
#include <iostream>
#include <unordered_set>

#include "tinyddp/autograd/autograd.h"

namespace t = tinyddp::tensor;
namespace ag = tinyddp::autograd;

namespace {

// Nodes reachable from `root`'s grad_fn (gradient accumulators included).
int64_t count_nodes(const t::Tensor& root) {
  std::unordered_set<ag::Node*> seen;
  std::vector<ag::Node*> stack{root.grad_fn().get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    ag::Node* node = stack.back();
    stack.pop_back();
    for (const ag::Edge& e : node->next_edges()) {
      if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
    }
  }
  return static_cast<int64_t>(seen.size());
}

// Builds a graph (untimed), times only its backward, and reports ns per node.
template <typename Build>
void time_backward(benchmark::State& state, Build build) {
  int64_t nodes = 0;
  double seconds = 0;
  for (auto _ : state) {
    const t::Tensor loss = build();
    nodes = count_nodes(loss);
    const auto start = std::chrono::steady_clock::now();
    loss.backward();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(elapsed);
    seconds += elapsed;
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["ns_per_node"] =
      seconds * 1e9 / (static_cast<double>(state.iterations()) * static_cast<double>(nodes));
}

// y = x + c, 1,000 times, on 16 elements: AddBackward passes the gradient through, so this
// is almost pure engine overhead.
void BM_BackwardAddChain(benchmark::State& state) {
  const int64_t length = state.range(0);
  const t::Tensor x = t::randn({16});
  x.requires_grad_();
  const t::Tensor c = t::randn({16});
  time_backward(state, [&] {
    t::Tensor y = x;
    for (int64_t i = 0; i < length; ++i) y = t::add(y, c);
    return t::sum(y);
  });
}
BENCHMARK(BM_BackwardAddChain)->Arg(1000)->UseManualTime()->Unit(benchmark::kMicrosecond);

// y = y * c, 1,000 times: each node also multiplies 16 floats.
void BM_BackwardMulChain(benchmark::State& state) {
  const int64_t length = state.range(0);
  const t::Tensor x = t::randn({16});
  x.requires_grad_();
  const t::Tensor c = t::full({16}, 1.0001);
  time_backward(state, [&] {
    t::Tensor y = x;
    for (int64_t i = 0; i < length; ++i) y = t::mul(y, c);
    return t::sum(y);
  });
}
BENCHMARK(BM_BackwardMulChain)->Arg(1000)->UseManualTime()->Unit(benchmark::kMicrosecond);

// 10 x (Linear(16, 16) + ReLU) on a batch of 16, then sum.
void BM_BackwardMlp(benchmark::State& state) {
  const int64_t layers = state.range(0);
  t::manual_seed(0);
  std::vector<t::Tensor> weights, biases;
  for (int64_t i = 0; i < layers; ++i) {
    weights.push_back(t::mul(t::randn({16, 16}), 0.25).requires_grad_());
    biases.push_back(t::zeros({16}).requires_grad_());
  }
  const t::Tensor input = t::randn({16, 16});
  time_backward(state, [&] {
    t::Tensor h = input;
    for (int64_t i = 0; i < layers; ++i) h = t::relu(t::add(t::matmul(h, weights[i].t()), biases[i]));
    return t::sum(h);
  });
}
BENCHMARK(BM_BackwardMlp)->Arg(10)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) { return tinyddp::bench::run_benchmarks(argc, argv, "autograd_bench"); }
