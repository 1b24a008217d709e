// The static launcher (launcher.h): node 0 hosts the store, the nodes meet for each attempt,
// and each attempt runs this node's worker group (worker_group.h) until it ends; a failure
// restarts every node's group, up to --max_restarts times.
#include "tinyddp/launcher/launcher.h"

#include <memory>

#include <fmt/format.h>

#include "tinyddp/base/cpus.h"
#include "tinyddp/base/error.h"
#include "tinyddp/base/exit_status.h"
#include "tinyddp/launcher/elastic_agent.h"
#include "tinyddp/launcher/failure_watch.h"
#include "tinyddp/launcher/processes.h"
#include "tinyddp/launcher/rendezvous.h"
#include "tinyddp/launcher/worker_group.h"

namespace tinyddp::launcher {

void validate(const LaunchConfig& o) {
  TDDP_CHECK(!o.program.empty(), "launch: no program given (usage: launch --nproc_per_node N -- PROGRAM [ARGS...])");
  TDDP_CHECK(o.nproc_per_node >= 1, "launch: --nproc_per_node must be at least 1, got {}", o.nproc_per_node);
  if (o.elastic()) {
    validate_elastic(o);  // the rendezvous endpoint and MIN:MAX in place of the master and --nnodes
  } else {
    TDDP_CHECK(o.nnodes >= 1, "launch: --nnodes must be at least 1, got {}", o.nnodes);
    TDDP_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes,
               "launch: --node_rank {} is out of range for --nnodes {} (0 to {})", o.node_rank, o.nnodes, o.nnodes - 1);
    TDDP_CHECK(o.master_port >= 0 && o.master_port <= 65535, "launch: --master_port {} is not a TCP port",
               o.master_port);
    TDDP_CHECK(o.nnodes == 1 || o.master_port > 0,
               "launch: --master_port is needed when --nnodes > 1 (every node must use the same)");
    TDDP_CHECK(!o.master_addr.empty(), "launch: --master_addr is empty");
  }
  TDDP_CHECK(o.max_restarts >= 0, "launch: --max_restarts must be at least 0, got {}", o.max_restarts);
  TDDP_CHECK(!o.tee || !o.log_dir.empty(),
             "launch: --tee copies the per-rank log files to the console; it needs --log_dir");
  TDDP_CHECK(o.grace_period.count() >= 0, "launch: --grace_period must not be negative");
}

int launch(const LaunchConfig& options, std::ostream& log) {
  validate(options);
  const CoreShare share =
      share_cores(options, available_cores(), available_physical_cores(), std::getenv("TINYDDP_NUM_THREADS"));
  log << share.message << std::endl;
  const SignalScope signals;
  if (options.elastic()) return run_elastic(options, share, log);
  const std::shared_ptr<comm::TCPStore> store = open_store(options);
  for (int attempt = 0;; ++attempt) {
    meet_nodes(options, *store, attempt);
    GroupSpec spec;
    spec.attempt = attempt;
    spec.store_prefix = fmt::format("attempt_{}/", attempt);
    spec.first_rank = options.node_rank * options.nproc_per_node;
    spec.world_size = options.nnodes * options.nproc_per_node;
    spec.group_rank = options.node_rank;
    spec.master_addr = options.master_addr;
    spec.master_port = store->port();
    spec.restarts = attempt;
    std::unique_ptr<FailureWatch> watch;
    if (options.nnodes > 1) watch = std::make_unique<FailureWatch>(options, attempt, wake_fd(), kPeerWoke);
    const GroupResult group = run_group(options, spec, share, watch.get(), log);
    const std::string remote = watch ? watch->remote_failure() : std::string();
    // The watch lives through leave_nodes: its thread may not have sent this node's failure to
    // the others yet, and a node whose rank hangs learns of it only that way.
    leave_nodes(options, *store, attempt, log);
    if (group.requeue) {
      log << fmt::format("launch: the workers stopped for a requeue; exit status {}", kRequeueExitStatus) << std::endl;
      return kRequeueExitStatus;
    }
    if (group.interrupted_by != 0) return 128 + group.interrupted_by;
    if (group.succeeded()) return 0;
    if (attempt < options.max_restarts) {
      log << fmt::format("launch: restarting the workers (restart {} of {})", attempt + 1, options.max_restarts)
          << std::endl;
      continue;
    }
    const std::string restarts =
        options.max_restarts > 0 ? fmt::format(" (after {} restarts)", options.max_restarts) : "";
    if (group.failed_rank < 0) {
      log << fmt::format("launch: failed: {}{}", remote, restarts) << std::endl;
      return 1;
    }
    log << fmt::format("launch: failed: rank {} {}{}", group.failed_rank, describe(group.failed_status), restarts)
        << std::endl;
    return exit_code(group.failed_status);
  }
}

}  // namespace tinyddp::launcher
