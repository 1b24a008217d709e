// Elastic jobs on the simulated cluster (scripts/sim_cluster.sh --elastic): 3 nodes train
// with a checkpoint every 100 steps; mid-run one node's link is cut, or the node is killed
// (its launcher and workers). The other two form a new round, resume from the last checkpoint
// on 2 ranks and finish with the parameters of a reference made of the same pieces (the
// first steps on 3 ranks, then from that checkpoint on 2); nothing is lost or left. And a
// fourth node started mid-run is admitted at the next round. With train --deterministic, the
// job whose node is killed ends in the bytes of one process that never stopped.
#include <regex>
#include <string>

#include "tests/cluster/sim_util.h"
#include "tests/launcher/elastic_pieces.h"
#include "tests/test_util.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using namespace tinyddp::testing::cluster;
using namespace tinyddp::testing::elastic;

namespace {

// The elastic options of these jobs: a node is lost after 2 x 0.5 s without a heartbeat.
const std::string kElastic =
    "--launch_args '--rdzv_last_call 2 --monitor_interval 0.5 --rdzv_timeout 6 --grace_period 2 --max_restarts 2'";

// Runs the job on `before` nodes (with `late`, "--late S": one more node S seconds after the
// others), applies `fault` once rank 0 has logged step 1000, and checks the job finished on
// `after` ranks, resumed from a checkpoint at `min_step` or later, with the parameters of its
// pieces. Returns the output.
std::string run_elastic(const std::string& name, const std::string& fault, int before, int after, int64_t min_step,
                        const std::string& late = "") {
  const std::string dir = tinyddp::testing::fresh_directory("elastic_" + name);
  const std::string job = sim("--nodes " + std::to_string(before + (late.empty() ? 0 : 1)) + " --elastic 2:" +
                                  std::to_string(std::max(before, after)) + " " + late + " " + kElastic,
                              train(dir, "job"));
  const CommandResult r = run_with_fault(job, dir + "/out.txt", fault, R"(\[rank 0\] step  *1000/3000)");
  INFO(r.output);
  CHECK_THAT(r.output, Contains("node 0's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains("node 1's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains(fmt::format("data-parallel on {} ranks", after)));
  const int64_t step = resumed_step(r.output);
  CHECK(step >= min_step);
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, before, step, after)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
  require_removed(tag_of(r.output));
  return r.output;
}

}  // namespace

TEST_CASE("cluster: elastic: node 2's link is cut mid-run; nodes 0 and 1 go on at 2 ranks from the checkpoint",
          "[cluster][elastic]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = run_elastic("cut", "ip link set ${tag}h2 down", 3, 2, 900);
  // A surviving node's heartbeat watch names node 2 lost. Which survivor sees it first is a
  // race: a worker's collective may fail on the cut link (the kernel gives up resolving node
  // 2's address after about 3 s) before its node's watch, slowed by a loaded machine, has
  // missed two beats; that node then restarts for its failed worker instead.
  CHECK(has_match(out, R"(\[node [01]\] launch: a new round is due: node\(s\) \S+ lost \(no heartbeat for 1000 ms\))"));
  CHECK_THAT(out, Contains("[node 2] launch: lost the job's store at "));
  CHECK_THAT(out, Contains("node 2's launcher exited with status 1"));
}

TEST_CASE("cluster: elastic: node 2 is killed mid-run (launcher and workers); nodes 0 and 1 go on at 2 ranks",
          "[cluster][elastic]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  const std::string out = run_elastic("kill", "ip netns pids ${tag}n2 | xargs -r kill -KILL", 3, 2, 900);
  CHECK(has_match(out, R"(\[node 0\] launch: round [1-9] of job)"));
  CHECK_THAT(out, Contains("node 2's launcher exited with status 137"));
}

TEST_CASE("cluster: elastic: a 4th node started mid-run joins at the next round; the job finishes on 4 ranks",
          "[cluster][elastic]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  // The 4th node starts 4 s after the others (--late): the job is well under way, whatever
  // step it has reached (there is no fault to apply).
  const std::string out = run_elastic("join", "true", 3, 4, 100, "--late 4");
  CHECK_THAT(out, Contains("a new round is due: a node is waiting to join"));
  CHECK(has_match(out, R"(\[node 3\] launch: round [1-9] of job \S+: 4 node\(s\))"));
  CHECK_THAT(out, Contains("node 3's launcher exited with status 0"));
}

TEST_CASE("cluster: elastic, deterministic: node 2 killed mid-run, the job ends in the bytes of one process",
          "[cluster][elastic][exact]") {
  if (const std::string why = cannot_simulate(); !why.empty()) TINYDDP_SKIP(why);
  // train --deterministic (12 chunks of 2 rows a step) on 3 nodes; node 2 is killed; nodes 0
  // and 1 resume from the last checkpoint (the option's state inside) on 2 ranks. No reference
  // of pieces is needed: the weights are those of one process that ran all 3000 steps alone.
  const std::string dir = tinyddp::testing::fresh_directory("elastic_exact");
  const std::string exact = " --deterministic --chunk_size 2";
  const std::string job = sim("--nodes 3 --elastic 2:3 " + kElastic, train(dir, "job") + exact);
  const CommandResult r = run_with_fault(job, dir + "/out.txt", "ip netns pids ${tag}n2 | xargs -r kill -KILL",
                                         R"(\[rank 0\] step  *1000/3000)");
  INFO(r.output);
  CHECK_THAT(r.output, Contains("node 0's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains("node 1's launcher exited with status 0"));
  CHECK_THAT(r.output, Contains("data-parallel on 2 ranks"));
  CHECK(resumed_step(r.output) >= 900);
  const std::string alone = std::regex_replace(train(dir, "alone"),
                                               std::regex(" --checkpoint \\S+ --checkpoint_every "
                                                          "[0-9]+ --resume"),
                                               "");
  const CommandResult one = tinyddp::testing::run_command(alone + exact);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK(tinyddp::testing::read_file(dir + "/job.safetensors") ==
        tinyddp::testing::read_file(dir + "/alone.safetensors"));
  require_clean(dir, dir + "/job.ckpt");
  require_removed(tag_of(r.output));
}
