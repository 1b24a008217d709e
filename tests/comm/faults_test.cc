// A peer that stops taking part (a rank frozen by SIGSTOP, stuck, or gone): every Gloo
// collective fails within the group's timeout with an error that names the rank it waited
// for, whichever path it took (the small-allreduce mesh, Gloo's own algorithms, the TCP ring),
// and a peer that died is named by every survivor, in groups larger than two too; a rank
// that never joins (threads and processes) or dies mid-job; large allreduces with a dead or
// absent peer.
#include <chrono>
#include <functional>
#include <thread>

#include <unistd.h>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/comm/comm.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;
using tinyddp::testing::Expectations;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_processes;

namespace {

// pg.allreduce(t) must fail within 10 s with a message containing `expected`.
void expect_allreduce_error(ProcessGroup& pg, Expectations& e, const Tensor& t, const std::string& expected) {
  const auto before = std::chrono::steady_clock::now();
  try {
    pg.allreduce(t)->wait();
    e.failures.push_back("allreduce succeeded where it should have failed with: " + expected);
  } catch (const Error& ex) {
    e.expect(std::string(ex.what()).find(expected) != std::string::npos, std::string("message: ") + ex.what());
  }
  e.expect(std::chrono::steady_clock::now() - before < std::chrono::seconds(10), "the error took longer than 10 s");
}

// Rank 1 joins and passes one barrier, then sits out; rank 0 runs `collective` and returns its
// error message (empty if none).
std::string error_with_absent_rank_1(const std::function<void(ProcessGroup&)>& collective) {
  auto store = std::make_shared<HashStore>();
  ProcessGroupOptions options;
  options.timeout(std::chrono::milliseconds(1000));
  std::thread absent([&] {
    ProcessGroupGloo pg(store, 1, 2, options);
    pg.barrier()->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(1800));
  });
  std::string message;
  {
    ProcessGroupGloo pg(store, 0, 2, options);
    pg.barrier()->wait();
    const auto before = std::chrono::steady_clock::now();
    try {
      collective(pg);
    } catch (const TimeoutError& e) {
      message = e.what();
    } catch (const Error& e) {
      message = std::string("(not a TimeoutError) ") + e.what();
    }
    const auto took = std::chrono::steady_clock::now() - before;
    CHECK(took < std::chrono::seconds(5));
  }
  absent.join();
  return message;
}

}  // namespace

TEST_CASE("gloo: a peer that stops taking part is named, whichever path the collective takes", "[comm][gloo][faults]") {
  const std::vector<std::pair<std::string, std::function<void(ProcessGroup&)>>> cases = {
      // One float64: the small-allreduce mesh (the loss average of examples/train).
      {"small allreduce", [](ProcessGroup& pg) { pg.allreduce(tensor::ones({1}, tensor::kFloat64))->wait(); }},
      {"ring allreduce", [](ProcessGroup& pg) { pg.allreduce(tensor::ones({1 << 18}))->wait(); }},
      {"broadcast", [](ProcessGroup& pg) { pg.broadcast(tensor::ones({16}), 1)->wait(); }},
      {"allgather",
       [](ProcessGroup& pg) {
         std::vector<Tensor> out = {tensor::zeros({4}), tensor::zeros({4})};
         pg.allgather(out, tensor::ones({4}))->wait();
       }},
      {"barrier", [](ProcessGroup& pg) { pg.barrier()->wait(); }},
  };
  for (const auto& [name, collective] : cases) {
    INFO(name);
    const std::string message = error_with_absent_rank_1(collective);
    INFO(message);
    CHECK_THAT(message, Contains("rank 1"));
    CHECK_THAT(message, !Contains("not a TimeoutError"));
  }
}

TEST_CASE("gloo: a peer that died is named by every survivor of a group of three", "[comm][gloo][faults]") {
  // With the desync check on (the default) each collective first exchanges call records on
  // the small-allreduce mesh, so that is where the survivors meet the dead rank, at once for
  // the first collective and the next; both ranks' messages must name it.
  for (const int64_t numel : {int64_t{8}, int64_t{1} << 20}) {
    INFO(numel << " elements");
    const auto failures = tinyddp::testing::run_processes(
        3,
        [numel](ProcessGroup& pg, tinyddp::testing::Expectations& e) {
          pg.barrier()->wait();
          if (pg.rank() == 2) ::_exit(0);
          for (int attempt = 0; attempt < 2; ++attempt) {
            const auto before = std::chrono::steady_clock::now();
            std::string message;
            try {
              pg.allreduce(tensor::ones({numel}))->wait();
            } catch (const Error& error) {
              message = error.what();
            }
            e.expect(message.find("rank 2") != std::string::npos,
                     "attempt " + std::to_string(attempt) + ": " + message);
            e.expect(std::chrono::steady_clock::now() - before < std::chrono::seconds(10),
                     "the error took 10 s or more");
          }
          std::this_thread::sleep_for(std::chrono::seconds(1));  // see rank 2 go before the other survivor
        },
        std::chrono::milliseconds(20000), nullptr, /*finishers=*/2);
    tinyddp::testing::require_no_failures(failures);
  }
}

TEST_CASE("a rank that never joins: the others fail within the timeout, naming it", "[comm][gloo][faults]") {
  // Threads: ranks 0 and 1 of 3 start; rank 2 never does.
  auto store = std::make_shared<HashStore>();
  store->set_timeout(std::chrono::milliseconds(1500));
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ProcessGroupOptions options;
      options.timeout(std::chrono::milliseconds(1500));
      try {
        ProcessGroupGloo pg(store, rank, 3, options);
      } catch (const TimeoutError& e) {
        messages[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  for (const auto& m : messages)
    CHECK_THAT(m, Contains("ranks [2] never joined") && Contains("of 3 could not connect"));
  // Processes: rank 2 of 3 exits before joining.
  const auto failures = run_processes(
      3, [](ProcessGroup&, Expectations&) {}, std::chrono::milliseconds(2000),
      [](int rank) {
        if (rank == 2) ::_exit(0);
      });
  REQUIRE(failures.size() == 2);
  for (const auto& f : failures) CHECK_THAT(f, Contains("ranks [2] never joined"));
}

TEST_CASE("a rank that dies mid-job: the others get an error, not a hang", "[comm][gloo][faults]") {
  const auto start = std::chrono::steady_clock::now();
  const auto failures = run_processes(
      2,
      [](ProcessGroup& pg, Expectations& e) {
        pg.barrier()->wait();            // both fully connected
        if (pg.rank() == 1) ::_exit(0);  // then rank 1 dies
        expect_allreduce_error(pg, e, tensor::ones({1000}), "allreduce (rank 0 of 2");
      },
      std::chrono::milliseconds(30000), nullptr, /*finishers=*/1);
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
}

// The same for allreduces on the TCP ring: a peer that died gives an error naming it within
// seconds, and the ring then refuses further allreduces at once (data was left in flight); a
// peer that never takes part gives a TimeoutError after the group's timeout. The desync check
// is off here: its exchange would meet the dead peer first (tests/comm/faults_test.cc has that
// case), and this is the ring's own handling.
TEST_CASE("large allreduces: a dead or absent peer gives an error within the timeout", "[comm][gloo][ring][faults]") {
  const auto failures = run_processes(
      3,
      [](ProcessGroup& pg, Expectations& e) {
        pg.barrier()->wait();
        if (pg.rank() == 2) ::_exit(0);
        const Tensor t = tensor::ones({1 << 20});  // 4 MiB
        // Rank 0 receives from rank 2, rank 1 sends to it: each names rank 2.
        expect_allreduce_error(pg, e, t, "rank 2");
        expect_allreduce_error(pg, e, t,
                               "an earlier collective on the ring (allreduce, reduce_scatter or allgather) failed");
        // Stay a moment: a survivor that exits at once closes its own connections, and the
        // other survivor could see that before the dead rank's.
        std::this_thread::sleep_for(std::chrono::seconds(1));
      },
      std::chrono::milliseconds(20000), [](int) { ::setenv("TINYDDP_DESYNC_CHECK", "0", 1); }, /*finishers=*/2);
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());

  auto store = std::make_shared<HashStore>();
  std::string message;
  std::thread absent([&] {
    ProcessGroupOptions options;
    options.timeout(std::chrono::milliseconds(1500));
    options.check_calls(false);
    ProcessGroupGloo pg(store, 1, 2, options);
    pg.barrier()->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // never joins the allreduce
  });
  {
    ProcessGroupOptions options;
    options.timeout(std::chrono::milliseconds(1500));
    options.check_calls(false);
    ProcessGroupGloo pg(store, 0, 2, options);
    pg.barrier()->wait();
    const auto before = std::chrono::steady_clock::now();
    try {
      pg.allreduce(tensor::ones({1 << 20}))->wait();
    } catch (const TimeoutError& ex) {
      message = ex.what();
    }
    const auto took = std::chrono::steady_clock::now() - before;
    CHECK(took >= std::chrono::milliseconds(1400));
    CHECK(took < std::chrono::seconds(5));
  }
  absent.join();
  CHECK_THAT(message, Contains("timed out") && Contains("rank 1"));
}

// ---- CUDA tensors: Gloo staging through the host, and NCCL -------------------------------------
