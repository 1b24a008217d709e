// init_process_group and init_from_env (init.h): reading RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT, hosting or joining the TCPStore, the backend's group, and the default group
// every collective without an explicit one uses.
#include "tinyddp/comm/init.h"

#include <charconv>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "tinyddp/base/distributed_info.h"
#include "tinyddp/comm/gloo/process_group_gloo.h"
#include "tinyddp/comm/launch_env.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/comm/process_group_wrapper.h"
#include "tinyddp/comm/socket.h"
#include "tinyddp/comm/tcp_store.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::comm {

namespace {

std::mutex default_mutex;
std::shared_ptr<ProcessGroup> default_pg;

// `given` (InitOptions), else what the environment says (launch_env.h), else an error naming
// the variable.
int required_int(const std::optional<int>& given, const std::optional<int>& from_env, const char* name) {
  if (given) return *given;
  TDDP_CHECK(
      from_env.has_value(),
      "init_process_group: {} is not set (the launcher sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; mpirun "
      "and srun set the rank and size, and MASTER_ADDR and MASTER_PORT must be exported to the job; or pass it in "
      "InitOptions)",
      name);
  return *from_env;
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// The address this rank's transport binds to and publishes to its peers: the options', else
// TINYDDP_BIND_ADDR, else loopback for a master on loopback, else this host's address on the
// route to the master (so no configuration finds the interface that reaches the other hosts).
// A loopback address given for a master on another host would leave the peers unable to
// connect: refused, naming both.
std::string bind_address(const InitOptions& options, const std::string& master_addr, int rank) {
  std::optional<std::string> given = options.bind_address();
  const char* source = "InitOptions::bind_address";
  if (!given) {
    given = env_value("TINYDDP_BIND_ADDR");
    source = "TINYDDP_BIND_ADDR";
  }
  if (is_loopback(master_addr)) return given.value_or("127.0.0.1");
  const net::Route route = net::route_toward(master_addr);
  TDDP_CHECK(given || !route.local.empty(),
             "init_process_group: rank {} cannot find its address toward MASTER_ADDR {}: {} (check MASTER_ADDR, or "
             "set TINYDDP_BIND_ADDR to this host's address that the other hosts reach)",
             rank, master_addr, route.why);
  if (!given) return route.local;
  // The master is on this host when the route to it starts from its own address.
  const bool master_here = !route.local.empty() && route.local == route.remote;
  TDDP_CHECK(!is_loopback(*given) || master_here,
             "init_process_group: rank {} would publish the loopback address {} ({}) to peers that reach the master "
             "at MASTER_ADDR {}{}, another host: they could not connect to it; unset {} (the address on the route "
             "to MASTER_ADDR{} is found by itself) or set it to this host's address",
             rank, *given, source, master_addr, route.remote.empty() ? "" : " (" + route.remote + ")", source,
             route.local.empty() ? "" : ", " + route.local + ",");
  return *given;
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend, const InitOptions& options) {
  TDDP_CHECK(backend == "gloo" || backend == "nccl",
             "init_process_group: unknown backend '{}' (expected 'gloo' for CPU tensors or 'nccl' for CUDA tensors)",
             backend);
  TDDP_CHECK(backend != "nccl" || tensor::cuda::is_available(),
             "init_process_group: the 'nccl' backend needs a GPU: {}", tensor::cuda::unavailable_reason());
  const LaunchEnv launched = launch_env();
  const int world_size = required_int(options.world_size(), launched.world_size, "WORLD_SIZE");
  TDDP_CHECK(world_size >= 1, "init_process_group: WORLD_SIZE must be >= 1, got {}", world_size);
  const int rank =
      world_size == 1 && !options.rank() && !launched.rank ? 0 : required_int(options.rank(), launched.rank, "RANK");
  TDDP_CHECK(rank >= 0 && rank < world_size, "init_process_group: RANK {} is not in [0, {})", rank, world_size);
  const std::string master_addr = options.master_addr().value_or(launched.master_addr.value_or("127.0.0.1"));

  ProcessGroupOptions pg_options;
  pg_options.timeout(options.timeout());
  pg_options.bind_address(bind_address(options, master_addr, rank));

  std::shared_ptr<Store> store;
  if (world_size == 1) {
    store = std::make_shared<HashStore>();  // no network for a world of one
  } else {
    TCPStoreOptions store_options;
    store_options.host(master_addr);
    store_options.port(static_cast<uint16_t>(required_int(options.master_port(), launched.master_port, "MASTER_PORT")));
    TDDP_CHECK(store_options.port() > 0, "init_process_group: MASTER_PORT must be in [1, 65535]");
    store_options.is_server(options.host_store().value_or(rank == 0 && env_value("TINYDDP_STORE_HOSTED") != "1"));
    store_options.timeout(options.timeout());
    try {
      store = std::make_shared<TCPStore>(store_options);
    } catch (const Error& e) {
      throw Error(fmt::format("init_process_group: rank {} of {} could not reach the store at {}:{}: {}", rank,
                              world_size, master_addr, store_options.port(), e.what()));
    }
  }
  // A launcher that restarts its workers gives each attempt its own namespace in its store.
  if (const auto prefix = env_value("TINYDDP_STORE_PREFIX")) store = std::make_shared<PrefixStore>(*prefix, store);
  store->set_timeout(options.timeout());
  if (backend == "nccl") {
    // One process per GPU: the main thread works on cuda:LOCAL_RANK from now on (unless the
    // program chose a device already), and the group's helper threads adopt it when they start
    // (tensor/cuda_runtime/device_guard.h); without LOCAL_RANK, the device is bound at the first
    // collective.
    if (launched.local_rank && tensor::cuda::current_device() < 0) {
      tensor::cuda::set_device(*launched.local_rank % tensor::cuda::device_count());
    }
  }
  std::shared_ptr<ProcessGroup> pg = new_process_group(backend, store, rank, world_size, pg_options);
  std::lock_guard<std::mutex> lock(default_mutex);
  default_pg = pg;
  base::set_distributed_info(base::DistributedInfo{pg->rank(), pg->size()});
  return pg;
}

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                int size, const ProcessGroupOptions& options) {
  TDDP_CHECK(backend == "gloo" || backend == "nccl",
             "new_process_group: unknown backend '{}' (expected 'gloo' for CPU tensors or 'nccl' for CUDA tensors)",
             backend);
  std::shared_ptr<ProcessGroup> inner;
  if (backend == "nccl") {
    inner = std::make_shared<ProcessGroupNccl>(store, rank, size, options);
  } else {
    inner = std::make_shared<ProcessGroupGloo>(store, rank, size, options);
  }
  if (size == 1) return inner;
  auto checked = std::make_shared<ProcessGroupWrapper>(std::move(inner), std::move(store), options);
  if (backend == "gloo") checked->agree();  // the constructor met every rank already
  return checked;
}

std::shared_ptr<ProcessGroup> init_from_env() { return init_process_group("gloo"); }

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(default_mutex);
  TDDP_CHECK(default_pg != nullptr, "default_group: no process group yet; call init_process_group() first");
  return default_pg;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(default_mutex);
  return default_pg != nullptr;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(default_mutex);
  default_pg.reset();
  base::set_distributed_info(std::nullopt);
}

int local_rank() { return launch_env().local_rank.value_or(0); }

}  // namespace tinyddp::comm
