// One node's workers for one attempt (internal to the launcher): spawned with the variables
// torchrun sets, their output copied line by line, reaped, and stopped together (SIGTERM, then
// SIGKILL after the grace period) on the first failure, on a signal to the launcher, or when
// the other nodes ask for it through a PeerWatch. The static launcher (launcher.cc) runs one
// group per attempt; the elastic agent (elastic_agent.cc) one per round.
#pragma once

#include <csignal>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/launcher/launcher.h"

namespace tinyddp::launcher {

// What a node learns from the other nodes while its workers run, on a thread of its own: it
// hears this node's failure (report) and, when the others want this node's workers stopped,
// writes kPeerWoke into the launcher's wake pipe (wake_fd()) and says why (stop_reason).
class PeerWatch {
 public:
  virtual ~PeerWatch() = default;
  virtual void report(const std::string& failure) = 0;
  // Why this node's workers must stop for the others' sake ("another node failed (node 1: rank
  // 1 exited with status 3)"), or empty while they need not.
  virtual std::string stop_reason() const = 0;
};

// The byte a PeerWatch writes into the wake pipe.
constexpr unsigned char kPeerWoke = 0;
// The write end of the pipe the launcher's poll loop wakes on (signals and PeerWatch bytes);
// valid while a SignalScope lives.
int wake_fd();

// Installs the launcher's signal handlers (SIGINT, SIGTERM, SIGCHLD into the wake pipe;
// SIGPIPE ignored) for its lifetime and puts the old ones back afterwards.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  std::map<int, struct sigaction> saved_;
};

struct GroupSpec {
  int attempt = 0;                                       // the log folder's number: <log_dir>/attempt_<k>
  int first_rank = 0;                                    // RANK of local rank 0
  std::vector<std::pair<std::string, std::string>> env;  // set for every worker (RANK, LOCAL_RANK added)
};

// How a group ended.
struct GroupResult {
  int failed_rank = -1;     // the first of this node's workers that failed, or -1
  int failed_status = 0;    // its wait status
  int interrupted_by = 0;   // the signal the launcher got, or 0
  std::string peer_reason;  // the PeerWatch's stop_reason when the others stopped this node, or empty
  bool succeeded() const { return failed_rank < 0 && interrupted_by == 0 && peer_reason.empty(); }
};

// Starts options.nproc_per_node workers as `spec` says and runs until all have ended. `watch`
// (may be null) hears this node's failure and may stop the group for the others.
GroupResult run_group(const LaunchConfig& options, const GroupSpec& spec, const CoreShare& share, PeerWatch* watch,
                      std::ostream& log);

}  // namespace tinyddp::launcher
