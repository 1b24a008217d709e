// spawn_local (spawn.h): a forked process per local rank with the launcher's variables set,
// their exit codes collected; and free_loopback_port for MASTER_PORT.
#include "tinyddp/launcher/spawn.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "tinyddp/base/error.h"

namespace tinyddp::launcher {

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  TDDP_CHECK(fd >= 0, "free_loopback_port: socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
  ::close(fd);
  TDDP_CHECK(ok, "free_loopback_port: could not bind a port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

int spawn_local(int nproc, const std::function<int(int rank)>& rank_main, int port) {
  TDDP_CHECK(nproc >= 1, "spawn_local: nproc must be >= 1, got {}", nproc);
  const std::string master_port = std::to_string(port > 0 ? port : free_loopback_port());
  std::vector<pid_t> children;
  int failures = 0;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", master_port.c_str(), 1);
      int status = 1;
      try {
        status = rank_main(rank);
      } catch (...) {  // rank_main reports its own errors; an escape must not unwind the parent's stack
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    if (pid < 0) {
      ++failures;
      continue;
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures;
}

}  // namespace tinyddp::launcher
