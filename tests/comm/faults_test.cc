// A peer that stops taking part (a rank frozen by SIGSTOP, stuck, or gone): every Gloo
// collective fails within the group's timeout with an error that names the rank it waited
// for, whichever path it took (the small-allreduce mesh, Gloo's own algorithms, the TCP ring),
// and a peer that died is named by every survivor, in groups larger than two too.
#include <chrono>
#include <functional>
#include <thread>

#include <unistd.h>

#include "tinyddp/comm/comm.h"
#include "tests/comm/comm_test_util.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;

namespace {

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
      {"allgather", [](ProcessGroup& pg) {
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
            e.expect(message.find("rank 2") != std::string::npos, "attempt " + std::to_string(attempt) + ": " + message);
            e.expect(std::chrono::steady_clock::now() - before < std::chrono::seconds(10), "the error took 10 s or more");
          }
          std::this_thread::sleep_for(std::chrono::seconds(1));  // see rank 2 go before the other survivor
        },
        std::chrono::milliseconds(20000), nullptr, /*finishers=*/2);
    tinyddp::testing::require_no_failures(failures);
  }
}
