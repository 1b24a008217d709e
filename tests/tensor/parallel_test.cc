// The intra-op thread pool (tensor/parallel.h): thread counts and their errors, parallel_for
// covering its range once, nested regions, exceptions, two callers at once, a forked child,
// and chunk boundaries that do not depend on the thread count.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/tensor/parallel.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::KeepThreads;

TEST_CASE("Thread counts: parsed strictly, out of range an Error naming the value and the range", "[parallel]") {
  CHECK(parse_num_threads("TINYDDP_NUM_THREADS", "1", 2) == 1);
  CHECK(parse_num_threads("TINYDDP_NUM_THREADS", "8", 2) == 8);
  for (const char* bad : {"0", "9", "-1", "abc", "", "2.5", " 2", "99999999999"}) {
    INFO("value '" << bad << "'");
    CHECK_THROWS_WITH(parse_num_threads("TINYDDP_NUM_THREADS", bad, 2),
                      Contains(std::string("TINYDDP_NUM_THREADS='") + bad + "'") && Contains("from 1 to 8") &&
                          Contains("4 x the 2 CPUs"));
  }
  const int cpus = tinyddp::available_cpus();
  CHECK(cpus >= 1);
  CHECK(tinyddp::available_physical_cores() >= 1);
  CHECK(tinyddp::available_cores().size() <= static_cast<size_t>(cpus));
  CHECK(tinyddp::available_physical_cores() <= cpus);
  CHECK_THROWS_WITH(set_num_threads(0), Contains("set_num_threads: 0 threads; expected 1 to"));
  CHECK_THROWS_WITH(set_num_threads(4 * cpus + 1), Contains("expected 1 to " + std::to_string(4 * cpus)));
}

TEST_CASE("parallel_for covers its range exactly once, at any thread count and grain", "[parallel]") {
  const KeepThreads keep;
  for (const int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    CHECK(get_num_threads() == threads);
    for (const int64_t n : {0, 1, 7, 64, 1000, 4097}) {
      for (const int64_t grain : {1, 16, 5000}) {
        INFO(threads << " threads, n " << n << ", grain " << grain);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n) + 10);
        std::atomic<int> calls{0};
        parallel_for(10, 10 + n, grain, [&](int64_t from, int64_t to) {
          ++calls;
          CHECK(to - from >= std::min(grain, n));  // no range below the grain unless it is all
          for (int64_t i = from; i < to; ++i) ++hits[static_cast<size_t>(i)];
        });
        int wrong = 0;
        for (int64_t i = 0; i < n + 10; ++i) wrong += hits[static_cast<size_t>(i)] != (i >= 10 ? 1 : 0);
        CHECK(wrong == 0);
        CHECK(calls <= threads);
        if (n > 0 && n < 2 * grain) CHECK(calls == 1);
      }
    }
  }
}

TEST_CASE("parallel_chunks runs on the pool's threads; nested regions run on the calling thread", "[parallel]") {
  const KeepThreads keep;
  set_num_threads(2);
  // Two chunks, each waiting (bounded) until both have started: only two threads get there.
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> started{0};
  parallel_chunks(2, [&](int64_t) {
    ++started;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    CHECK(in_parallel_region());
    // A region inside a region: its chunks stay on this thread.
    std::set<std::thread::id> inner;
    parallel_for(0, 1000, 1, [&](int64_t, int64_t) { inner.insert(std::this_thread::get_id()); });
    CHECK(inner == std::set<std::thread::id>{std::this_thread::get_id()});
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(started == 2);
  CHECK(ids.size() == 2);
  CHECK_FALSE(in_parallel_region());
}

TEST_CASE("An exception in a chunk reaches the caller; the pool works on", "[parallel]") {
  const KeepThreads keep;
  set_num_threads(3);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(parallel_chunks(64,
                                    [&](int64_t chunk) {
                                      ++ran;
                                      if (chunk == 5) throw std::runtime_error("chunk 5 failed");
                                    }),
                    Contains("chunk 5 failed"));
  CHECK(ran <= 64);
  std::atomic<int64_t> sum{0};
  parallel_for(0, 100, 1, [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) sum += i;
  });
  CHECK(sum == 4950);
}

TEST_CASE("Two threads calling at once both get every chunk run", "[parallel]") {
  const KeepThreads keep;
  set_num_threads(2);
  std::vector<int64_t> sums(2, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 50; ++round) {
        std::vector<int64_t> part(16, 0);
        parallel_chunks(16, [&](int64_t chunk) { part[static_cast<size_t>(chunk)] = chunk + 1; });
        for (int64_t v : part) sums[static_cast<size_t>(c)] += v;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  CHECK(sums == std::vector<int64_t>{50 * 136, 50 * 136});
}

TEST_CASE("A forked child makes its own pool", "[parallel]") {
  const KeepThreads keep;
  set_num_threads(2);
  std::atomic<int64_t> warm{0};
  parallel_for(0, 100, 1, [&](int64_t from, int64_t to) { warm += to - from; });
  REQUIRE(warm == 100);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::atomic<int64_t> sum{0};
    parallel_for(0, 1000, 1, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) sum += i;
    });
    _exit(sum == 499500 ? 0 : 1);
  }
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {  // hung: end it, and fail
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  CHECK(done == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("chunk_count: boundaries from the size and the grain only", "[parallel]") {
  CHECK(chunk_count(0, 8) == 0);
  CHECK(chunk_count(1, 8) == 1);
  CHECK(chunk_count(8, 8) == 1);
  CHECK(chunk_count(9, 8) == 2);
  CHECK(chunk_count(1000, 256) == 4);
}
