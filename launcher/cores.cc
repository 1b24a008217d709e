// share_cores (launcher.h): how a node's cores are divided among its workers, the intra-op
// threads each gets and, with --cpu_bind, the CPUs each is pinned to.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tinyddp/launcher/launcher.h"

namespace tinyddp::launcher {

namespace {

// "0-3, 8" for a list of CPUs.
std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : std::to_string(cpus[i]));
    i = j + 1;
  }
  return out;
}

}  // namespace

CoreShare share_cores(const LaunchConfig& options, const std::vector<std::vector<int>>& cores, int usable_cores,
                      const char* user_threads) {
  CoreShare share;
  const int workers = options.nproc_per_node;
  share.threads = std::max(1, usable_cores / workers);
  if (user_threads != nullptr) {
    share.message = fmt::format("launch: {} worker(s), each with TINYDDP_NUM_THREADS={} intra-op threads, as set",
                                workers, user_threads);
  } else {
    share.message = fmt::format(
        "launch: {} worker(s) on this node's {} physical core(s): {} intra-op thread(s) each (TINYDDP_NUM_THREADS; "
        "set it to choose){}",
        workers, usable_cores, share.threads, workers > usable_cores ? "; more workers than cores" : "");
  }
  if (options.cpu_bind && !cores.empty()) {
    const size_t per = std::max<size_t>(1, cores.size() / static_cast<size_t>(workers));
    std::vector<std::string> bound;
    for (int local = 0; local < workers; ++local) {
      std::vector<int> cpus;
      for (size_t k = 0; k < per; ++k) {
        const size_t core = (static_cast<size_t>(local) * per + k) % cores.size();
        cpus.insert(cpus.end(), cores[core].begin(), cores[core].end());
      }
      std::sort(cpus.begin(), cpus.end());
      bound.push_back(fmt::format("local rank {} on CPUs {}", local, cpu_list(cpus)));
      share.cpus.push_back(std::move(cpus));
    }
    share.message += fmt::format("\nlaunch: --cpu_bind: {}", fmt::join(bound, "; "));
  }
  return share;
}

}  // namespace tinyddp::launcher
