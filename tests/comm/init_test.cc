// init_process_group / init_from_env: the torchrun environment variables, a world of one
// without a network, processes meeting through MASTER_ADDR:MASTER_PORT, and clear errors.
#include <cstdlib>

#include "comm/comm.h"
#include "launcher/spawn.h"
#include "tests/comm/comm_test_util.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using tinyddp::launcher::spawn_local;
using Catch::Contains;

namespace {
void clear_env() {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TINYDDP_STORE_HOSTED"}) {
    ::unsetenv(name);
  }
}
}  // namespace

TEST_CASE("a world of one needs no network", "[comm][init]") {
  clear_env();
  ::setenv("WORLD_SIZE", "1", 1);
  auto pg = init_from_env();
  CHECK(pg->rank() == 0);
  CHECK(pg->size() == 1);
  CHECK(default_group() == pg);
  const Tensor t = tensor::full({3}, 2.0);
  pg->allreduce(t)->wait();
  CHECK(t.to_vector<float>()[0] == 2.0f);
  destroy_process_group();
  CHECK_FALSE(is_initialized());
  CHECK_THROWS_WITH(default_group(), Contains("no process group yet; call init_process_group() first"));
}

TEST_CASE("missing or bad environment variables name themselves", "[comm][init][errors]") {
  clear_env();
  CHECK_THROWS_WITH(init_from_env(), Contains("init_process_group: WORLD_SIZE is not set"));
  ::setenv("WORLD_SIZE", "two", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("WORLD_SIZE='two' is not an integer"));
  ::setenv("WORLD_SIZE", "2", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("init_process_group: RANK is not set"));
  ::setenv("RANK", "2", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("RANK 2 is not in [0, 2)"));
  ::setenv("RANK", "1", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("MASTER_PORT is not set"));
  CHECK_THROWS_WITH(init_process_group("mpi"), Contains("unknown backend 'mpi'"));
  // A master that never answers: a bounded, clear failure.
  ::setenv("MASTER_PORT", std::to_string(testing::free_port()).c_str(), 1);
  InitOptions options;
  options.timeout = std::chrono::milliseconds(500);
  CHECK_THROWS_WITH(init_process_group("gloo", options), Contains("rank 1 of 2 could not reach the store at 127.0.0.1:"));
  clear_env();
  CHECK(local_rank() == 0);
  ::setenv("LOCAL_RANK", "3", 1);
  CHECK(local_rank() == 3);
  clear_env();
}

TEST_CASE("processes meet through MASTER_ADDR and MASTER_PORT, rank 0 hosting the store", "[comm][init][processes]") {
  clear_env();
  const int failed = spawn_local(3, [](int rank) {
    try {
      auto pg = init_from_env();
      const Tensor t = tensor::full({4}, rank + 1);
      pg->allreduce(t)->wait();
      pg->barrier()->wait();  // nobody leaves (taking the store with it) before everyone is done
      const bool ok = t.to_vector<float>()[3] == 6.0f;
      destroy_process_group();
      return ok ? 0 : 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 2;
    }
  });
  CHECK(failed == 0);
}
