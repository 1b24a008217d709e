// //launcher:launch's elastic jobs (--nnodes MIN:MAX --rdzv_endpoint), with nodes as launcher
// processes on this machine's loopback (tests/cluster/ has them in network namespaces): a node
// killed mid-run, a node joining mid-run, a worker that keeps failing, and bad input. The
// training cases hold the survivors' final parameters to a reference made of the same pieces
// (the first steps at the old world size, the rest from that checkpoint at the new one).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <thread>

#include "tests/launcher/elastic_pieces.h"
#include "tests/test_util.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/nn/nn.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::read_file;
using tinyddp::testing::run_command;
using namespace tinyddp::testing::elastic;

namespace {

const std::string kLaunch = "launcher/launch";  // in the test's runfiles

std::string scratch(const std::string& name) { return tinyddp::testing::fresh_directory("elastic_launch_" + name); }

// One node of the job: a launcher run in the background, its output in <dir>/node<i>.log and
// its pid in <dir>/node<i>.pid.
struct Node {
  std::string log, pid_file;
  CommandResult result;
  std::thread thread;
  ~Node() {
    if (thread.joinable()) thread.join();
  }
  pid_t pid() const { return std::stoi(read_file(pid_file)); }
  std::string output() const { return read_file(log); }
};

std::unique_ptr<Node> start_node(const std::string& dir, int i, const std::string& args) {
  auto node = std::make_unique<Node>();
  node->log = fmt::format("{}/node{}.log", dir, i);
  node->pid_file = fmt::format("{}/node{}.pid", dir, i);
  const std::string command = fmt::format("echo $$ > {}.tmp && mv {}.tmp {} && exec {} {} > {} 2>&1", node->pid_file,
                                          node->pid_file, node->pid_file, kLaunch, args, node->log);
  node->thread = std::thread([n = node.get(), command] { n->result = run_command(command); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::filesystem::exists(node->pid_file) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return node;
}

// Waits (at most 60 s) until one of the nodes' logs (or those of nodes[from...]) matches
// `pattern`.
bool wait_for(const std::vector<std::unique_ptr<Node>>& nodes, const std::string& pattern, size_t from = 0) {
  const std::regex re(pattern);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    for (size_t i = from; i < nodes.size(); ++i) {
      if (std::regex_search(nodes[i]->output(), re)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits for every node to end; returns their logs, one after another.
std::string join_all(std::vector<std::unique_ptr<Node>>& nodes) {
  std::string all;
  for (auto& node : nodes) {
    node->thread.join();
    all += node->output() + "\n---\n";
  }
  return all;
}

std::string elastic(int port, const std::string& nnodes, const std::string& id, int timeout_s = 30) {
  return fmt::format(
      "--nnodes {} --rdzv_endpoint 127.0.0.1:{} --rdzv_id {} --rdzv_last_call 2 --monitor_interval 0.5 "
      "--rdzv_timeout {} --grace_period 2",
      nnodes, port, id, timeout_s);
}

}  // namespace

TEST_CASE("elastic launch: a node killed mid-run; the other two go on from the last checkpoint on 2 ranks",
          "[launcher][elastic]") {
  const std::string dir = scratch("kill");
  const std::string args =
      elastic(tinyddp::launcher::free_loopback_port(), "2:3", "kill") + " --max_restarts 2 -- " + train(dir, "job");
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(start_node(dir, i, args));
  REQUIRE(wait_for(nodes, R"(\[rank 0\] step +1000/3000)"));
  const pid_t victim = nodes[2]->pid();
  REQUIRE(::kill(victim, SIGKILL) == 0);  // the launcher; its workers die with it (PR_SET_PDEATHSIG)
  for (auto& node : nodes) node->thread.join();
  const std::string out0 = nodes[0]->output(), out1 = nodes[1]->output();
  INFO(out0 << "\n--- node 1\n" << out1);
  CHECK(nodes[0]->result.exit_code == 0);
  CHECK(nodes[1]->result.exit_code == 0);
  CHECK(nodes[2]->result.exit_code == 128 + SIGKILL);
  // Round 1, or later should a loaded machine starve a heartbeat into a round of its own.
  CHECK(has_match(out0, R"(round [1-9] of job 'kill': 2 node\(s\))"));
  CHECK(has_match(out1, R"(round [1-9] of job 'kill': 2 node\(s\))"));
  const int64_t step = resumed_step(out0 + out1);
  CHECK(step >= 900);  // the checkpoint before the kill (rank 0 may have been on the node killed)
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 3, step, 2)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

TEST_CASE("elastic launch: a node started mid-run joins at the next round; the job finishes on 3 ranks",
          "[launcher][elastic]") {
  const std::string dir = scratch("join");
  // --max_restarts 0: a node joining restarts the workers without spending a restart.
  const std::string args = elastic(tinyddp::launcher::free_loopback_port(), "2:3", "join") + " -- " + train(dir, "job");
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(start_node(dir, i, args));
  REQUIRE(wait_for(nodes, R"(\[rank 0\] step +1000/3000)"));
  nodes.push_back(start_node(dir, 2, args));
  const std::string all = join_all(nodes);
  INFO(all);
  for (const auto& node : nodes) CHECK(node->result.exit_code == 0);
  CHECK_THAT(all, Contains("a new round is due: a node is waiting to join"));
  CHECK(has_match(nodes[2]->output(), R"(round [1-9] of job 'join': 3 node\(s\))"));
  CHECK_THAT(all, Contains("data-parallel on 3 ranks"));
  const int64_t step = resumed_step(all);
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 2, step, 3)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

TEST_CASE("elastic launch: a failing worker restarts the round; after --max_restarts every node ends",
          "[launcher][elastic]") {
  const std::string dir = scratch("fail");
  const std::string worker = fmt::format(
      "/bin/bash -c 'echo $$ > {}/pid_${{TORCHELASTIC_RESTART_COUNT}}_$RANK; echo restart $TORCHELASTIC_RESTART_COUNT "
      "of $TORCHELASTIC_MAX_RESTARTS in $TORCHELASTIC_RUN_ID; if [ $RANK = 1 ]; then sleep 0.3; exit 5; fi; sleep 60'",
      dir);
  const std::string args =
      elastic(tinyddp::launcher::free_loopback_port(), "2:2", "fail") + " --max_restarts 1 -- " + worker;
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(start_node(dir, i, args));
  for (auto& node : nodes) node->thread.join();
  const std::string all = nodes[0]->output() + "\n---\n" + nodes[1]->output();
  INFO(all);
  const int a = nodes[0]->result.exit_code, b = nodes[1]->result.exit_code;
  CHECK(std::min(a, b) == 1);  // the other node: the job was closed
  CHECK(std::max(a, b) == 5);  // the node whose rank failed last: the worker's status
  CHECK_THAT(all, Contains("restart 1 of 1 in fail"));
  CHECK_THAT(all, Contains("launch: restarting the workers in a new round (restart 1 of 1)"));
  CHECK_THAT(all, Contains("launch: failed: rank 1 exited with status 5 (after 1 restarts)"));
  CHECK_THAT(all, Contains("job 'fail' has ended: rank 1 exited with status 5 on node"));
  CHECK(std::max(nodes[0]->result.seconds, nodes[1]->result.seconds) < 30);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("pid_", 0) != 0) continue;
    CHECK(::kill(std::stoi(read_file(entry.path().string())), 0) != 0);  // no worker left
  }
  // Both ranks ran before the first failure and after it (pid_<restarts>_<rank>).
  for (const char* name : {"pid_0_0", "pid_0_1", "pid_1_0", "pid_1_1"})
    CHECK(std::filesystem::exists(dir + "/" + name));
  CHECK_FALSE(std::filesystem::exists(dir + "/pid_2_0"));  // no third run: the restarts were spent
}

TEST_CASE("elastic launch: each worker gets torchrun's variables from the round", "[launcher][elastic]") {
  const std::string dir = scratch("variables");
  const std::string worker =
      "/bin/bash -c 'echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
      "GROUP_RANK=$GROUP_RANK MASTER=$MASTER_ADDR:$MASTER_PORT PREFIX=$TINYDDP_STORE_PREFIX "
      "RESTARTS=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS ID=$TORCHELASTIC_RUN_ID'";
  const int port = tinyddp::launcher::free_loopback_port();
  const std::string args = elastic(port, "2:2", "vars") + " --nproc_per_node 2 --max_restarts 3 -- " + worker;
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(start_node(dir, i, args));
  for (auto& node : nodes) node->thread.join();
  const std::string all = nodes[0]->output() + nodes[1]->output();
  INFO(all);
  for (const auto& node : nodes) CHECK(node->result.exit_code == 0);
  // Which node is node 0 of the round depends on the join order; each rank appears once.
  for (int rank = 0; rank < 4; ++rank) {
    CHECK_THAT(all, Contains(fmt::format("[rank {0}] RANK={0} LOCAL_RANK={1} WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 "
                                         "GROUP_RANK={2} MASTER=127.0.0.1:{3} PREFIX=round_0/ RESTARTS=0/3 ID=vars",
                                         rank, rank % 2, rank / 2, port)));
  }
}

TEST_CASE("elastic launch: nodes with different numbers of workers share the ranks out", "[launcher][elastic]") {
  // As under torchrun: a node's first rank is the workers of the nodes before it.
  const std::string dir = scratch("uneven");
  const int port = tinyddp::launcher::free_loopback_port();
  const std::string worker =
      " -- /bin/bash -c 'echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK "
      "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE'";
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(start_node(dir, 0, elastic(port, "2:2", "uneven") + " --nproc_per_node 1" + worker));
  nodes.push_back(start_node(dir, 1, elastic(port, "2:2", "uneven") + " --nproc_per_node 2" + worker));
  for (auto& node : nodes) node->thread.join();
  const std::string one = nodes[0]->output(), two = nodes[1]->output();
  INFO(one << "\n--- node 1\n" << two);
  CHECK(nodes[0]->result.exit_code == 0);
  CHECK(nodes[1]->result.exit_code == 0);
  // Either node may have joined first: ranks 0 | 1, 2 or 0, 1 | 2.
  const bool single_first = has_match(one, "RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1");
  INFO("the node of one worker joined " << (single_first ? "first" : "second"));
  CHECK(has_match(one, fmt::format("RANK={} WORLD_SIZE=3 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1", single_first ? 0 : 2)));
  for (int local = 0; local < 2; ++local) {
    CHECK(has_match(two, fmt::format("RANK={} WORLD_SIZE=3 LOCAL_RANK={} LOCAL_WORLD_SIZE=2",
                                     (single_first ? 1 : 0) + local, local)));
  }
}

TEST_CASE("elastic launch: a node's launcher stopped by SIGTERM leaves; the others go on without it at once",
          "[launcher][elastic]") {
  const std::string dir = scratch("sigterm");
  // --monitor_interval 5: the others learn of the leaving node from its request, not from a
  // heartbeat that stops (10 s).
  const std::string args = fmt::format(
      "--nnodes 2:3 --rdzv_endpoint 127.0.0.1:{} --rdzv_id leave --rdzv_last_call 1 --monitor_interval 5 "
      "--rdzv_timeout 20 -- /bin/bash -c 'echo world $WORLD_SIZE; [ $WORLD_SIZE = 2 ] && exit 0; sleep 60'",
      tinyddp::launcher::free_loopback_port());
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(start_node(dir, i, args));
  REQUIRE(wait_for(nodes, "world 3"));
  REQUIRE(::kill(nodes[2]->pid(), SIGTERM) == 0);
  for (auto& node : nodes) node->thread.join();
  const std::string all = nodes[0]->output() + nodes[1]->output();
  INFO(all << "\n--- node 2\n" << nodes[2]->output());
  CHECK(nodes[2]->result.exit_code == 128 + SIGTERM);
  CHECK(nodes[0]->result.exit_code == 0);
  CHECK(nodes[1]->result.exit_code == 0);
  CHECK_THAT(all, Contains(fmt::format("a new round is due: node ")) &&
                      Contains(fmt::format(":{} was stopped by Terminated", nodes[2]->pid())));
  CHECK(has_match(all, R"(round [1-9] of job 'leave': 2 node\(s\))"));
  CHECK(std::max(nodes[0]->result.seconds, nodes[1]->result.seconds) < 10);  // not 2 x 5 s of silence
}

TEST_CASE("elastic launch: the store's node stopped by SIGTERM ends the job for every node at once",
          "[launcher][elastic]") {
  const std::string dir = scratch("host_sigterm");
  const std::string args =
      elastic(tinyddp::launcher::free_loopback_port(), "1:2", "host") + " -- /bin/bash -c 'echo running; sleep 60'";
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(start_node(dir, 0, args));
  REQUIRE(wait_for(nodes, "hosting the store"));
  nodes.push_back(start_node(dir, 1, args));
  REQUIRE(wait_for(nodes, "running", 1));
  REQUIRE(::kill(nodes[0]->pid(), SIGTERM) == 0);
  for (auto& node : nodes) node->thread.join();
  INFO(nodes[0]->output() << "\n--- node 1\n" << nodes[1]->output());
  CHECK(nodes[0]->result.exit_code == 128 + SIGTERM);
  CHECK(nodes[1]->result.exit_code == 1);
  CHECK_THAT(nodes[1]->output(),
             Contains("job 'host' has ended: node ") &&
                 Contains(fmt::format(":{} (hosting the store) was stopped by Terminated", nodes[0]->pid())));
  CHECK(nodes[1]->result.seconds < 15);  // not the 30 s of a store call timing out
}

TEST_CASE("elastic launch: a world the global batch does not split over is named, and the job ends",
          "[launcher][elastic][errors]") {
  const std::string dir = scratch("batch");
  const std::string args = elastic(tinyddp::launcher::free_loopback_port(), "2:3", "batch") +
                           " -- examples/train --widths 32,64,4 --batch 20 --steps 10";
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(start_node(dir, i, args));
  const std::string all = join_all(nodes);
  INFO(all);
  for (const auto& node : nodes) CHECK(node->result.exit_code == 1);
  CHECK_THAT(all, Contains("--batch 20 is not divisible by WORLD_SIZE 3: every rank takes an equal share"));
  CHECK_THAT(all, Contains("launch: failed: rank ") && Contains("exited with status 1 (after 0 restarts)"));
}

TEST_CASE("elastic launch: bad input gives a clear error within a bounded time", "[launcher][elastic][errors]") {
  const int port = tinyddp::launcher::free_loopback_port();
  struct Case {
    std::string args;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--nnodes 3:2 --rdzv_endpoint 127.0.0.1:29500 -- true", 2, "--nnodes MIN:MAX needs MIN <= MAX, got 3:2"},
      {"--nnodes 0:2 --rdzv_endpoint 127.0.0.1:29500 -- true", 2, "--nnodes MIN:MAX needs MIN >= 1, got 0"},
      {"--nnodes 1:2 -- true", 2, "give --rdzv_endpoint HOST:PORT"},
      {"--nnodes 1:2 --rdzv_endpoint localhost -- true", 2, "--rdzv_endpoint takes HOST:PORT"},
      {"--nnodes 1:2 --rdzv_endpoint 127.0.0.1:70000 -- true", 2, "--rdzv_endpoint takes HOST:PORT"},
      {"--nnodes 1:2 --rdzv_endpoint 127.0.0.1:29500 --node_rank 1 -- true", 2, "--node_rank is not used"},
      {"--nnodes 1:2 --rdzv_endpoint 127.0.0.1:29500 --nproc_per_node 0 -- true", 2,
       "--nproc_per_node must be at least 1, got 0"},
      {"--nnodes 1:2 --rdzv_endpoint 127.0.0.1:29500 --tee -- true", 2, "needs --log_dir"},
      // Nobody listens there (a documentation address: never this machine's).
      {"--nnodes 1:2 --rdzv_endpoint 192.0.2.1:29500 --rdzv_timeout 2 -- true", 1,
       "cannot reach the rendezvous endpoint 192.0.2.1:29500 within 2000 ms"},
      // One node of at least two.
      {fmt::format("--nnodes 2:3 --rdzv_endpoint 127.0.0.1:{} --rdzv_timeout 2 -- true", port), 1,
       "round 0 of job 'none' has 1 node(s)"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_command(kLaunch + " " + c.args);
    INFO("launch " << c.args << "\n" << r.output);
    CHECK(r.exit_code == c.exit_code);
    CHECK_THAT(r.output, Contains(c.message));
    CHECK(r.seconds < 10);
  }
  // A node of another job at the same endpoint is refused; the job's own node is not disturbed.
  const std::string dir = scratch("other_id");
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(start_node(
      dir, 0, fmt::format("--nnodes 2:2 --rdzv_endpoint 127.0.0.1:{} --rdzv_id job_a --rdzv_timeout 4 -- true", port)));
  REQUIRE(wait_for(nodes, "hosting the store"));
  const CommandResult other = run_command(fmt::format(
      "{} --nnodes 2:2 --rdzv_endpoint 127.0.0.1:{} --rdzv_id job_b --rdzv_timeout 4 -- true", kLaunch, port));
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Contains("has --rdzv_id 'job_b', but the job at this rendezvous endpoint is 'job_a'"));
  CHECK(other.seconds < 3);
  nodes[0]->thread.join();
  CHECK(nodes[0]->result.exit_code == 1);  // still alone after its timeout
  CHECK_THAT(nodes[0]->output(), Contains("round 0 of job 'job_a' has 1 node(s)"));
}

TEST_CASE("elastic launch: below MIN for longer than --rdzv_timeout, the job ends naming the nodes lost",
          "[launcher][elastic][errors]") {
  const std::string dir = scratch("below_min");
  const std::string args = elastic(tinyddp::launcher::free_loopback_port(), "2:2", "small", 3) +
                           " --max_restarts 1 -- /bin/bash -c 'sleep 60'";
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(start_node(dir, i, args));
  REQUIRE(wait_for(nodes, "round 0 of job 'small': 2 node"));
  const std::string victim = fmt::format("{}", nodes[1]->pid());
  REQUIRE(::kill(nodes[1]->pid(), SIGKILL) == 0);
  nodes[0]->thread.join();
  INFO(nodes[0]->output());
  CHECK(nodes[0]->result.exit_code == 1);
  CHECK_THAT(nodes[0]->output(), Contains("lost (no heartbeat for 1000 ms)"));
  CHECK(has_match(nodes[0]->output(), R"(round [1-9] of job 'small' has 1 node\(s\))"));
  CHECK_THAT(nodes[0]->output(), Contains("lost since round 0: ["));
  CHECK_THAT(nodes[0]->output(), Contains(":" + victim + "]"));
  CHECK(nodes[0]->result.seconds < 20);
}
