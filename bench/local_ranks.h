// Runs a benchmark as `nproc` local ranks: forks the processes and sets RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT for each, as a launcher would (until the launcher exists, and
// for a quick run without it). Returns 0 when every rank exited with 0.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace tinyddp::bench {

inline int run_local_ranks(int nproc, const std::function<int()>& rank_main) {
  const std::string port = std::to_string(20000 + (getpid() % 20000));
  std::vector<pid_t> children;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      _exit(rank_main());
    }
    if (pid < 0) return 1;
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tinyddp::bench
