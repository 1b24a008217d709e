// Where a process learns its place in the job: the variables of whatever started it.
//   launch / torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI (mpirun):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                       OMPI_COMM_WORLD_LOCAL_SIZE
//   Slurm (srun):       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// in that order of precedence (RANK set by hand wins over the rest). The master is
// MASTER_ADDR (under Slurm, SLURM_LAUNCH_NODE_IPADDR when MASTER_ADDR is unset) and
// MASTER_PORT, which mpirun and srun do not set: export them to the job.
#pragma once

#include <optional>
#include <string>

namespace tinyddp::comm {

struct LaunchEnv {
  std::string source;  // "launch", "Open MPI", "Slurm", or "none"
  // The variable the world size is read from (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS),
  // for messages about it; WORLD_SIZE when nothing launched this process.
  std::string world_size_variable = "WORLD_SIZE";
  std::optional<int> rank, world_size, local_rank, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// The value of environment variable `name`, or nothing when it is unset or empty.
std::optional<std::string> env_value(const char* name);

// Reads the environment; a variable that is set but not an integer throws tinyddp::Error
// naming it.
LaunchEnv launch_env();

}  // namespace tinyddp::comm
