// The CPUs this process may run on (cpus.h), from sched_getaffinity, /sys's topology and the
// cgroup's cpu.max (v2) or cfs files (v1).
#include "tinyddp/base/cpus.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>

namespace tinyddp {

namespace {

std::vector<int> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {  // no mask to read: every CPU the machine reports
    for (unsigned cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu) {
      cpus.push_back(static_cast<int>(cpu));
    }
  }
  return cpus;
}

}  // namespace

int available_cpus() { return static_cast<int>(affinity().size()); }

std::vector<std::vector<int>> available_cores() {
  const std::vector<int> cpus = affinity();
  std::map<std::pair<int, int>, std::vector<int>> by_core;  // (package, core id) -> CPUs
  std::vector<std::pair<int, int>> order;
  for (const int cpu : cpus) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    int p = 0, c = 0;
    if (!(package >> p) || !(core >> c)) {  // no topology: each CPU a core
      std::vector<std::vector<int>> alone;
      for (const int each : cpus) alone.push_back({each});
      return alone;
    }
    auto [it, added] = by_core.try_emplace({p, c});
    if (added) order.push_back({p, c});
    it->second.push_back(cpu);
  }
  std::vector<std::vector<int>> cores;
  for (const auto& key : order) cores.push_back(by_core[key]);
  return cores;
}

int cgroup_cpu_quota() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  int64_t period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return static_cast<int>((std::stoll(quota) + period - 1) / period);
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  int64_t q = 0;
  if (q1 >> q && p1 >> period && q > 0 && period > 0) return static_cast<int>((q + period - 1) / period);
  return 0;
}

int available_physical_cores() {
  const int cores = static_cast<int>(available_cores().size());
  const int quota = cgroup_cpu_quota();
  return std::max(1, quota > 0 ? std::min(cores, quota) : cores);
}

}  // namespace tinyddp
