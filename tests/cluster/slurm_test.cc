// Training under Slurm on the simulated cluster (scripts/sim_slurm.sh: munged, slurmctld and a
// slurmd per network namespace), with examples/slurm/train.sbatch as a user submits it: the
// job's parameters equal launch's on one machine, a stop for a requeue resumes and finishes as
// its pieces do, scancel leaves nothing, and bad input is named. Needs root and Debian's
// slurm-wlm and munge; skips with the reason otherwise. No TINYDDP_BIND_ADDR anywhere: each
// rank finds its address on the route to the master.
#include <cmath>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "tests/cluster/sim_util.h"
#include "tests/launcher/elastic_pieces.h"
#include "tests/test_util.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using namespace tinyddp::testing::elastic;

namespace {

// Why the cluster cannot be simulated here, or empty.
std::string cannot_run_slurm() {
  const std::string why = tinyddp::testing::cluster::cannot_simulate();
  if (!why.empty()) return why;
  if (run_command("command -v slurmctld slurmd munged").exit_code != 0)
    return "no slurm-wlm or munge (scripts/setup.sh)";
  return "";
}

#define SKIP_WITHOUT_SLURM()                    \
  do {                                          \
    const std::string why = cannot_run_slurm(); \
    if (!why.empty()) {                         \
      WARN("skipped: " << why);                 \
      return;                                   \
    }                                           \
  } while (false)

// `script` (shell) run on the submit host of a simulated cluster of `nodes` nodes, with
// job_of (submits train.sbatch, or $SBATCH_SCRIPT: `job_of NAME [sbatch options] -- [program
// options]` prints the job id) and wait_job (waits, at most 240 s, until job $1 has ended; prints its state).
CommandResult on_cluster(int nodes, const std::string& dir, const std::string& script) {
  const std::string functions = fmt::format(
      "job_of() {{ name=$1; shift; opts=(); while [ \"$1\" != -- ]; do opts+=(\"$1\"); shift; done; shift; "
      "env -u TINYDDP_BIND_ADDR TINYDDP_PROGRAM=$PWD/examples/train TINYDDP_LAUNCH=$PWD/launcher/launch "
      "TINYDDP_CHECKPOINT={0}/$name.ckpt sbatch --parsable --chdir {0} --output {0}/$name.out \"${{opts[@]}}\" "
      "${{SBATCH_SCRIPT:-examples/slurm/train.sbatch}} "
      "--widths 32,64,4 --batch 24 --steps 3000 --log_every 100 --timeout 10 --checkpoint_every 100 "
      "--save {0}/$name.safetensors \"$@\"; }}\n"
      "wait_job() {{ for i in $(seq 2400); do s=$(scontrol show job $1 2>/dev/null | grep -o 'JobState=[A-Z_]*'); "
      "case $s in *COMPLETED|*FAILED|*CANCELLED|*TIMEOUT|*NODE_FAIL|*OUT_OF_MEMORY) break;; esac; sleep 0.1; done; "
      "echo \"job $1 ended: $s\"; }}\n",
      dir);
  std::ofstream(dir + "/script.sh") << functions << script;
  return run_command(
      fmt::format("bash scripts/sim_slurm.sh --nodes {} --logs {}/sim -- bash {}/script.sh", nodes, dir, dir));
}

}  // namespace

TEST_CASE("slurm: sbatch on 3 nodes x 2 tasks trains to the parameters of launch --nproc_per_node 6",
          "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_sbatch");
  const CommandResult r = on_cluster(3, dir,
                                     "job=$(job_of job --nodes 3 --ntasks-per-node 2 --cpus-per-task 1 --)\n"
                                     "wait_job $job; cat " +
                                         dir + "/job.out\n");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("ended: JobState=COMPLETED"));
  CHECK_THAT(r.output, Contains("6 task(s) on n[0-2]"));
  CHECK_THAT(r.output, Contains("data-parallel on 6 ranks (gloo)"));
  CHECK_THAT(r.output, Contains("1 intra-op threads (SLURM_CPUS_PER_TASK=1)"));
  const CommandResult reference =
      run_command(fmt::format("launcher/launch --nproc_per_node 6 -- {}", train(dir, "ref")));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  CHECK(max_difference(dir + "/job.safetensors", dir + "/ref.safetensors") < 1e-6);
  // The cluster is gone: its namespaces (named in sim_slurm's first line; other tests' may be up).
  std::smatch tag;
  REQUIRE(std::regex_search(r.output, tag, std::regex(R"(namespace (\S+)n<i>)")));
  CHECK(run_command("ip netns list").output.find(tag[1].str() + "n0") == std::string::npos);
}

namespace {

// On a cluster of 2 nodes: the job `submit` (shell setting $job) submits, `scancel --signal=SIGNAL`
// once its output `dir`/job.out shows `progress`, and the job's end. Checks that it completed
// after one requeue; returns the script's output.
CommandResult signal_and_requeue(const std::string& dir, const std::string& submit, const std::string& progress,
                                 const std::string& signal) {
  const CommandResult r = on_cluster(
      2, dir,
      fmt::format("{1}\nfor i in $(seq 1200); do grep -q '{2}' {0}/job.out 2>/dev/null && break; sleep 0.1; done\n"
                  "scancel --signal={3} $job\nwait_job $job\n"
                  "scontrol show job $job | grep -o 'Restarts=[0-9]*'; cat {0}/job.out\n",
                  dir, submit, progress, signal));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("ended: JobState=COMPLETED"));
  CHECK_THAT(r.output, Contains("Restarts=1"));
  return r;
}

// Whether `a` and `b` ("train loss X, val loss Y") hold the same numbers, each within `tolerance`.
bool printed_numbers_close(const std::string& a, const std::string& b, double tolerance) {
  const std::regex number(R"([0-9]+\.[0-9]+)");
  std::vector<double> x, y;
  for (auto it = std::sregex_iterator(a.begin(), a.end(), number); it != std::sregex_iterator(); ++it)
    x.push_back(std::stod(it->str()));
  for (auto it = std::sregex_iterator(b.begin(), b.end(), number); it != std::sregex_iterator(); ++it)
    y.push_back(std::stod(it->str()));
  if (x.size() != y.size() || x.empty()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i] - y[i]) > tolerance) return false;
  }
  return true;
}

// The step the ranks stopped after, on `signal_name` (Slurm signals every task apart: rank 0,
// which prints, may learn of a signal from another rank before its own arrives); the resumed
// job starts there and ends with the parameters of its pieces (4 ranks before and after).
void check_resumed_as_pieces(const std::string& dir, const std::string& output, const std::string& signal_name) {
  std::smatch m;
  REQUIRE(std::regex_search(
      output, m,
      std::regex(R"(stopping after step ([0-9]+) of 3000 \(()" + signal_name + R"(|another rank was signalled)\))")));
  const int64_t step = std::stoll(m[1]);
  CHECK(resumed_step(output) == step);
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 4, step, 4)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

}  // namespace

TEST_CASE(
    "slurm: SIGUSR1 (scancel --signal): a checkpoint at the signal, the job requeued, resumed on the same "
    "nodes, and finished as its pieces",
    "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_requeue");
  const CommandResult r =
      signal_and_requeue(dir, "job=$(job_of job --nodes 2 --ntasks-per-node 2 --)", "step  200/3000", "USR1");
  INFO(r.output);
  CHECK_THAT(r.output, Contains("requeueing it"));
  CHECK_THAT(r.output, Contains("restart 1: 4 task(s)"));
  check_resumed_as_pieces(dir, r.output, "User defined signal 1");
}

TEST_CASE(
    "slurm: train_elastic.sbatch: SIGTERM to every process of the step (launchers and workers alike): a "
    "checkpoint, a requeue, and the resumed job equals its pieces",
    "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_elastic");
  const CommandResult r = signal_and_requeue(dir,
                                             "job=$(SBATCH_SCRIPT=examples/slurm/train_elastic.sbatch "
                                             "TINYDDP_NPROC_PER_NODE=2 job_of job --nodes 2 --ntasks-per-node 1 "
                                             "--cpus-per-task 2 --)",
                                             "step  200/3000", "TERM");
  INFO(r.output);
  CHECK_THAT(r.output, Contains("workers stopped for a requeue; exit status 75"));
  check_resumed_as_pieces(dir, r.output, "Terminated");
}

TEST_CASE(
    "slurm: train_gpt --dataset (nanoGPT's loop) under train.sbatch with TINYDDP_OUT_DIR: SIGUSR1, a "
    "checkpoint in out_dir, a requeue with --init_from=resume, and the losses of a run never stopped",
    "[cluster][slurm][nanogpt]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_nanogpt");
  const std::string keys = nanogpt_job_keys("$PWD/tests/examples/fixtures/nanogpt_data/story");
  const CommandResult r = signal_and_requeue(
      dir,
      fmt::format("job=$(env -u TINYDDP_BIND_ADDR TINYDDP_PROGRAM=$PWD/examples/train_gpt TINYDDP_OUT_DIR={0}/out "
                  "sbatch --parsable --chdir {0} --output {0}/job.out --nodes 2 --ntasks-per-node 2 "
                  "examples/slurm/train.sbatch {1})",
                  dir, keys),
      "iter 100:", "USR1");
  INFO(r.output);
  std::smatch m;
  REQUIRE(std::regex_search(
      r.output, m,
      std::regex(
          R"(stopping before iteration ([0-9]+) of 400 \((User defined signal 1|another rank was signalled)\))")));
  const int64_t iter = std::stoll(m[1]);
  CHECK_THAT(r.output, Contains(fmt::format("resuming training from {}/out at iteration {}", dir, iter)));
  // The same job on one machine, never stopped: from the iteration the job stopped before on,
  // every printed loss, to the printed digits (4 ranks on either side).
  const CommandResult whole =
      run_command(fmt::format("launcher/launch --nproc_per_node 4 -- examples/train_gpt {} --out_dir={}/whole 2>&1",
                              std::regex_replace(keys, std::regex("\\$PWD/"), ""), dir));
  INFO(whole.output);
  REQUIRE(whole.exit_code == 0);
  const auto want = nanogpt_losses(whole.output, iter), got = nanogpt_losses(r.output, iter);
  CHECK(want.size() >= static_cast<size_t>(401 - iter));
  REQUIRE(got.size() == want.size());
  for (const auto& [line, losses] : want) {
    INFO(line << ": " << got.at(line) << " against " << losses);
    CHECK(printed_numbers_close(got.at(line), losses, 1.0001e-4));
  }
}

namespace {

// On a cluster of 3 nodes: the job `submit` (shell setting $job) submits, node n2 killed (its
// slurmd and every process in it) once the job printed step 300, `then` (shell), the job's end.
// Checks that it completed; returns the script's output.
CommandResult kill_node_mid_run(const std::string& dir, const std::string& submit, const std::string& then) {
  const CommandResult r = on_cluster(
      3, dir,
      fmt::format(
          "{1}\nfor i in $(seq 1200); do grep -q 'step  300/3000' {0}/job.out 2>/dev/null && break; sleep 0.1; done\n"
          "ip netns pids ${{SIM_SLURM_TAG}}n2 | xargs -r kill -KILL\n{2}\nwait_job $job\n"
          "scontrol show job $job | grep -o 'Restarts=[0-9]*'; cat {0}/job.out\n",
          dir, submit, then));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("ended: JobState=COMPLETED"));
  return r;
}

// The job resumed from the last checkpoint before the kill (the one of step 300 may have been
// under way) and ended with the parameters of its pieces: 6 ranks, then 4.
void check_resumed_on_4(const std::string& dir, const std::string& output) {
  const int64_t step = resumed_step(output);
  CHECK(step >= 200);
  CHECK(step % 100 == 0);
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 6, step, 4)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

}  // namespace

TEST_CASE(
    "slurm: a node killed mid-run (its slurmd and tasks) under train.sbatch --nodes 2-3: Slurm requeues the job, "
    "which resumes on the 2 nodes left with 4 tasks from the last checkpoint and equals its pieces",
    "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_kill_plain");
  const CommandResult r = kill_node_mid_run(
      dir, "job=$(job_of job --nodes 2-3 --)",
      fmt::format("for i in $(seq 1200); do grep -q 'restart 1:' {}/job.out 2>/dev/null && break; sleep 0.1; done",
                  dir));
  INFO(r.output);
  CHECK_THAT(r.output, Contains("Restarts=1"));
  CHECK_THAT(r.output, Contains("restart 0: 6 task(s) on n[0-2]"));
  CHECK_THAT(r.output, Contains("restart 1: 4 task(s) on n[0-1]"));
  check_resumed_on_4(dir, r.output);
}

TEST_CASE(
    "slurm: a node killed mid-run (its slurmd, launcher and workers): train_elastic.sbatch's launchers go on "
    "on the 2 nodes left with 4 ranks from the last checkpoint, and the job equals its pieces",
    "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_kill");
  const CommandResult r = kill_node_mid_run(dir,
                                            "job=$(SBATCH_SCRIPT=examples/slurm/train_elastic.sbatch "
                                            "TINYDDP_NPROC_PER_NODE=2 job_of job --nodes 3 --ntasks-per-node 1 "
                                            "--cpus-per-task 2 --)",
                                            "");
  INFO(r.output);
  CHECK_THAT(r.output, Contains("restart 0: 3 node(s) n[0-2]"));
  CHECK(std::regex_search(r.output, std::regex(R"(round [1-9] of job 'slurm-[0-9]+': 2 node\(s\))")));
  check_resumed_on_4(dir, r.output);
}

TEST_CASE("slurm: scancel leaves no process of the job on any node within KillWait", "[cluster][slurm]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_scancel");
  const CommandResult r = on_cluster(
      2, dir,
      fmt::format(
          "job=$(job_of job --nodes 2 --ntasks-per-node 2 --)\n"
          "for i in $(seq 1200); do grep -q 'step  200/3000' {0}/job.out 2>/dev/null && break; sleep 0.1; done\n"
          "start=$(date +%s%N); scancel $job; wait_job $job\n"
          "for i in $(seq 150); do n=0; for ns in $(ip netns list | grep -o \"${{SIM_SLURM_TAG}}n[0-9]*\"); do "
          "n=$((n + $(ip netns pids $ns | xargs -r ps -o comm= -p | grep -c '^train$'))); done; "
          "[ $n = 0 ] && break; sleep 0.1; done\n"
          "echo \"left: $n after $((($(date +%s%N) - start) / 1000000)) ms\"; cat {0}/job.out\n",
          dir));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("ended: JobState=CANCELLED"));
  CHECK_THAT(r.output, Contains("left: 0 after"));
  CHECK_THAT(r.output, !Contains("requeueing it"));  // scancel ends the job: no requeue
}

TEST_CASE(
    "slurm: a MASTER_ADDR no node has, a task count the global batch cannot split and Slurm variables that "
    "disagree are named; each job ends within the timeout",
    "[cluster][slurm][errors]") {
  SKIP_WITHOUT_SLURM();
  const std::string dir = tinyddp::testing::fresh_directory("slurm_errors");
  const CommandResult r = on_cluster(
      3, dir,
      fmt::format(
          "a=$(MASTER_ADDR=10.1.2.3 job_of a --nodes 2 --ntasks-per-node 2 --)\n"
          "b=$(job_of b --nodes 3 --ntasks 5 --)\n"
          "c=$(sbatch --parsable --chdir {0} --output {0}/c.out --nodes 2 --ntasks-per-node 2 --wrap "
          "\"MASTER_PORT=29555 srun bash -c 'SLURM_LOCALID=5 exec $PWD/examples/train --steps 10 --timeout 10'\")\n"
          "for j in $a $b $c; do wait_job $j; scontrol show job $j | grep -o 'RunTime=[0-9:]*'; done\n"
          "cat {0}/a.out {0}/b.out {0}/c.out\n",
          dir));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* job : {"1", "2", "3"})
    CHECK_THAT(r.output, Contains(fmt::format("job {} ended: JobState=FAILED", job)));
  // Ended by the errors, not by the 10 s timeout of a rank waiting for the others.
  CHECK(std::regex_search(r.output, std::regex("RunTime=00:00:0[0-9]\\s+job 2")));
  CHECK_THAT(r.output, Contains("cannot find its address toward MASTER_ADDR 10.1.2.3: no route reaches"));
  CHECK_THAT(r.output, Contains("--batch 24 is not divisible by SLURM_NTASKS 5"));
  CHECK_THAT(r.output, Contains("SLURM_LOCALID=5 is not in [0, SLURM_NTASKS_PER_NODE=2)"));
}
