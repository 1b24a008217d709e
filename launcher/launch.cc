// //launcher:launch: torchrun for tinyddp programs.
//   launch --nproc_per_node 2 -- bazel-bin/examples/train --steps 100
//   bazel run //launcher:launch -- --nproc_per_node 2 -- bazel-bin/examples/train
// See launcher.h for what each worker gets and how failures are handled.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "tinyddp/base/error.h"
#include "tinyddp/launcher/elastic.h"
#include "tinyddp/launcher/elastic_agent.h"
#include "tinyddp/launcher/launcher.h"

namespace {
// --nnodes: "N", or torchrun's "MIN:MAX". Sets the static job's nnodes (MIN = MAX) and the
// elastic job's range; an elastic range without --rdzv_endpoint is refused by name.
void parse_nnodes(const std::string& text, tinyddp::launcher::LaunchConfig& o) {
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    const int min = std::stoi(text.substr(0, colon), &used);
    if (used != text.substr(0, colon).size()) throw std::invalid_argument(text);
    int max = min;
    if (colon != std::string::npos) {
      const std::string rest = text.substr(colon + 1);
      max = std::stoi(rest, &used);
      if (used != rest.size()) throw std::invalid_argument(text);
    }
    o.nnodes = min;
    o.min_nodes = min;
    o.max_nodes = max;
  } catch (const std::logic_error&) {  // stoi's invalid_argument and out_of_range
    throw tinyddp::Error("launch: --nnodes takes a number or MIN:MAX, got '" + text + "'");
  }
  tinyddp::launcher::ElasticOptions range;
  range.min_nodes = o.min_nodes;
  range.max_nodes = o.max_nodes;
  tinyddp::launcher::validate(range);
  TDDP_CHECK(o.min_nodes == o.max_nodes || o.elastic(),
             "launch: --nnodes {} asks for an elastic job (nodes joining and leaving between MIN and MAX): give "
             "--rdzv_endpoint HOST:PORT (the node there hosts the store), or one number for a static job",
             text);
}
}  // namespace

int main(int argc, char** argv) {
  // `bazel run @tinyddp//launcher:launch -- ... bazel-bin/prog` starts the launcher in its
  // runfiles directory; relative paths (the program, its arguments, --log_dir) mean the
  // directory the command was typed in, which Bazel passes as BUILD_WORKING_DIRECTORY.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) {
      std::cerr << "launch: cannot change to BUILD_WORKING_DIRECTORY=" << dir << ": " << std::strerror(errno) << "\n";
      return 2;
    }
  }
  tinyddp::launcher::LaunchConfig o;
  double grace_s = 5, rdzv_timeout_s = 60;
  CLI::App app{
      "Start one process per local rank with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR\n"
      "and MASTER_PORT set (as torchrun does), print their output prefixed with the rank, and stop them all when\n"
      "one fails.\n\nUsage: launch [OPTIONS] -- PROGRAM [ARGS...]",
      "launch"};
  app.add_option("--nproc_per_node", o.nproc_per_node, "worker processes on this node (default 1)");
  std::string nnodes = "1";
  app.add_option("--nnodes", nnodes,
                 "nodes in the job (default 1), or MIN:MAX for an elastic job (with --rdzv_endpoint)");
  app.add_option("--node_rank", o.node_rank, "this node's rank, 0 to nnodes-1 (default 0)");
  app.add_option("--master_addr", o.master_addr, "address of node 0, which hosts the job's store (default 127.0.0.1)");
  app.add_option("--master_port", o.master_port,
                 "port of the store on node 0 (default: a free port; needed with --nnodes > 1)");
  app.add_option("--max_restarts", o.max_restarts,
                 "restart the whole group up to this many times after a failure (default 0)");
  app.add_option("--log_dir", o.log_dir,
                 "write each worker's output to LOG_DIR/attempt_<k>/rank_<r>.log instead of the console");
  app.add_flag("--tee", o.tee, "with --log_dir: print to the console as well");
  app.add_flag("--cpu_bind", o.cpu_bind,
               "pin each worker to its own share of this node's physical cores (with their hyperthreads)");
  app.add_option("--grace_period", grace_s, "seconds between SIGTERM and SIGKILL when stopping workers (default 5)");
  app.add_option("--rdzv_timeout", rdzv_timeout_s,
                 "seconds for the nodes to meet through the store, or an elastic round to reach MIN (default 60)");
  double last_call_s = 30, monitor_s = 1;
  app.add_option("--rdzv_endpoint", o.rdzv_endpoint,
                 "HOST:PORT of an elastic job's store, hosted by the node at that address; ranks come from the "
                 "rendezvous");
  app.add_option("--rdzv_id", o.rdzv_id, "the elastic job's id; a node with another id is refused (default none)");
  app.add_option("--rdzv_last_call", last_call_s,
                 "seconds an elastic round waits for more nodes once MIN have joined (default 30)");
  app.add_option("--monitor_interval", monitor_s,
                 "seconds between heartbeats in an elastic job; a node is lost after two missed (default 1)");
  app.prefix_command();  // everything from the program on belongs to the program
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.program = app.remaining();
  if (!o.program.empty() && o.program.front() == "--") o.program.erase(o.program.begin());
  o.grace_period = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  o.rdzv_timeout = std::chrono::milliseconds(static_cast<int64_t>(rdzv_timeout_s * 1000));
  o.rdzv_last_call = std::chrono::milliseconds(static_cast<int64_t>(last_call_s * 1000));
  o.monitor_interval = std::chrono::milliseconds(static_cast<int64_t>(monitor_s * 1000));
  try {
    parse_nnodes(nnodes, o);
    tinyddp::launcher::validate(o);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  try {
    return tinyddp::launcher::launch(o, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
