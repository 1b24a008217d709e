// A peer that stops taking part (a rank frozen by SIGSTOP, stuck, or gone): every Gloo
// collective fails within the group's timeout with an error that names the rank it waited
// for, whichever path it took (the small-allreduce mesh, Gloo's own algorithms, the TCP ring).
#include <chrono>
#include <functional>
#include <thread>

#include "comm/comm.h"
#include "tests/test_util.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;

namespace {

// Rank 1 joins and passes one barrier, then sits out; rank 0 runs `collective` and returns its
// error message (empty if none).
std::string error_with_absent_rank_1(const std::function<void(ProcessGroup&)>& collective) {
  auto store = std::make_shared<HashStore>();
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(1000);
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
