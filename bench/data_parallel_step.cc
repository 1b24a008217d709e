// //bench:data_parallel_step: one training step of the MLP 784-1024-1024-10 (global batch 128,
// cross-entropy, SGD with momentum) through ddp::DataParallel over --replicas CPU replicas
// (threads of this one process), each phase timed on its own: scatter, replicate, the
// replicas' forward (parallel_apply), gather and the loss, backward (through every replica,
// whose parameter gradients are summed into the module's), and the optimizer step. Prints
// medians as "RESULT mode=dp replicas=<k> step_us=<x> scatter_us=... replicate_us=...
// forward_us=... gather_us=... backward_us=... optimizer_us=...". bench/data_parallel_compare.sh
// runs it beside //bench:train_step's one-process and DDP steps on the same global batch.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

#include "tinyddp/ddp/data_parallel.h"
#include "tinyddp/nn/nn.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;
namespace ddp = tinyddp::ddp;

int main(int argc, char** argv) {
  int replicas = 2, iterations = 30, warmup = 5;
  CLI::App app{"Time DataParallel's phases on CPU replicas."};
  app.add_option("--replicas", replicas, "CPU replicas (threads), default 2")->check(CLI::Range(1, 16));
  app.add_option("--iterations", iterations, "timed steps (default 30)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  t::manual_seed(0);
  auto model = nn::mlp({784, 1024, 1024, 10});
  const t::Tensor inputs = t::randn({128, 784}), targets = t::rand({128}).mul_(10.0).to(t::kInt64);
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.01).momentum(0.9));
  const std::vector<t::Device> devices(static_cast<size_t>(replicas), t::Device());
  std::map<std::string, std::vector<double>> times;
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup + iterations; ++i) {
    std::map<std::string, double> step;
    auto mark = clock::now();
    const auto lap = [&](const char* phase) {
      const auto now = clock::now();
      step[phase] = std::chrono::duration<double, std::micro>(now - mark).count();
      mark = now;
    };
    const auto start = mark;
    optimizer.zero_grad();
    const auto chunks = ddp::scatter({inputs}, devices);
    lap("scatter");
    const auto copies = ddp::replicate(model, devices);
    lap("replicate");
    const auto outputs = ddp::parallel_apply(copies, chunks);
    lap("forward");
    const t::Tensor loss = nn::cross_entropy(ddp::gather(outputs, t::Device())[0], targets);
    lap("gather");
    loss.backward();
    lap("backward");
    optimizer.step();
    lap("optimizer");
    step["step"] = std::chrono::duration<double, std::micro>(clock::now() - start).count();
    if (i < warmup) continue;
    for (const auto& [phase, us] : step) times[phase].push_back(us);
  }
  std::cout << "RESULT mode=dp replicas=" << replicas;
  for (const char* phase : {"step", "scatter", "replicate", "forward", "gather", "backward", "optimizer"}) {
    std::vector<double>& v = times[phase];
    std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
    std::cout << " " << phase << "_us=" << static_cast<int64_t>(v[v.size() / 2]);
  }
  std::cout << std::endl;
  return 0;
}
