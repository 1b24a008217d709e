// The intra-op thread pool (parallel.h): the thread count and where it comes from, the pool's
// workers, and parallel_for / parallel_chunks over them.
#include "tinyddp/tensor/parallel.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tinyddp/base/cpus.h"
#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

// ---- how many threads -------------------------------------------------------------------------

int parse_num_threads(const std::string& variable, const std::string& value, int cpus) {
  const int most = 4 * std::max(1, cpus);
  const auto refuse = [&](const char* why) {
    return Error(
        fmt::format("{}='{}': {}; expected a whole number of threads from 1 to {} (4 x the {} CPUs this "
                    "process may use)",
                    variable, value, why, most, cpus));
  };
  if (value.empty() || value.size() > 9 ||
      !std::all_of(value.begin(), value.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    throw refuse("not a whole number");
  }
  const int threads = std::stoi(value);
  if (threads < 1) throw refuse("too few");
  if (threads > most) throw refuse("too many");
  return threads;
}

namespace {

std::mutex count_mutex;
std::atomic<int> thread_count{0};  // 0: not resolved yet

std::string count_source = "the physical cores";  // what set thread_count (count_mutex)

int default_num_threads() {
  for (const char* variable : {"TINYDDP_NUM_THREADS", "OMP_NUM_THREADS"}) {
    if (const char* value = std::getenv(variable)) {
      count_source = fmt::format("{}={}", variable, value);
      return parse_num_threads(variable, value, available_cpus());
    }
  }
  // A Slurm task's CPUs (srun -c N): its share of the node where no affinity mask holds it to
  // them (TaskPlugin=task/none), and never more than the physical cores it may use.
  if (const char* per_task = std::getenv("SLURM_CPUS_PER_TASK")) {
    const int threads = parse_num_threads("SLURM_CPUS_PER_TASK", per_task, available_cpus());
    count_source = fmt::format("SLURM_CPUS_PER_TASK={}", per_task);
    if (threads > available_physical_cores()) count_source += ", capped at the physical cores";
    return std::min(threads, available_physical_cores());
  }
  count_source = "the physical cores";
  return available_physical_cores();
}

// ---- the pool -----------------------------------------------------------------------------------

thread_local bool inside_region = false;

// One parallel_chunks call: chunks handed out in turn to whichever thread asks next.
struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Runs chunks until none is left (after a failure, claims the rest without running them).
  void work() {
    const bool was_inside = inside_region;
    inside_region = true;
    for (int64_t chunk = next++; chunk < chunks; chunk = next++) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        (*fn)(chunk);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
    inside_region = was_inside;
  }
};

// Spins for up to `limit` before giving up, checking `done` (a pause between checks, so that
// a hyperthread sibling keeps its share of the core). Returns whether `done` came true.
template <typename F>
bool spin_until(F&& done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      __builtin_ia32_pause();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

// The workers. Regions come one after another (an op's loop, then the next op's), so a worker
// that finished one waits for the next by spinning for kWorkerSpin before it sleeps, and the
// caller waits for the workers by spinning before it sleeps: a handoff then costs about a
// microsecond instead of a futex wake-up, which on small ops (the digits CNN's, 65 K
// elements) would cost more than the split saves. The state the spins read is atomic; the
// mutex and condition variables are for sleeping only.
class Pool {
 public:
  static constexpr std::chrono::microseconds kWorkerSpin{200}, kCallerSpin{2000};

  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    stop_ = true;
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int workers() const { return static_cast<int>(threads_.size()); }

  // Runs `job` on the workers and the calling thread; returns when no worker holds it.
  void run(Job& job) {
    job_ = &job;
    ++generation_;
    if (sleeping_ > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    job.work();
    job_ = nullptr;  // late risers find nothing to do
    // A worker holds the job from its busy_ increment, made before it reads job_ (both
    // sequentially consistent): once busy_ is 0 here, none can still be reading it.
    if (spin_until([this] { return busy_ == 0; }, kCallerSpin)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    caller_waiting_ = true;
    idle_.wait(lock, [this] { return busy_ == 0; });
    caller_waiting_ = false;
  }

 private:
  void worker_loop() {
    uint64_t seen = 0;
    while (true) {
      const auto news = [&] { return stop_ || generation_ != seen; };
      if (!spin_until(news, kWorkerSpin)) {
        std::unique_lock<std::mutex> lock(mutex_);
        ++sleeping_;
        wake_.wait(lock, news);
        --sleeping_;
      }
      if (stop_) return;
      seen = generation_;
      ++busy_;
      if (Job* job = job_) job->work();
      if (--busy_ == 0 && caller_waiting_) {
        std::lock_guard<std::mutex> lock(mutex_);
        idle_.notify_all();
      }
    }
  }

  std::mutex mutex_;  // for sleeping: wake_ and idle_
  std::condition_variable wake_, idle_;
  std::atomic<Job*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_{0};      // workers holding job_
  std::atomic<int> sleeping_{0};  // workers asleep on wake_
  std::atomic<bool> caller_waiting_{false}, stop_{false};
  std::vector<std::thread> threads_;
};

// One region at a time holds the pool; a caller that finds it held runs alone. Recursive, so
// that the fork handlers below never wait on the thread that forks.
std::recursive_mutex pool_mutex;
std::unique_ptr<Pool> pool;  // under pool_mutex; (threads - 1) workers

void before_fork() { pool_mutex.lock(); }
void after_fork_parent() { pool_mutex.unlock(); }
void after_fork_child() {
  // The workers did not come along: forget them (not joinable here) and start afresh.
  (void)pool.release();
  pool_mutex.unlock();
}

const bool fork_handlers = [] {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  return true;
}();

// Runs every chunk on the calling thread.
void run_serially(int64_t chunks, const std::function<void(int64_t)>& fn) {
  for (int64_t chunk = 0; chunk < chunks; ++chunk) fn(chunk);
}

}  // namespace

int get_num_threads() {
  const int known = thread_count.load();
  if (known > 0) return known;
  std::lock_guard<std::mutex> lock(count_mutex);
  if (thread_count.load() == 0) thread_count = default_num_threads();
  return thread_count.load();
}

void set_num_threads(int threads) {
  const int cpus = available_cpus();
  TDDP_CHECK(threads >= 1 && threads <= 4 * cpus,
             "set_num_threads: {} threads; expected 1 to {} (4 x the {} CPUs this process may use)", threads, 4 * cpus,
             cpus);
  std::lock_guard<std::mutex> lock(count_mutex);
  thread_count = threads;  // the pool is resized at the next region
  count_source = "set_num_threads";
}

std::string num_threads_source() {
  get_num_threads();
  std::lock_guard<std::mutex> lock(count_mutex);
  return count_source;
}

bool in_parallel_region() { return inside_region; }

void parallel_chunks(int64_t chunks, const std::function<void(int64_t)>& fn) {
  if (chunks <= 0) return;
  const int threads = get_num_threads();
  (void)fork_handlers;
  if (chunks == 1 || threads == 1 || inside_region) return run_serially(chunks, fn);
  std::unique_lock<std::recursive_mutex> hold(pool_mutex, std::try_to_lock);
  if (!hold.owns_lock()) return run_serially(chunks, fn);  // another thread's region has the pool
  if (!pool || pool->workers() != threads - 1) {
    pool.reset();
    pool = std::make_unique<Pool>(threads - 1);
  }
  Job job;
  job.fn = &fn;
  job.chunks = chunks;
  pool->run(job);
  if (job.error) std::rethrow_exception(job.error);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = inside_region ? 1 : get_num_threads();
  const int64_t pieces = std::min<int64_t>(threads, n / grain);
  if (pieces <= 1) return fn(begin, end);
  const int64_t size = (n + pieces - 1) / pieces;
  parallel_chunks(pieces, [&](int64_t chunk) {
    const int64_t from = begin + chunk * size, to = std::min(end, from + size);
    if (from < to) fn(from, to);
  });
}

}  // namespace tinyddp::tensor
