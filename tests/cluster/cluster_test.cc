// Multi-node training on one machine: scripts/sim_cluster.sh makes each node a network
// namespace with its own interface on a bridge, so node 1's ranks reach node 0's only through
// those interfaces (loopback is per namespace). 2 nodes x 2 ranks must train to the
// parameters of 4 ranks on one node; the script must remove what it created when the job
// succeeds, fails, or is interrupted; faults on the network (a link down, 30% packet loss)
// and on the nodes (a launcher killed, a rank frozen) end as docs/launcher.md says.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "tests/cluster/sim_util.h"
#include "tests/launcher/elastic_pieces.h"
#include "tests/test_util.h"
#include "tinyddp/nn/nn.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using tinyddp::testing::temp_path;
using tinyddp::testing::elastic::max_difference;
using namespace tinyddp::testing::cluster;

namespace {

// A training run that would take forever, marked with a seed unique to this test process and
// `n`, so that "is any of it still running?" does not see other processes.
std::string endless_train(int n) {
  return "examples/train --widths 32,64,4 --steps 100000000 --log_every 100000000 --timeout 3 --seed " +
         std::to_string(::getpid() * 10 + n);
}
bool still_running(int n) {
  const std::string seed = std::to_string(::getpid() * 10 + n);
  return run_command("pgrep -f '[s]teps 100000000 --log_every 100000000 --timeout 3 --seed " + seed + "$'").exit_code ==
         0;
}

// Trains `train` (ending in "--save ") with `nproc` ranks on this node alone and returns the
// largest parameter difference from the weights saved at `trained`.
double difference_from_one_node(int nproc, const std::string& train, const std::string& trained) {
  const std::string local_weights = temp_path("one_node_" + std::to_string(nproc) + ".safetensors");
  const CommandResult local =
      run_command("launcher/launch --nproc_per_node " + std::to_string(nproc) + " -- " + train + local_weights);
  INFO(local.output);
  REQUIRE(local.exit_code == 0);
  return max_difference(trained, local_weights);
}

}  // namespace

TEST_CASE("cluster: 2 nodes x 2 ranks in network namespaces train like 4 ranks on one node", "[cluster]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string train = "examples/train --widths 32,64,4 --steps 40 --log_every 40 --save ";
  const std::string two_nodes = temp_path("two_nodes.safetensors");
  const CommandResult cluster = run_command(sim("--nodes 2 --nproc_per_node 2 --rate 1gbit", train + two_nodes));
  INFO(cluster.output);
  REQUIRE(cluster.exit_code == 0);
  CHECK_THAT(cluster.output, Contains("[node 0] [rank 0] training mlp"));
  CHECK_THAT(cluster.output, Contains("data-parallel on 4 ranks (gloo)"));
  require_removed(tag_of(cluster.output));
  CHECK(difference_from_one_node(4, train, two_nodes) < 1e-6);
}

TEST_CASE("cluster: the script removes everything when the job fails or is interrupted", "[cluster]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  // A failing job: the status comes back, nothing is left.
  const CommandResult failed = run_command(sim("--nodes 2", "/bin/false"));
  INFO(failed.output);
  CHECK(failed.exit_code != 0);
  require_removed(tag_of(failed.output));
  // Interrupted (SIGTERM) while the nodes run: cleaned up within a few seconds.
  const std::string out = temp_path("interrupted.txt");
  const CommandResult started =
      run_command("(" + sim("--nodes 2", "/bin/sleep 60") + " > " + out + " 2>&1 & echo $! > " + out +
                  ".pid); sleep 2; "
                  "kill -TERM $(cat " +
                  out + ".pid); for i in $(seq 50); do kill -0 $(cat " + out +
                  ".pid) 2>/dev/null || break; sleep 0.2; done; cat " + out);
  INFO(started.output);
  CHECK(started.seconds < 20);
  require_removed(tag_of(started.output));
  CHECK(run_command("pgrep -f '[b]in/sleep 60'").exit_code != 0);  // no worker left behind ([b]: not this shell)
}

TEST_CASE("cluster: bad options are refused before anything is created", "[cluster][errors]") {
  const CommandResult none = run_command("bash scripts/sim_cluster.sh --nodes 2 --launch launcher/launch");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output, Contains("no program given"));
  const CommandResult bad = run_command("bash scripts/sim_cluster.sh --nodes 0 --launch launcher/launch -- /bin/true");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("--nodes must be 1..200"));
  const CommandResult unknown = run_command("bash scripts/sim_cluster.sh --bogus 1 -- /bin/true");
  CHECK_THAT(unknown.output, Contains("unknown option '--bogus'"));
}

TEST_CASE(
    "cluster: node 1's link goes down mid-training: both ranks name the other, both launchers fail, nothing is left",
    "[cluster][faults]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = temp_path("link_down.txt");
  // A long run with a 3 s collective timeout; 3 s in, node 1's cable is pulled (its veth on
  // the bridge goes down). The launchers then give up on each other after --rdzv_timeout.
  const std::string job = sim("--nodes 2 --nproc_per_node 1 --launch_args '--rdzv_timeout 5'", endless_train(1));
  const CommandResult r = run_with_fault(job, out, "ip link set ${tag}h1 down");
  INFO(r.output);
  CHECK(r.seconds < 40);
  CHECK(names_peer(line_starting(r.output, "[node 0] [rank 0] train: error: "), 1));
  CHECK(names_peer(line_starting(r.output, "[node 1] [rank 1] train: error: "), 0));
  CHECK_THAT(r.output, Contains("[node 0] launch: failed: rank 0 exited with status 1"));
  CHECK_THAT(r.output, Contains("[node 1] launch: failed: rank 1 exited with status 1"));
  CHECK_THAT(r.output, Contains("status 1"));
  require_removed(tag_of(r.output));
  CHECK(!still_running(1));  // no worker left behind
}

TEST_CASE(
    "cluster: node 1's launcher is SIGKILLed: its rank dies with it, rank 0 names rank 1, node 0's launcher fails",
    "[cluster][faults]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = temp_path("launcher_killed.txt");
  const std::string job = sim("--nodes 2 --nproc_per_node 1 --launch_args '--rdzv_timeout 5'", endless_train(2));
  // The launcher of node 1 is the process running launcher/launch in namespace <tag>n1.
  const CommandResult r = run_with_fault(job, out,
                                         "for pid in $(ip netns pids ${tag}n1); do grep -q 'launcher/launch' "
                                         "/proc/$pid/cmdline 2>/dev/null && kill -KILL $pid; done; ");
  INFO(r.output);
  CHECK(r.seconds < 40);
  CHECK_THAT(line_starting(r.output, "[node 0] [rank 0] train: error: "), Contains("rank 1"));
  CHECK_THAT(r.output, Contains("[node 0] launch: failed: rank 0 exited with status 1"));
  CHECK_THAT(r.output, !Contains("status 0"));
  require_removed(tag_of(r.output));
  CHECK(!still_running(2));
}

TEST_CASE("cluster: a rank frozen by SIGSTOP: the other names it, and the frozen rank's launcher stops it too",
          "[cluster][faults]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = temp_path("frozen.txt");
  const std::string job =
      sim("--nodes 2 --nproc_per_node 1 --launch_args '--rdzv_timeout 5 --grace_period 1'", endless_train(3));
  // Rank 1 (the train process in namespace <tag>n1) hangs without dying. Rank 0 times out
  // naming it; node 0's launcher reports the failure through the store; node 1's launcher
  // sees it and stops its frozen worker (SIGTERM, then SIGKILL after the grace period).
  const CommandResult r = run_with_fault(job, out,
                                         "for pid in $(ip netns pids ${tag}n1); do tr '\\0' '\\n' < /proc/$pid/cmdline "
                                         "| head -n 1 | grep -q 'examples/train$' && "
                                         "kill -STOP $pid; done; ");
  INFO(r.output);
  CHECK(r.seconds < 40);
  CHECK(names_peer(line_starting(r.output, "[node 0] [rank 0] train: error: "), 1));
  CHECK_THAT(r.output, Contains("[node 1] launch: another node failed (node 0: rank 0 exited with status 1)"));
  CHECK_THAT(r.output, Contains("[node 1] launch: failed: node 0: rank 0 exited with status 1"));
  CHECK_THAT(r.output, Contains("[node 0] launch: failed: rank 0 exited with status 1"));
  CHECK_THAT(r.output, Contains("status 1"));
  require_removed(tag_of(r.output));
  CHECK(!still_running(3));
}

// Trains on 2 nodes whose links drop `loss` of the packets arriving at each node, and checks
// that training completes with the parameters of one node, and that both links dropped packets.
// TCP retransmits (rto_min 5 ms without delayed ACKs, its backoff capped at 1 s, as datacenter
// hosts often set it: with Linux's defaults one segment lost 8 times in a row stalls for
// minutes; see docs/launcher.md). Timeouts are long: this is about surviving.
void train_through_loss(const std::string& loss, const std::string& widths) {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  if (run_command("command -v nft").exit_code != 0)
    TINYDDP_SKIP("nft (nftables) is not installed: run scripts/setup.sh");
  const std::string train = "examples/train --widths " + widths + " --steps 20 --log_every 20 --timeout 150 --save ";
  const std::string lossy = temp_path("lossy.safetensors");
  const CommandResult cluster =
      run_command(sim("--nodes 2 --nproc_per_node 1 --loss " + loss +
                          " --rto_min 5ms --rto_max 1000ms --launch_args '--rdzv_timeout 240'",
                      train + lossy));
  INFO(cluster.output);
  REQUIRE(cluster.exit_code == 0);
  CHECK_THAT(cluster.output, Contains("loss " + loss));
  CHECK_THAT(cluster.output, Contains("[node 0] [rank 0] done: 20 steps"));
  // Packets were really lost, on both nodes' links.
  for (const int node : {0, 1}) {
    std::smatch m;
    const std::string what = "node " + std::to_string(node) + "'s link dropped ([0-9]+) arriving packets";
    REQUIRE(std::regex_search(cluster.output, m, std::regex(what)));
    CHECK(std::stoi(m[1]) > 10);
  }
  require_removed(tag_of(cluster.output));
  CHECK(difference_from_one_node(2, train, lossy) == 0.0);  // the same computation; TCP delivered every byte
}

TEST_CASE("cluster: 30% packet loss on every link: training completes, slower, with identical results",
          "[cluster][faults]") {
  // 2372 parameters: each step's gradients (9.5 KB) and the desync check's records go as one
  // message each way.
  train_through_loss("30%", "32,64,4");
}

TEST_CASE(
    "cluster: 10% packet loss on every link with 76 KB of gradients per step: the ring's large allreduce completes, "
    "with identical results",
    "[cluster][faults]") {
  // 18948 parameters: one bucket over the small allreduce's 64 KB, so it goes around the ring
  // in chunks, many segments each way.
  train_through_loss("10%", "32,512,4");
}

TEST_CASE("cluster: a 0.5 ms delay on every link: each packet waits at least that long, results are identical",
          "[cluster]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string train = "examples/train --widths 32,64,4 --steps 20 --log_every 20 --save ";
  const std::string delayed = temp_path("delayed.safetensors");
  const CommandResult cluster =
      run_command(sim("--nodes 2 --nproc_per_node 1 --rate 1gbit --delay 0.5ms", train + delayed));
  INFO(cluster.output);
  REQUIRE(cluster.exit_code == 0);
  CHECK_THAT(cluster.output, Contains("[node 0] [rank 0] done: 20 steps"));
  if (cluster.output.find("delay 0.5ms (link_delay)") != std::string::npos) {
    // No netem here: link_delay held what left each node, and says for how long.
    for (const int node : {0, 1}) {
      std::smatch m;
      const std::string what = "node " + std::to_string(node) +
                               "'s link_delay: held ([0-9]+) packets for 500 us \\(measured: min ([0-9]+) us";
      REQUIRE(std::regex_search(cluster.output, m, std::regex(what)));
      CHECK(std::stoi(m[1]) > 100);
      CHECK(std::stoi(m[2]) >= 500);
    }
  } else {
    CHECK_THAT(cluster.output, Contains("delay 0.5ms (netem)"));
  }
  require_removed(tag_of(cluster.output));
  CHECK(difference_from_one_node(2, train, delayed) == 0.0);
}

TEST_CASE("cluster: the store's host goes away during rendezvous: the other node names the store at once",
          "[cluster][faults]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = temp_path("store_gone.txt");
  // The job has 3 nodes but only 2 start, so the rendezvous cannot complete; 3 s in, node
  // 0's launcher (which hosts the store) is SIGKILLed. Node 1 must say what happened well
  // before its 60 s rendezvous timeout.
  const std::string job =
      sim("--nodes 2 --job_nodes 3 --nproc_per_node 1 --launch_args '--rdzv_timeout 60'", endless_train(4));
  const CommandResult r = run_with_fault(job, out,
                                         "for pid in $(ip netns pids ${tag}n0); do grep -q 'launcher/launch' "
                                         "/proc/$pid/cmdline 2>/dev/null && kill -KILL $pid; done; ");
  INFO(r.output);
  CHECK(r.seconds < 20);
  CHECK_THAT(r.output, Contains("[node 1] launch: node 1 lost the job's store at ") &&
                           Contains("(hosted by node 0's launcher) while the nodes were meeting for attempt 0"));
  CHECK_THAT(r.output, Contains("node 0's launcher exited with status 137"));
  CHECK_THAT(r.output, Contains("node 1's launcher exited with status 1"));
  require_removed(tag_of(r.output));
  CHECK(!still_running(4));
}

TEST_CASE("cluster: --max_restarts recovers from a transient link failure, resuming from rank 0's checkpoint",
          "[cluster][faults][restart]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string train = "examples/train --widths 32,64,4 --steps 5000 --log_every 5000 --timeout 3 --save ";
  const std::string restarted = temp_path("restarted_link.safetensors");
  const std::string checkpoint = temp_path("link.checkpoint");
  std::filesystem::remove(checkpoint);
  // 3 s in, node 1's cable is pulled for 6 s: both ranks time out (3 s) naming each other,
  // both launchers restart the group (node 1's once it reaches the store again), and the new
  // attempt resumes from the last checkpoint rank 0 wrote (every 200 steps).
  const std::string job = sim("--nodes 2 --nproc_per_node 1 --launch_args '--max_restarts 2 --rdzv_timeout 30'",
                              train + restarted + " --checkpoint " + checkpoint + " --checkpoint_every 200 --resume");
  const CommandResult r =
      run_with_fault(job, temp_path("transient.txt"), "ip link set ${tag}h1 down; sleep 6; ip link set ${tag}h1 up");
  INFO(r.output);
  CHECK(names_peer(line_starting(r.output, "[node 0] [rank 0] train: error: "), 1));
  CHECK_THAT(r.output, Contains("[node 0] launch: restarting the workers (restart 1 of 2)"));
  CHECK_THAT(r.output, Contains("[node 1] launch: restarting the workers (restart 1 of 2)"));
  CHECK_THAT(r.output, Contains("[node 0] [rank 0] resuming from " + checkpoint + " after "));
  CHECK_THAT(r.output, Contains("[node 0] [rank 0] done: 5000 steps"));
  CHECK_THAT(r.output, Contains("node 0's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains("node 1's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains("status 0"));
  require_removed(tag_of(r.output));
  // The same parameters as a run that never failed.
  CHECK(difference_from_one_node(2, train, restarted) == 0.0);
}
