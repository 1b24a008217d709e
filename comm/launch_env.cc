// launch_env (launch_env.h): a process's rank, world size and local rank from the variables of
// the launcher (or torchrun), Open MPI or Slurm, in that order of precedence.
#include "tinyddp/comm/launch_env.h"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "tinyddp/base/error.h"

namespace tinyddp::comm {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

namespace {

std::optional<int> env_int(const char* name) {
  const std::optional<std::string> text = env_value(name);
  if (!text) return std::nullopt;
  int value = 0;
  const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  TDDP_CHECK(ec == std::errc() && ptr == text->data() + text->size(), "init_process_group: {}='{}' is not an integer",
             name, *text);
  return value;
}

// Slurm's SLURM_NTASKS_PER_NODE is "2", or "2(x3)" / "2,1" on uneven allocations: the first count.
std::optional<int> slurm_tasks_per_node() {
  const std::optional<std::string> text = env_value("SLURM_NTASKS_PER_NODE");
  if (!text) return std::nullopt;
  int value = 0;
  const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  return ec == std::errc() && ptr != text->data() ? std::optional<int>(value) : std::nullopt;
}

// Under a launcher (launch, torchrun, mpirun, srun) a rank's stdout is a pipe, which C stdio
// buffers in blocks of 4 KiB: the lines a rank printed before it crashed would die in its
// buffer, and the launcher would show the crash without them. So stdout is made line-buffered
// there, as on a terminal, before main() writes anything (std::cout writes through it).
// TINYDDP_STDOUT_BUFFERED=1 keeps the block buffer (docs/launcher.md).
const bool stdout_line_buffered = [] {
  const bool launched = env_value("RANK") || env_value("OMPI_COMM_WORLD_RANK") || env_value("SLURM_PROCID");
  const bool keep = env_value("TINYDDP_STDOUT_BUFFERED").value_or("0") == "1";
  if (!launched || keep || isatty(STDOUT_FILENO)) return false;
  return std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ) == 0;
}();

// mpirun's and srun's own variables must agree with each other: the rank below the size, the
// local rank below the local size (Open MPI's; Slurm's per-node count is only checked when
// every node has the same). A disagreement names the variables and their values.
void check_agreement(const LaunchEnv& e, const char* rank, const char* size, const char* local_rank,
                     const char* local_size) {
  // (a size unset is no disagreement: sbatch's batch step may carry SLURM_PROCID alone, and a
  // program started there trains alone)
  if (!e.world_size) return;
  TDDP_CHECK(*e.rank >= 0 && *e.rank < *e.world_size,
             "init_process_group: {}={} is not in [0, {}={}) ({}'s variables disagree)", rank, *e.rank, size,
             *e.world_size, e.source);
  if (e.local_rank && e.local_world_size && local_size) {
    TDDP_CHECK(*e.local_rank >= 0 && *e.local_rank < *e.local_world_size,
               "init_process_group: {}={} is not in [0, {}={}) ({}'s variables disagree)", local_rank, *e.local_rank,
               local_size, *e.local_world_size, e.source);
  }
}

}  // namespace

LaunchEnv launch_env() {
  LaunchEnv e;
  if (env_value("RANK") || env_value("WORLD_SIZE")) {
    e.source = "launch";
    e.rank = env_int("RANK");
    e.world_size = env_int("WORLD_SIZE");
    e.local_rank = env_int("LOCAL_RANK");
    e.local_world_size = env_int("LOCAL_WORLD_SIZE");
  } else if (env_value("OMPI_COMM_WORLD_RANK")) {
    e.source = "Open MPI";
    e.rank = env_int("OMPI_COMM_WORLD_RANK");
    e.world_size_variable = "OMPI_COMM_WORLD_SIZE";
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE");
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    e.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    check_agreement(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (env_value("SLURM_PROCID")) {
    e.source = "Slurm";
    e.rank = env_int("SLURM_PROCID");
    e.world_size_variable = "SLURM_NTASKS";
    e.world_size = env_int("SLURM_NTASKS");
    e.local_rank = env_int("SLURM_LOCALID");
    e.local_world_size = slurm_tasks_per_node();
    const std::string per_node = env_value("SLURM_NTASKS_PER_NODE").value_or("");
    const bool uniform = per_node.find(',') == std::string::npos;  // "2" or "2(x3)", not "2,1"
    check_agreement(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", uniform ? "SLURM_NTASKS_PER_NODE" : nullptr);
  } else {
    e.source = "none";
    e.local_rank = env_int("LOCAL_RANK");  // set alone by hand: still this process's device
    e.local_world_size = env_int("LOCAL_WORLD_SIZE");
  }
  e.master_addr = env_value("MASTER_ADDR");
  if (!e.master_addr && e.source == "Slurm") e.master_addr = env_value("SLURM_LAUNCH_NODE_IPADDR");
  e.master_port = env_int("MASTER_PORT");
  return e;
}

}  // namespace tinyddp::comm
