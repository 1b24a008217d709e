// //launcher:launch: torchrun for tinyddp programs.
//   launch --nproc_per_node 2 -- bazel-bin/examples/train --steps 100
//   bazel run //launcher:launch -- --nproc_per_node 2 -- bazel-bin/examples/train
// See launcher.h for what each worker gets and how failures are handled.
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>

#include "tinyddp/base/error.h"
#include "tinyddp/launcher/elastic.h"
#include "tinyddp/launcher/elastic_agent.h"
#include "tinyddp/launcher/launcher.h"
#include "tinyddp/tensor/cuda.h"

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
// --nproc_per_node: a number, or torchrun's gpu (one worker per visible GPU), cpu (one per
// logical CPU) and auto (gpu when there is a GPU, else cpu).
int parse_nproc(const std::string& text) {
  const int gpus = text == "gpu" || text == "auto" ? tinyddp::tensor::cuda::device_count() : 0;
  if (text == "gpu") {
    TDDP_CHECK(
        gpus > 0, "launch: --nproc_per_node gpu: no GPU is visible ({})",
        tinyddp::tensor::cuda::is_built() ? "CUDA reports 0 devices" : tinyddp::tensor::cuda::unavailable_reason());
    return gpus;
  }
  if (text == "cpu" || (text == "auto" && gpus == 0))
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (text == "auto") return gpus;
  try {
    size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size()) return n;
  } catch (const std::logic_error&) {
  }
  throw tinyddp::Error("launch: --nproc_per_node takes a number, gpu, cpu or auto, got '" + text + "'");
}

// --standalone: torchrun's single-node job on a free local port. It names what it replaces, so
// a command that also says otherwise is refused rather than half obeyed.
void standalone_job(const tinyddp::launcher::LaunchConfig& o) {
  TDDP_CHECK(o.nnodes == 1 && o.max_nodes == 1,
             "launch: --standalone is a single-node job, but --nnodes asks for {}:{}", o.min_nodes, o.max_nodes);
  TDDP_CHECK(o.rdzv_endpoint.empty(), "launch: --standalone hosts its own store; drop --rdzv_endpoint {}",
             o.rdzv_endpoint);
}
// The options whose values are not LaunchConfig's own fields as they are typed: parsed and
// checked after CLI11 has read them.
struct Typed {
  std::string nproc = "1", nnodes = "1";
  bool standalone = false;
  double grace_s = 5, rdzv_timeout_s = 60, last_call_s = 30, monitor_s = 1;
};

// Every option, with torchrun's dashed spelling beside the underscored one.
void add_options(CLI::App& app, tinyddp::launcher::LaunchConfig& o, Typed& f) {
  app.add_option("--nproc_per_node,--nproc-per-node", f.nproc,
                 "worker processes on this node (default 1), or gpu (one per GPU), cpu (one per CPU), auto (gpu "
                 "when there are GPUs, else cpu)");
  app.add_flag("--standalone", f.standalone,
               "a single-node job on a free local port (torchrun's spelling; the default here already)");
  app.add_option("--nnodes", f.nnodes,
                 "nodes in the job (default 1), or MIN:MAX for an elastic job (with --rdzv_endpoint)");
  app.add_option("--node_rank,--node-rank", o.node_rank, "this node's rank, 0 to nnodes-1 (default 0)");
  app.add_option("--master_addr,--master-addr", o.master_addr,
                 "address of node 0, which hosts the job's store (default 127.0.0.1)");
  app.add_option("--master_port,--master-port", o.master_port,
                 "port of the store on node 0 (default: a free port; needed with --nnodes > 1)");
  app.add_option("--max_restarts,--max-restarts", o.max_restarts,
                 "restart the whole group up to this many times after a failure (default 0)");
  app.add_option("--log_dir,--log-dir", o.log_dir,
                 "write each worker's output to LOG_DIR/attempt_<k>/rank_<r>.log instead of the console");
  app.add_flag("--tee", o.tee, "with --log_dir: print to the console as well");
  app.add_flag("--cpu_bind,--cpu-bind", o.cpu_bind,
               "pin each worker to its own share of this node's physical cores (with their hyperthreads)");
  app.add_option("--grace_period,--grace-period", f.grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 5)");
  app.add_option("--rdzv_timeout,--rdzv-timeout", f.rdzv_timeout_s,
                 "seconds for the nodes to meet through the store, or an elastic round to reach MIN (default 60)");
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", o.rdzv_endpoint,
                 "HOST:PORT of an elastic job's store, hosted by the node at that address; ranks come from the "
                 "rendezvous");
  app.add_option("--rdzv_id,--rdzv-id", o.rdzv_id,
                 "the elastic job's id; a node with another id is refused (default none)");
  app.add_option("--rdzv_last_call,--rdzv-last-call", f.last_call_s,
                 "seconds an elastic round waits for more nodes once MIN have joined (default 30)");
  app.add_option("--monitor_interval,--monitor-interval", f.monitor_s,
                 "seconds between heartbeats in an elastic job; a node is lost after two missed (default 1)");
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
  CLI::App app{
      "Start one process per local rank with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR\n"
      "and MASTER_PORT set (as torchrun does), print their output prefixed with the rank, and stop them all when\n"
      "one fails.\n\nUsage: launch [OPTIONS] -- PROGRAM [ARGS...]",
      "launch"};
  Typed f;
  add_options(app, o, f);
  app.prefix_command();  // everything from the program on belongs to the program
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.program = app.remaining();
  if (!o.program.empty() && o.program.front() == "--") {
    o.program.erase(o.program.begin());
  } else if (!o.program.empty() && o.program.front().size() > 1 && o.program.front()[0] == '-') {
    // Without "--", the program starts at the first argument that is no option: one that looks
    // like an option is a mistyped or unknown one, refused before anything starts.
    std::cerr << "launch: unknown option '" << o.program.front()
              << "' (see launch --help; the program and its arguments go after --)\n";
    return 2;
  }
  o.grace_period = std::chrono::milliseconds(static_cast<int64_t>(f.grace_s * 1000));
  o.rdzv_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.rdzv_timeout_s * 1000));
  o.rdzv_last_call = std::chrono::milliseconds(static_cast<int64_t>(f.last_call_s * 1000));
  o.monitor_interval = std::chrono::milliseconds(static_cast<int64_t>(f.monitor_s * 1000));
  try {
    o.nproc_per_node = parse_nproc(f.nproc);
    parse_nnodes(f.nnodes, o);
    if (f.standalone) standalone_job(o);
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
