// //bench:allreduce: allreduce of 4 KiB, 1 MiB, 25 MiB and 100 MiB (or --bytes) over the Gloo
// process group, float32 (--dtype int64: the deterministic option's integer sums, the same bytes).
// Under a launcher (RANK/WORLD_SIZE set) each process is one rank; otherwise it forks --nproc
// local processes itself. Rank 0 prints, per size:
//   RESULT op=allreduce dtype=<d> bytes=<n> median_us=<x> algbw_gbps=<y> busbw_gbps=<z>
// algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (what each link carries in a ring).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tinyddp/comm/comm.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/tensor/all.h"

namespace t = tinyddp::tensor;
namespace comm = tinyddp::comm;

namespace {

// Iterations for a size: about 2 MiB a rank moves per timed call, 500 at most and 5 at least.
int iterations_for(int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((100 << 20) / bytes, 5, 500)); }

int run_rank(int warmup, const std::string& dtype, const std::vector<int64_t>& sizes) {
  const t::DType type = dtype == "int64" ? t::kInt64 : t::kFloat32;
  auto pg = comm::init_from_env();
  for (const int64_t bytes : sizes) {
    const int iterations = iterations_for(bytes);
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
  std::vector<int64_t> sizes = {4 << 10, 1 << 20, 25 << 20, 100 << 20};
  CLI::App app{"Time allreduce over tinyddp's Gloo process group."};
  app.add_option("--nproc", nproc, "local processes to fork when not started by a launcher")->check(CLI::Range(2, 64));
  app.add_option("--warmup", warmup, "untimed iterations per size")->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"float32", "int64"}));
  app.add_option("--bytes", sizes, "the sizes to time, in bytes (a multiple of the element's size)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const int64_t element = dtype == "int64" ? 8 : 4;
  for (const int64_t bytes : sizes) {
    if (bytes % element != 0) {
      std::cerr << "allreduce: --bytes " << bytes << " is not a multiple of " << dtype << "'s " << element
                << " bytes\n";
      return 2;
    }
  }
#ifndef NDEBUG
  std::cerr << "allreduce: built without -c opt; these numbers mean nothing\n";
#endif
  try {
    if (std::getenv("RANK") != nullptr) return run_rank(warmup, dtype, sizes);
    // No launcher: fork the ranks here, on a free loopback port.
    return tinyddp::launcher::spawn_local(nproc, [&](int) { return run_rank(warmup, dtype, sizes); }) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "allreduce: " << e.what() << "\n";
    return 1;
  }
}
