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

// Where a group's workers stand in the job. Each worker is told it in torchrun's variables
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID) and tinyddp's
// (TINYDDP_STORE_HOSTED, TINYDDP_STORE_PREFIX, TINYDDP_RESTART_COUNT).
struct GroupSpec {
  int attempt = 0;           // the log folder's number: <log_dir>/attempt_<k>
  std::string store_prefix;  // the workers' namespace in the launcher's store ("attempt_<k>/")
  int first_rank = 0;        // RANK of local rank 0
  int world_size = 0;
  int group_rank = 0;  // this node's place among the nodes
  std::string master_addr;
  int master_port = 0;  // the launcher's store, which the workers use
  int64_t restarts = 0;
  std::string run_id = "none";
};

// How a group ended.
struct GroupResult {
  int failed_rank = -1;     // the first of this node's workers that failed, or -1
  int failed_status = 0;    // its wait status
  int interrupted_by = 0;   // the signal the launcher got, or 0
  std::string peer_reason;  // the PeerWatch's stop_reason when the others stopped this node, or empty
  // Every worker ended with 0 or kRequeueExitStatus (base/exit_status.h), some with the latter:
  // they stopped after a step on SIGUSR1 or SIGTERM, for the job to be run again.
  bool requeue = false;
  bool succeeded() const { return failed_rank < 0 && interrupted_by == 0 && peer_reason.empty() && !requeue; }
};

// Starts options.nproc_per_node workers as `spec` says and runs until all have ended. `watch`
// (may be null) hears this node's failure and may stop the group for the others.
GroupResult run_group(const LaunchConfig& options, const GroupSpec& spec, const CoreShare& share, PeerWatch* watch,
                      std::ostream& log);

}  // namespace tinyddp::launcher
