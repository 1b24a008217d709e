// //bench:matmul_turns: thread scaling of the products bench/bf16_matmul_compare.sh times,
// measured inside one process: R rounds (--turns, default 15), each timing every product for
// 0.2 s at one thread and then at --threads (default: every CPU this process may use), so
// that the host's swings between fast and slow phases, which land whole processes in either
// (bench/README.md), hit both counts alike. The products: the 1024 x 1024 matmul and the
// example GPT's Linear products (tensor_bench's BM_GptGemm shapes), in bfloat16 (--dtype
// float32 for float32). Prints per product and count "RESULT impl=tinyddp work=<name>
// threads=<t> turns=<R> ms=<median of the rounds' median call> faster_rounds=<rounds won>";
// bench/torch_matmul.py --turns prints the same for PyTorch.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tinyddp/base/cpus.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;

namespace {

struct Product {
  std::string work;
  std::function<t::Tensor()> run;
};

// The products of bench/torch_matmul.py --gpt: {batch, in, out, which}, which 0: x @ W^T,
// 1: grad @ W, 2: grad^T @ x.
std::vector<Product> products(t::DType dtype, const std::string& suffix) {
  t::Generator g(0);
  const auto draw = [&](t::Shape shape) { return t::randn(shape, {}, &g).to(dtype); };
  std::vector<Product> all;
  const t::Tensor a = draw({1024, 1024}), b = draw({1024, 1024});
  all.push_back({"matmul1024" + suffix, [a, b] { return t::matmul(a, b); }});
  const std::vector<std::array<int64_t, 4>> gpt{{2048, 128, 384, 0}, {2048, 128, 128, 0}, {2048, 128, 512, 0},
                                                {2048, 512, 128, 0}, {2048, 128, 512, 1}, {2048, 128, 512, 2}};
  for (const auto& [batch, in, out, which] : gpt) {
    const t::Tensor x = draw({batch, in}), w = draw({out, in}), grad = draw({batch, out});
    const std::string work = "gpt_" + std::to_string(batch) + "x" + std::to_string(in) + "x" + std::to_string(out) +
                             "_" + std::to_string(which) + suffix;
    all.push_back({work, [x, w, grad, which = which] {
                     return which == 0 ? t::matmul(x, w.t()) : which == 1 ? t::matmul(grad, w) : t::matmul(grad.t(), x);
                   }});
  }
  return all;
}

// The median call of `product` over 0.2 s (after 3 untimed calls), in ms.
double median_ms(const Product& product) {
  for (int i = 0; i < 3; ++i) product.run();
  std::vector<double> ms;
  const auto begin = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - begin < std::chrono::milliseconds(200)) {
    const auto start = std::chrono::steady_clock::now();
    const t::Tensor c = product.run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int turns = 15, threads = tinyddp::available_cpus();
  std::string dtype = "bfloat16";
  CLI::App app{
      "Thread scaling of the bf16_matmul_compare products, 1 thread and --threads taking turns in one process."};
  app.add_option("--turns", turns, "rounds (default 15)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "the count set against 1 (default: every CPU)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype, "bfloat16 (default) or float32")->check(CLI::IsMember({"bfloat16", "float32"}));
  CLI11_PARSE(app, argc, argv);
  const std::vector<Product> all =
      products(dtype == "float32" ? t::kFloat32 : t::kBFloat16, dtype == "float32" ? "" : "_bf16");
  const std::vector<int> counts{1, threads};
  for (const Product& product : all) {
    std::vector<double> medians[2];
    for (int round = 0; round < turns; ++round) {
      for (size_t k = 0; k < 2; ++k) {
        t::set_num_threads(counts[k]);
        medians[k].push_back(median_ms(product));
      }
    }
    for (size_t k = 0; k < 2; ++k) {
      int faster = 0;
      for (int round = 0; round < turns; ++round) faster += medians[k][round] < medians[1 - k][round];
      std::vector<double> sorted = medians[k];
      std::sort(sorted.begin(), sorted.end());
      std::printf("RESULT impl=tinyddp work=%s threads=%d turns=%d ms=%.3f faster_rounds=%d\n", product.work.c_str(),
                  counts[k], turns, sorted[sorted.size() / 2], faster);
      std::fflush(stdout);
    }
  }
  return 0;
}
