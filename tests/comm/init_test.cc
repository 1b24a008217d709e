// init_process_group / init_from_env: the torchrun environment variables (and Open MPI's and
// Slurm's, launch_env.h), a world of one without a network, processes meeting through
// MASTER_ADDR:MASTER_PORT, and clear errors.
#include <cstdlib>
#include <map>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/nn/data.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;
using tinyddp::launcher::spawn_local;

namespace {
void clear_env() {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "TINYDDP_STORE_HOSTED", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                           "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_LAUNCH_NODE_IPADDR", "TINYDDP_BIND_ADDR"}) {
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
  CHECK(nn::DistributedSampler(nn::TensorDataset({tensor::arange(5.0)})).size() == 5);
  destroy_process_group();
  CHECK_FALSE(is_initialized());
  CHECK_THROWS_WITH(default_group(), Contains("no process group yet; call init_process_group() first"));
  CHECK_THROWS_WITH(nn::DistributedSampler(nn::TensorDataset({tensor::arange(5.0)})),
                    Contains("Default process group has not been initialized"));
  CHECK(nn::DistributedSampler(nn::TensorDataset({tensor::arange(5.0)}), 2, 1).size() == 3);  // given: no group needed
}

TEST_CASE("launch_env reads launch's, Open MPI's and Slurm's variables, in that order", "[comm][init]") {
  clear_env();
  CHECK(launch_env().source == "none");
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  ::setenv("SLURM_NTASKS_PER_NODE", "2(x4)", 1);
  ::setenv("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3", 1);
  LaunchEnv e = launch_env();
  CHECK(e.source == "Slurm");
  CHECK((e.rank == 3 && e.world_size == 8 && e.local_rank == 1 && e.local_world_size == 2));
  CHECK(e.master_addr == "10.1.2.3");  // Slurm's launch node, as MASTER_ADDR is unset
  ::setenv("MASTER_ADDR", "10.9.9.9", 1);
  CHECK(launch_env().master_addr == "10.9.9.9");  // MASTER_ADDR wins
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  e = launch_env();
  CHECK(e.source == "Open MPI");
  CHECK((e.rank == 1 && e.world_size == 2 && e.local_rank == 1 && e.local_world_size == 2));
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  e = launch_env();
  CHECK(e.source == "launch");
  CHECK((e.rank == 0 && e.world_size == 4));
  ::setenv("OMPI_COMM_WORLD_SIZE", "x", 1);
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK_THROWS_WITH(launch_env(), Contains("OMPI_COMM_WORLD_SIZE='x' is not an integer"));
  // Their own variables must agree: each disagreement named, with the values.
  ::setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  CHECK_THROWS_WITH(launch_env(), Contains("OMPI_COMM_WORLD_RANK=1 is not in [0, OMPI_COMM_WORLD_SIZE=1) (Open MPI's "
                                           "variables disagree)"));
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    ::unsetenv(name);
  }
  ::setenv("SLURM_LOCALID", "2", 1);  // with SLURM_NTASKS_PER_NODE 2(x4)
  CHECK_THROWS_WITH(launch_env(), Contains("SLURM_LOCALID=2 is not in [0, SLURM_NTASKS_PER_NODE=2)"));
  ::setenv("SLURM_NTASKS_PER_NODE", "1,3", 1);  // uneven: this node's count unknown, not checked
  CHECK(launch_env().local_rank == 2);
  ::setenv("SLURM_PROCID", "8", 1);
  CHECK_THROWS_WITH(launch_env(), Contains("SLURM_PROCID=8 is not in [0, SLURM_NTASKS=8)"));
  ::unsetenv("SLURM_NTASKS");  // a batch step's SLURM_PROCID alone: no size, nothing to disagree
  CHECK_FALSE(launch_env().world_size.has_value());
  clear_env();
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
  options.timeout(std::chrono::milliseconds(500));
  CHECK_THROWS_WITH(init_process_group("gloo", options),
                    Contains("rank 1 of 2 could not reach the store at 127.0.0.1:"));
  clear_env();
  CHECK(local_rank() == 0);
  ::setenv("LOCAL_RANK", "3", 1);
  CHECK(local_rank() == 3);
  clear_env();
}

TEST_CASE("the transport's address comes from the route to MASTER_ADDR; a loopback one for another host is refused",
          "[comm][init][errors]") {
  // (tests/cluster's jobs, on hosts in network namespaces, find their addresses this way)
  clear_env();
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_PORT", std::to_string(testing::free_port()).c_str(), 1);
  ::setenv("MASTER_ADDR", "no-such-host.invalid", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("rank 1 cannot find its address toward MASTER_ADDR no-such-host.invalid: "
                                              "'no-such-host.invalid' does not resolve"));
  // 192.0.2.1 (TEST-NET-1) is no address of this host.
  ::setenv("MASTER_ADDR", "192.0.2.1", 1);
  ::setenv("TINYDDP_BIND_ADDR", "127.0.0.1", 1);
  CHECK_THROWS_WITH(init_from_env(), Contains("rank 1 would publish the loopback address 127.0.0.1 (TINYDDP_BIND_ADDR) "
                                              "to peers that reach the master at MASTER_ADDR 192.0.2.1"));
  InitOptions options;
  options.bind_address("127.0.0.2");
  CHECK_THROWS_WITH(init_process_group("gloo", options),
                    Contains("the loopback address 127.0.0.2 (InitOptions::bind_address)"));
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
      // torch's DistributedSampler(dataset): this rank's share, from the default group
      const nn::TensorDataset dataset({tensor::arange(10.0)});
      nn::DistributedSampler from_group(dataset);
      const bool sampled =
          from_group.size() == 4 && from_group.indices() == nn::DistributedSampler(10, 3, rank).indices();
      const bool ok = t.to_vector<float>()[3] == 6.0f && sampled;
      destroy_process_group();
      return ok ? 0 : 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 2;
    }
  });
  CHECK(failed == 0);
}

TEST_CASE("torch.distributed's free functions run on the default group, or on the group given", "[comm][init]") {
  clear_env();
  CHECK_THROWS_WITH(comm::get_rank(), Contains("no process group yet; call init_process_group() first"));
  ::setenv("WORLD_SIZE", "1", 1);
  init_from_env();
  CHECK(comm::get_rank() == 0);
  CHECK(comm::get_world_size() == 1);
  CHECK(comm::get_backend() == "gloo");
  const Tensor t = tensor::full({3}, 2.0);
  CHECK(comm::all_reduce(t, ReduceOp::kAvg) == nullptr);  // waited
  CHECK(t.to_vector<float>()[2] == 2.0f);
  comm::all_reduce(t, ReduceOp::kSum, nullptr, true)->wait();
  comm::barrier();
  destroy_process_group();
  clear_env();
  // three ranks as threads, each passing its own group
  testing::require_no_failures(testing::run_threads(3, [](ProcessGroup& pg, testing::Expectations& e) {
    const GroupPtr group = testing::borrow(pg);
    e.expect_eq(comm::get_rank(group), pg.rank(), "get_rank");
    e.expect_eq(comm::get_world_size(group), 3, "get_world_size");
    const Tensor x = tensor::full({2}, static_cast<double>(pg.rank() + 1));
    comm::all_reduce(x, ReduceOp::kSum, group);
    e.expect_eq(static_cast<int>(x.to_vector<float>()[0]), 6, "all_reduce sum");
    const Tensor y = tensor::full({2}, static_cast<double>(pg.rank()));
    comm::broadcast(y, 2, group);
    e.expect_eq(static_cast<int>(y.to_vector<float>()[1]), 2, "broadcast from rank 2");
    std::vector<Tensor> gathered;
    for (int r = 0; r < 3; ++r) gathered.push_back(tensor::zeros({1}));
    comm::all_gather(gathered, tensor::full({1}, static_cast<double>(10 * pg.rank())), group);
    e.expect_eq(static_cast<int>(gathered[2].to_vector<float>()[0]), 20, "all_gather");
    // all_to_all: rank r sends 10 r + j to rank j, so rank j gets 10 i + j from each rank i
    std::vector<Tensor> in, out;
    for (int j = 0; j < 3; ++j) {
      in.push_back(tensor::full({2}, 10.0 * pg.rank() + j));
      out.push_back(tensor::zeros({2}));
    }
    comm::all_to_all(out, in, group);
    for (int i = 0; i < 3; ++i) {
      e.expect_eq(static_cast<int>(out[static_cast<size_t>(i)].to_vector<float>()[1]), 10 * i + pg.rank(),
                  "all_to_all from rank " + std::to_string(i));
    }
    // objects: a map per rank gathered; rank 1's list of strings broadcast
    std::vector<std::map<std::string, double>> metrics(3);
    comm::all_gather_object(metrics, std::map<std::string, double>{{"loss", 0.5 * pg.rank()}}, group);
    e.expect(metrics[2].at("loss") == 1.0, "all_gather_object: rank 2's map");
    std::vector<std::string> words = {"mine", std::to_string(pg.rank())};
    if (pg.rank() == 1) words = {"from", "one"};
    comm::broadcast_object_list(words, 1, group);
    e.expect(words == std::vector<std::string>{"from", "one"}, "broadcast_object_list: rank 1's list");
    std::vector<int> wrong(2);
    bool refused = false;
    try {
      comm::all_gather_object(wrong, 1, group);
    } catch (const std::exception& error) {
      refused = std::string(error.what()).find("one entry per rank (3), got 2") != std::string::npos;
    }
    e.expect(refused, "all_gather_object: a list of the wrong size is refused before any collective");
  }));
}
