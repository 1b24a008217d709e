// //bench:allreduce: allreduce of 4 KiB, 1 MiB, 25 MiB and 100 MiB over the Gloo process
// group, float32 (--dtype int64: the deterministic option's integer sums, the same bytes).
// Under a launcher (RANK/WORLD_SIZE set) each process is one rank; otherwise it forks --nproc
// local processes itself. Rank 0 prints, per size:
//   RESULT op=allreduce dtype=<d> bytes=<n> median_us=<x> algbw_gbps=<y> busbw_gbps=<z>
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (what each link carries in a ring).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tinyddp/comm/comm.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;
namespace comm = tinyddp::comm;

namespace {

int run_rank(int warmup, const std::string& dtype) {
  const t::DType type = dtype == "int64" ? t::kInt64 : t::kFloat32;
  auto pg = comm::init_from_env();
  const std::vector<std::pair<int64_t, int>> sizes = {{4 << 10, 500}, {1 << 20, 100}, {25 << 20, 10}, {100 << 20, 5}};
  for (const auto& [bytes, iterations] : sizes) {
    const t::Tensor data = t::ones({bytes / static_cast<int64_t>(t::element_size(type))}, t::TensorOptions(type));
    std::vector<double> us;
    for (int i = 0; i < warmup + iterations; ++i) {
      pg->barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      pg->allreduce(data)->wait();
      const double elapsed =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      if (i >= warmup) us.push_back(elapsed);
    }
    std::sort(us.begin(), us.end());
    const double median = us[us.size() / 2];
    const double algbw = static_cast<double>(bytes) / (median * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (pg->size() - 1) / pg->size();
    if (pg->rank() == 0) {
      std::cout << "RESULT op=allreduce dtype=" << dtype << " bytes=" << bytes << " median_us=" << median
                << " algbw_gbps=" << algbw << " busbw_gbps=" << busbw << std::endl;
    }
  }
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2;
  int warmup = 3;
  std::string dtype = "float32";
  CLI::App app{"Time allreduce over tinyddp's Gloo process group."};
  app.add_option("--nproc", nproc, "local processes to fork when not started by a launcher")->check(CLI::Range(2, 64));
  app.add_option("--warmup", warmup, "untimed iterations per size")->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"float32", "int64"}));
  CLI11_PARSE(app, argc, argv);
#ifndef NDEBUG
  std::cerr << "allreduce: built without -c opt; these numbers mean nothing\n";
#endif
  try {
    if (std::getenv("RANK") != nullptr) return run_rank(warmup, dtype);
    // No launcher: fork the ranks here, on a free loopback port.
    return tinyddp::launcher::spawn_local(nproc, [&](int) { return run_rank(warmup, dtype); }) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "allreduce: " << e.what() << "\n";
    return 1;
  }
}
