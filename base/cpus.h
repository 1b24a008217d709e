// The CPUs this process may run on: how many (its affinity), which physical cores they belong
// to, and its cgroup's CPU quota. The intra-op threads' default (tensor/parallel.h) and the
// launcher's share of cores per worker (--cpu_bind) both read them.
#pragma once

#include <vector>

namespace tinyddp {

// The CPUs in this process's affinity mask (at least 1).
int available_cpus();

// Those CPUs grouped by physical core (hyperthreads of one core together), cores in order of
// their first CPU's number. Without a readable topology, each CPU is a core.
std::vector<std::vector<int>> available_cores();

// The cgroup's CPU quota in whole CPUs (rounded up), or 0 when none is set.
int cgroup_cpu_quota();

// The physical cores this process may use: available_cores().size(), capped by the cgroup
// quota (at least 1).
int available_physical_cores();

}  // namespace tinyddp
