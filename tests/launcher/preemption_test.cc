// Stopping for a requeue (examples/preemption.h), as Slurm asks a job to: SIGUSR1 or SIGTERM
// reaching the launcher or one rank alone (srun signals each task); the ranks agree on the
// step, rank 0 writes the checkpoint, everything exits with status 75, and the job run again
// with --resume, on the same or another number of ranks, finishes with the parameters of its
// pieces; examples/train and examples/train_gpt alike. Without --checkpoint the signals end
// the run as they always did.
#include <fmt/format.h>

#include "tests/launcher/elastic_pieces.h"
#include "tests/test_util.h"
#include "tinyddp/base/exit_status.h"
#include "tinyddp/launcher/spawn.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::run_command;
using namespace tinyddp::testing::elastic;

namespace {

// The step the ranks stopped after ("stopping after step N of M").
int64_t stopped_step(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(stopping after step ([0-9]+) of 3000)")));
  return std::stoll(m[1]);
}

// Shell: waits (at most 30 s) until `file` shows rank 0's step 200.
std::string wait_for_step_200(const std::string& file) {
  return fmt::format("for i in $(seq 600); do grep -q 'step  200/3000' {} 2>/dev/null && break; sleep 0.05; done; ",
                     file);
}

// `signal` (USR1, TERM) to a launcher of 2 ranks running `job` after its step 200: every rank
// stops after one step with a checkpoint and the launcher exits 75; launched again on 3 ranks,
// the job resumes from that step and ends with the parameters of its pieces.
void stop_and_resume_on_3(Job job, const std::string& signal, const std::string& signal_name) {
  const std::string dir = tinyddp::testing::fresh_directory("preempt_" + signal);
  const CommandResult stopped = run_command(
      fmt::format("TINYDDP_NUM_THREADS=1 launcher/launch --nproc_per_node 2 -- {0} > {1}/out 2>&1 & pid=$!; {2}"
                  "kill -{3} $pid; wait $pid; echo status $?; cat {1}/out",
                  job(dir, "job"), dir, wait_for_step_200(dir + "/out"), signal));
  INFO(stopped.output);
  CHECK_THAT(stopped.output, Contains(fmt::format("status {}", tinyddp::kRequeueExitStatus)));
  CHECK_THAT(stopped.output, Contains("launch: got " + signal_name + "; passing it to the workers"));
  CHECK_THAT(stopped.output, Contains("launch: the workers stopped for a requeue"));
  const int64_t step = stopped_step(stopped.output);
  CHECK(step >= 200);
  CHECK(step < 3000);
  CHECK_THAT(stopped.output, !Contains("done:"));
  const CommandResult resumed =
      run_command(fmt::format("TINYDDP_NUM_THREADS=1 launcher/launch --nproc_per_node 3 -- {}", job(dir, "job")));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed_step(resumed.output) == step);  // the checkpoint holds the step the ranks stopped after
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 2, step, 3, job)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

}  // namespace

TEST_CASE(
    "preemption: SIGUSR1 to the launcher stops every rank after one step with a checkpoint; resumed on 3 ranks "
    "the job equals its pieces",
    "[launcher][preemption]") {
  stop_and_resume_on_3(train, "USR1", "User defined signal 1");
}

TEST_CASE("preemption: train_gpt stops as train does: SIGTERM to the launcher, resumed on 3 ranks, equal to its pieces",
          "[launcher][preemption]") {
  stop_and_resume_on_3(train_gpt, "TERM", "Terminated");
}

TEST_CASE("preemption: SIGTERM to one rank alone (as srun's tasks get it): the ranks agree on the step and all exit 75",
          "[launcher][preemption]") {
  const std::string dir = tinyddp::testing::fresh_directory("preempt_term");
  const std::string env = fmt::format("TINYDDP_NUM_THREADS=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}",
                                      tinyddp::launcher::free_loopback_port());
  const CommandResult stopped = run_command(fmt::format(
      "{0} RANK=0 LOCAL_RANK=0 {1} > {2}/r0 2>&1 & p0=$!; {0} RANK=1 LOCAL_RANK=1 {1} > {2}/r1 2>&1 & p1=$!; {3}"
      "kill -TERM $p1; wait $p0; echo rank0 status $?; wait $p1; echo rank1 status $?; cat {2}/r0 {2}/r1",
      env, train(dir, "job"), dir, wait_for_step_200(dir + "/r0")));
  INFO(stopped.output);
  CHECK_THAT(stopped.output, Contains("rank0 status 75"));
  CHECK_THAT(stopped.output, Contains("rank1 status 75"));
  CHECK_THAT(stopped.output, Contains("(another rank was signalled)"));  // rank 0 got nothing itself
  const int64_t step = stopped_step(stopped.output);
  const CommandResult resumed =
      run_command(fmt::format("TINYDDP_NUM_THREADS=1 launcher/launch --nproc_per_node 2 -- {}", train(dir, "job")));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed_step(resumed.output) == step);
  CHECK(max_difference(dir + "/job.safetensors", reference(dir, 2, step, 2)) < 1e-6);
  require_clean(dir, dir + "/job.ckpt");
}

TEST_CASE("preemption: without --checkpoint, SIGTERM and SIGUSR1 end a run as unhandled signals do",
          "[launcher][preemption]") {
  for (const auto& [name, signo] : {std::pair{"TERM", 15}, std::pair{"USR1", 10}}) {
    INFO(name);
    const std::string dir = tinyddp::testing::fresh_directory(std::string("preempt_none_") + name);
    const CommandResult r = run_command(fmt::format(
        "TINYDDP_NUM_THREADS=1 examples/train --widths 32,64,4 --batch 24 --steps 9000 --log_every 100 > {0}/out "
        "2>&1 & pid=$!; {1}kill -{2} $pid; wait $pid; echo status $?",
        dir, std::regex_replace(wait_for_step_200(dir + "/out"), std::regex("3000"), "9000"), name));
    CHECK_THAT(r.output, Contains(fmt::format("status {}", 128 + signo)));
  }
}
