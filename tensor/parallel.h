// Intra-op threads for the CPU kernels, as torch.set_num_threads and ATen's parallel_for: one
// pool per process whose threads split a kernel's loop; the calling thread works too.
//
// Bits do not depend on the thread count. parallel_for hands out ranges of independent work
// (each element written by one chunk), so how the range is cut changes nothing. A reduction
// uses parallel_chunks: its chunk boundaries come from the problem size and a fixed grain,
// never from the thread count, and the caller combines the chunks' partial results in chunk
// order, so 1 thread and 16 give the same bits (PyTorch does not promise this; tinyddp does).
//
// The number of threads: set_num_threads(n), else TINYDDP_NUM_THREADS, else OMP_NUM_THREADS,
// else under Slurm SLURM_CPUS_PER_TASK (a task's CPUs, `srun -c N`; at most the physical cores
// below), else the physical cores this process may run on (its CPU affinity, and its cgroup's
// CPU quota where one is set), read once, at the first kernel that asks. A value that is not a
// whole number from 1 to 4 x the CPUs this process may use is an Error naming the variable,
// the value and the range.
//
// Work below the grain, work started from inside a parallel region, and work started while
// another thread's region holds the pool run on the calling thread alone. An exception in any
// chunk reaches the caller once every chunk has finished or been skipped. The pool's threads
// are not the communication threads (Gloo's workers, the Reducer's futures): those are
// counted by nobody here. A child process made by fork() starts with no pool threads and
// makes its own at its first parallel region.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tinyddp/base/cpus.h"  // available_cpus, available_physical_cores

namespace tinyddp::tensor {

// The number of threads parallel regions use (1: everything on the calling thread).
int get_num_threads();
// Sets it for the whole process, as torch.set_num_threads; throws an Error naming `threads`
// and the allowed range (1 to 4 x the CPUs this process may use) when it is out of range.
void set_num_threads(int threads);
// What decided get_num_threads(): "set_num_threads", "TINYDDP_NUM_THREADS=4",
// "OMP_NUM_THREADS=1", "SLURM_CPUS_PER_TASK=8" or "the physical cores" (the examples print it).
std::string num_threads_source();

// What TINYDDP_NUM_THREADS (or OMP_NUM_THREADS) = `value` sets, for `cpus` usable CPUs; throws
// an Error naming `variable`, the value and the range when it is not a whole number in range.
int parse_num_threads(const std::string& variable, const std::string& value, int cpus);

// Whether the calling thread is inside a parallel region (a chunk of parallel_for).
bool in_parallel_region();

// fn(chunk_begin, chunk_end) over [begin, end) cut into at most get_num_threads() ranges of at
// least `grain` elements each (one range when end - begin < 2 * grain). For independent work.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// fn(chunk) for chunk in [0, chunks), on the pool's threads and the caller's, in no set order.
// For reductions: each chunk writes its own partial result, which the caller combines in
// chunk order afterwards.
void parallel_chunks(int64_t chunks, const std::function<void(int64_t)>& fn);

// The number of chunks of `grain` elements that cover `n` (the last may be shorter): chunk
// boundaries that depend on the problem only.
inline int64_t chunk_count(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

}  // namespace tinyddp::tensor
