// The launcher behind //launcher:launch: starts one worker process per local rank with the
// variables torchrun sets, prefixes their output with the rank, and stops the whole group
// when one fails (restarting it up to max_restarts times).
//
// Node 0's launcher hosts the job's TCPStore (workers are its clients:
// TINYDDP_STORE_HOSTED=1); the launchers of other nodes connect to it first, so an
// unreachable master is reported by the launcher, not by every worker. Each attempt gets a
// store namespace of its own (TINYDDP_STORE_PREFIX), so a restarted group never reads the
// keys of the one before.
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

namespace tinyddp::launcher {

// The launcher's command-line values (a Config: a plain struct CLI11 fills field by field;
// options types are written otherwise, docs/using.md "Options: one style").
struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port (single node only)
  int max_restarts = 0;
  std::string log_dir;                            // when set: worker output goes to <log_dir>/attempt_<k>/rank_<r>.log
  bool tee = false;                               // with log_dir: to the console as well
  bool cpu_bind = false;                          // pin each worker to its own share of the node's cores
  std::chrono::milliseconds grace_period{5000};   // SIGTERM, then SIGKILL after this
  std::chrono::milliseconds rdzv_timeout{60000};  // for the nodes to meet through the store
  std::vector<std::string> program;               // the program and its arguments

  // An elastic job (torchrun's --nnodes MIN:MAX with --rdzv_endpoint): nodes come and go
  // between min_nodes and max_nodes, ranks come from the rendezvous (elastic.h), and every
  // change of membership restarts the workers at the new size (elastic_agent.cc). The node at
  // rdzv_endpoint hosts the store; nnodes, node_rank, master_addr and master_port are unused.
  std::string rdzv_endpoint;  // host:port; empty: a static job
  std::string rdzv_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds rdzv_last_call{30000};   // once min_nodes are in, how long to wait for more
  std::chrono::milliseconds monitor_interval{1000};  // heartbeats; a node is lost after two without one
  bool elastic() const { return !rdzv_endpoint.empty(); }
};

// Throws tinyddp::Error naming the first bad option, a static job's or an elastic one's
// (validate_elastic).
void validate(const LaunchConfig& options);

// How a node's cores are shared among its `workers`: each gets `threads` intra-op threads
// (TINYDDP_NUM_THREADS) unless the user set that variable, and with --cpu_bind the CPUs of its
// own cores (cpus[local rank]: consecutive physical cores with their hyperthreads; when there
// are more workers than cores, the cores are dealt out in turn).
struct CoreShare {
  int threads = 1;
  std::vector<std::vector<int>> cpus;  // per local worker; empty without --cpu_bind
  std::string message;                 // what was chosen, for the launcher's log
};
CoreShare share_cores(const LaunchConfig& options, const std::vector<std::vector<int>>& cores, int usable_cores,
                      const char* user_threads);

// Runs the job (an elastic one when options.elastic()); returns the exit status for the launcher: 0 when every worker
// of the last attempt exited 0, else the status of the first worker that failed (128 + signal for a signal), or 128 +
// signal when the launcher itself was interrupted. Launcher messages go to `log` ("launch: ..."); worker output to
// stdout/stderr as "[rank R] line".
int launch(const LaunchConfig& options, std::ostream& log);

}  // namespace tinyddp::launcher
