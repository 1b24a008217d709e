// //bench:train_step: times one training step (zero_grad, forward, loss, backward, SGD step)
// on one thread and prints the median as "RESULT model=<name> mode=local median_us=<x>".
//   --model toy: the seed's ToyModel, batch 20, MSE
//   --model mlp: 784-1024-1024-10, batch 128, cross-entropy
// Build with -c opt: bazel run -c opt //bench:train_step -- --model mlp
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>

#include "nn/nn.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;

int main(int argc, char** argv) {
  std::string model_name = "toy";
  int iterations = 0;
  int warmup = 5;
  CLI::App app{"Time one training step of tinyddp."};
  app.add_option("--model", model_name, "toy or mlp")->check(CLI::IsMember({"toy", "mlp"}));
  app.add_option("--iterations", iterations, "timed steps (default 2000 toy, 30 mlp)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
#ifndef NDEBUG
  std::cerr << "train_step: built without -c opt; these numbers mean nothing\n";
#endif
  const bool toy = model_name == "toy";
  if (iterations == 0) iterations = toy ? 2000 : 30;

  t::manual_seed(0);
  std::shared_ptr<nn::Module> model;
  t::Tensor inputs, targets;
  if (toy) {
    model = std::make_shared<nn::ToyModel>();
    inputs = t::randn({20, 10});
    targets = t::randn({20, 5});
  } else {
    model = nn::mlp({784, 1024, 1024, 10});
    inputs = t::randn({128, 784});
    targets = t::rand({128}).mul_(10.0).to(t::kInt64);
  }
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.01).momentum(0.9));
  const auto step = [&] {
    optimizer.zero_grad();
    const t::Tensor out = model->forward(inputs);
    const t::Tensor loss = toy ? nn::mse_loss(out, targets) : nn::cross_entropy(out, targets);
    loss.backward();
    optimizer.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  std::cout << "RESULT model=" << model_name << " mode=local median_us=" << us[us.size() / 2] << "\n";
  return 0;
}
