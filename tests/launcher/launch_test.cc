// //launcher:launch, run as a user runs it, with small shell programs as workers: the
// variables each worker gets, output prefixes and log files, failures (exit status, signal,
// a worker that ignores SIGTERM), restarts, signals sent to the launcher, processes left
// behind, two nodes on one machine, and the errors for bad arguments.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tests/test_util.h"
#include "tinyddp/base/cpus.h"
#include "tinyddp/launcher/launcher.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/tensor/cuda.h"

using Catch::Contains;
using tinyddp::testing::CommandResult;
using tinyddp::testing::read_file;
using tinyddp::testing::run_command;

namespace {

const std::string kLaunch = "launcher/launch";  // in the test's runfiles

CommandResult launch(const std::string& args) { return run_command(kLaunch + " " + args); }

// A fresh directory for one test's files.
std::string scratch(const std::string& name) { return tinyddp::testing::fresh_directory("launch_test_" + name); }

// Whether `pid` is still a live process (a zombie counts as gone).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// The pids written into the files `dir`/<prefix>* (one file per process).
std::vector<pid_t> pids_in(const std::string& dir, const std::string& prefix) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0)
      pids.push_back(std::stoi(read_file(entry.path().string())));
  }
  return pids;
}

}  // namespace

TEST_CASE("launch: each worker gets the torchrun variables", "[launcher]") {
  const CommandResult r = launch(
      "--nproc_per_node 3 -- /bin/bash -c 'echo \"RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
      "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT "
      "OMP=$OMP_NUM_THREADS RESTART=$TINYDDP_RESTART_COUNT HOSTED=$TINYDDP_STORE_HOSTED\"'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    const std::regex line(fmt::format(
        R"(\[rank {0}\] RANK={0} LOCAL_RANK={0} WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=([0-9]+) OMP=1 RESTART=0 HOSTED=1)",
        rank));
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m, line));
    CHECK(std::stoi(m[1]) > 0);
    ports.insert(m[1]);
  }
  CHECK(ports.size() == 1);  // one store for the job
  // A value the user set is kept.
  const CommandResult kept =
      run_command("OMP_NUM_THREADS=4 " + kLaunch + " -- /bin/bash -c 'echo OMP=$OMP_NUM_THREADS'");
  CHECK_THAT(kept.output, Contains("[rank 0] OMP=4"));
}

TEST_CASE("launch: output is prefixed line by line, stdout and stderr, unfinished last lines too", "[launcher]") {
  const CommandResult r =
      launch("--nproc_per_node 2 -- /bin/bash -c 'printf \"a\\nb\\n\"; printf \"err\\n\" >&2; printf \"tail\"'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    for (const char* text : {"a", "b", "err", "tail"})
      CHECK_THAT(r.output, Contains(fmt::format("[rank {}] {}\n", rank, text)));
  }
}

TEST_CASE("launch: --log_dir writes one file per rank; --tee also prints", "[launcher]") {
  const std::string dir = scratch("logs");
  const std::string worker = "-- /bin/bash -c 'echo hello from $RANK; echo oops >&2'";
  CommandResult r = launch("--nproc_per_node 2 --log_dir " + dir + " " + worker);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, !Contains("hello from"));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_file(fmt::format("{}/attempt_0/rank_{}.log", dir, rank));
    CHECK_THAT(log, Contains(fmt::format("hello from {}\n", rank)));
    CHECK_THAT(log, Contains("oops\n"));
  }
  r = launch("--nproc_per_node 2 --tee --log_dir " + dir + " " + worker);
  CHECK_THAT(r.output, Contains("[rank 1] hello from 1"));
}

TEST_CASE("launch: a worker that exits with status 3 stops the others; launch exits 3", "[launcher]") {
  const std::string dir = scratch("exit3");
  const CommandResult r = launch("--nproc_per_node 3 -- /bin/bash -c 'echo $$ > " + dir +
                                 "/pid_$RANK; if [ $RANK = 1 ]; then sleep 0.5; exit 3; fi; sleep 60'");
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.seconds < 10);
  CHECK_THAT(r.output, Contains("rank 1 (pid"));
  CHECK_THAT(r.output, Contains("exited with status 3"));
  CHECK_THAT(r.output, Contains("launch: failed: rank 1 exited with status 3"));
  const std::vector<pid_t> pids = pids_in(dir, "pid_");
  CHECK(pids.size() == 3);
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));
}

TEST_CASE("launch: a worker killed by a signal is reported, with 128 + signal as the status", "[launcher]") {
  const CommandResult r =
      launch("--nproc_per_node 2 -- /bin/bash -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK_THAT(r.output, Contains("rank 0"));
  CHECK_THAT(r.output, Contains("was killed by signal 9"));
  CHECK(r.seconds < 10);
}

TEST_CASE("launch: a worker that ignores SIGTERM is killed after the grace period", "[launcher]") {
  // Rank 1 fails only once rank 0 ignores SIGTERM (at most 5 s of waiting for it).
  const std::string dir = scratch("grace");
  const CommandResult r = launch(
      "--nproc_per_node 2 --grace_period 1 -- /bin/bash -c "
      "'trap \"\" TERM; touch " +
      dir +
      "/armed_$RANK; if [ $RANK = 1 ]; then "
      "for i in $(seq 500); do [ -e " +
      dir +
      "/armed_0 ] && break; sleep 0.01; done; exit 5; fi; "
      "while true; do sleep 0.1; done'");
  INFO(r.output);
  CHECK(r.exit_code == 5);
  CHECK_THAT(r.output, Contains("rank 0"));
  CHECK_THAT(r.output, Contains("did not stop within 1000 ms; killing it"));
  CHECK(r.seconds < 8);
}

TEST_CASE("launch: processes a worker started are stopped with it", "[launcher]") {
  const std::string dir = scratch("orphans");
  // Each worker starts a background sleeper; rank 1 then fails. Rank 0 finishes normally.
  const CommandResult r = launch("--nproc_per_node 2 -- /bin/bash -c 'sleep 120 & echo $! > " + dir +
                                 "/child_$RANK; if [ $RANK = 1 ]; then sleep 0.3; exit 2; fi; sleep 60'");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  const std::vector<pid_t> children = pids_in(dir, "child_");
  REQUIRE(children.size() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (pid_t pid : children) CHECK_FALSE(alive(pid));
}

TEST_CASE("launch: --max_restarts restarts the whole group", "[launcher]") {
  const std::string worker =
      "-- /bin/bash -c 'echo attempt $TINYDDP_RESTART_COUNT; [ $TINYDDP_RESTART_COUNT = 2 ] || exit 4'";
  CommandResult r = launch("--nproc_per_node 2 --max_restarts 2 " + worker);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("restarting the workers (restart 1 of 2)"));
  CHECK_THAT(r.output, Contains("restarting the workers (restart 2 of 2)"));
  CHECK_THAT(r.output, Contains("[rank 0] attempt 2"));
  CHECK_THAT(r.output, Contains("[rank 1] attempt 2"));
  r = launch("--nproc_per_node 2 --max_restarts 1 " + worker);
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.output, Contains("(after 1 restarts)"));
}

TEST_CASE("launch: a line a worker printed before it crashed is shown (stdout line-buffered)", "[launcher]") {
  // crash_worker writes a line to std::cout without flushing it, then aborts. A pipe's stdout
  // is block-buffered unless the library made it line-buffered; TINYDDP_STDOUT_BUFFERED=1 keeps
  // the block buffer, and the line dies with the process.
  const std::string line = "[rank 0] rank 0 printed this before it crashed";
  CommandResult r = launch("--nproc_per_node 1 -- tests/launcher/crash_worker");
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGABRT);
  CHECK_THAT(r.output, Contains(line));
  r = run_command("TINYDDP_STDOUT_BUFFERED=1 " + kLaunch + " --nproc_per_node 1 -- tests/launcher/crash_worker");
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGABRT);
  CHECK_THAT(r.output, !Contains(line));
}

TEST_CASE("launch: a restarted group of real ranks forms anew in the same store", "[launcher]") {
  const CommandResult r =
      launch("--nproc_per_node 3 --max_restarts 1 --grace_period 2 -- tests/launcher/restart_worker");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("restarting the workers (restart 1 of 1)"));
  for (int rank = 0; rank < 3; ++rank) CHECK_THAT(r.output, Contains(fmt::format("[rank {}] attempt 1 sum 6", rank)));
}

TEST_CASE("launch: SIGINT and SIGTERM sent to the launcher reach every worker", "[launcher]") {
  for (int signo : {SIGINT, SIGTERM}) {
    INFO("signal " << signo);
    const std::string dir = scratch("signal" + std::to_string(signo));
    const std::string script = fmt::format(
        "trap 'echo $$ > {0}/got_$RANK; exit 0' INT TERM; echo $$ > {0}/tmp_$RANK; mv {0}/tmp_$RANK {0}/ready_$RANK; "
        "while true; do sleep 0.05; done",
        dir);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::execl(kLaunch.c_str(), kLaunch.c_str(), "--nproc_per_node", "2", "--", "/bin/bash", "-c", script.c_str(),
              nullptr);
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pids_in(dir, "ready_").size() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, signo);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + signo);
    CHECK(pids_in(dir, "got_").size() == 2);
  }
}

TEST_CASE("launch: two nodes on one machine form one job", "[launcher]") {
  const int port = tinyddp::launcher::free_loopback_port();
  const std::string common = fmt::format(
      "--nnodes 2 --nproc_per_node 2 --master_port {} -- /bin/bash -c "
      "'echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK GROUP_RANK=$GROUP_RANK WORLD_SIZE=$WORLD_SIZE'",
      port);
  CommandResult node1;
  std::thread second([&] { node1 = launch("--node_rank 1 " + common); });
  const CommandResult node0 = launch("--node_rank 0 " + common);
  second.join();
  INFO(node0.output << node1.output);
  CHECK(node0.exit_code == 0);
  CHECK(node1.exit_code == 0);
  CHECK_THAT(node0.output, Contains("[rank 1] RANK=1 LOCAL_RANK=1 GROUP_RANK=0 WORLD_SIZE=4"));
  CHECK_THAT(node1.output, Contains("[rank 2] RANK=2 LOCAL_RANK=0 GROUP_RANK=1 WORLD_SIZE=4"));
  CHECK_THAT(node1.output, Contains("[rank 3] RANK=3 LOCAL_RANK=1 GROUP_RANK=1 WORLD_SIZE=4"));
}

TEST_CASE("launch: bad arguments and an unreachable master give clear errors", "[launcher]") {
  struct Case {
    std::string args;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", 2, "no program given"},
      {"--nproc_per_node 2", 2, "no program given"},
      {"--nproc_per_node 0 -- true", 2, "--nproc_per_node must be at least 1, got 0"},
      {"--nnodes 2 --node_rank 2 --master_port 29500 -- true", 2, "--node_rank 2 is out of range for --nnodes 2"},
      {"--nnodes 2 --node_rank 1 -- true", 2, "--master_port is needed when --nnodes > 1"},
      {"--tee -- true", 2, "needs --log_dir"},
      {"--nnodes 1:3 -- true", 2, "--nnodes 1:3 asks for an elastic job"},
      {"--nnodes 3:2 -- true", 2, "--nnodes MIN:MAX needs MIN <= MAX, got 3:2"},
      {"--nnodes 0:2 -- true", 2, "--nnodes MIN:MAX needs MIN >= 1, got 0"},
      {"--nnodes two -- true", 2, "--nnodes takes a number or MIN:MAX, got 'two'"},
      {"--nproc_per_node two -- true", 2, "--nproc_per_node takes a number, gpu, cpu or auto, got 'two'"},
      {"--bogus -- true", 2, "unknown option '--bogus' (see launch --help"},
      {"--nproc_per_node 2 --standalon true", 2, "unknown option '--standalon'"},
      {"--standalone --nnodes 2 --master_port 29500 -- true", 2, "--standalone is a single-node job"},
      {"--standalone --nnodes 1:2 --rdzv_endpoint 127.0.0.1:29500 -- true", 2, "--standalone is a single-node job"},
      {"-- /nonexistent/program", 127, "cannot run '/nonexistent/program' for rank 0: No such file or directory"},
      {"-- /tmp", 127, "cannot run '/tmp' for rank 0: /tmp is a directory, not a program"},
      {"--nnodes 2 --node_rank 1 --master_port 1 --rdzv_timeout 1 -- true", 1,
       "node 1 cannot reach the master at 127.0.0.1:1"},
  };
  for (const Case& c : cases) {
    const CommandResult r = launch(c.args);
    INFO("launch " << c.args << "\n" << r.output);
    CHECK(r.exit_code == c.exit_code);
    CHECK_THAT(r.output, Contains(c.message));
    CHECK(r.seconds < 10);
  }
  // A script without execute permission.
  const std::string script = scratch("not_executable") + "/train.sh";
  std::ofstream(script) << "echo never\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const CommandResult r = launch("-- " + script);
  INFO(r.output);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.output, Contains("Permission denied (the file is not executable: chmod +x " + script +
                                ", or name its interpreter first)"));
}

TEST_CASE("launch: torchrun's spellings: dashed options, --standalone, --nproc_per_node cpu|gpu|auto", "[launcher]") {
  const std::string show = " -- /bin/bash -c 'echo R=$RANK W=$WORLD_SIZE'";
  const CommandResult dashed = launch("--standalone --nproc-per-node 2 --max-restarts 0 --monitor-interval 1" + show);
  INFO(dashed.output);
  CHECK(dashed.exit_code == 0);
  CHECK_THAT(dashed.output, Contains("[rank 0] R=0 W=2"));
  CHECK_THAT(dashed.output, Contains("[rank 1] R=1 W=2"));

  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int gpus = tinyddp::tensor::cuda::device_count();
  const CommandResult cpu = launch("--nproc_per_node cpu" + show);
  INFO(cpu.output);
  CHECK(cpu.exit_code == 0);
  CHECK_THAT(cpu.output, Contains(fmt::format("[rank {}] R={} W={}", cpus - 1, cpus - 1, cpus)));
  const CommandResult automatic = launch("--nproc_per_node auto" + show);
  INFO(automatic.output);
  CHECK(automatic.exit_code == 0);
  CHECK_THAT(automatic.output, Contains(fmt::format("W={}", gpus > 0 ? gpus : cpus)));
  const CommandResult gpu = launch("--nproc_per_node gpu" + show);
  INFO(gpu.output);
  if (gpus > 0) {
    CHECK(gpu.exit_code == 0);
    CHECK_THAT(gpu.output, Contains(fmt::format("W={}", gpus)));
  } else {
    CHECK(gpu.exit_code == 2);
    CHECK_THAT(gpu.output, Contains("launch: --nproc_per_node gpu: no GPU is visible"));
  }
}

TEST_CASE("launch: a relative program is found from the directory `bazel run` was typed in", "[launcher]") {
  // Under `bazel run` the launcher starts in its runfiles; BUILD_WORKING_DIRECTORY names the
  // user's directory, which relative paths (and the workers' working directory) refer to.
  const std::string dir = scratch("working_directory");
  std::filesystem::create_directories(dir + "/bin");
  {
    std::ofstream program(dir + "/bin/where.sh");
    program << "#!/bin/sh\necho \"cwd=$(pwd) args=$*\"\n";
  }
  std::filesystem::permissions(dir + "/bin/where.sh", std::filesystem::perms::owner_all);
  const std::string launch_path = std::filesystem::absolute(kLaunch).string();
  const std::string in_dir = "BUILD_WORKING_DIRECTORY=" + dir + " " + launch_path + " ";

  const CommandResult ran = run_command(in_dir + "--nproc_per_node 2 -- bin/where.sh data/x.csv");
  INFO(ran.output);
  CHECK(ran.exit_code == 0);
  CHECK_THAT(ran.output, Contains("[rank 0] cwd=" + dir + " args=data/x.csv"));
  CHECK_THAT(ran.output, Contains("[rank 1] cwd=" + dir + " args=data/x.csv"));

  const CommandResult missing = run_command(in_dir + "-- bazel-bin/missing_program");
  INFO(missing.output);
  CHECK(missing.exit_code == 127);
  CHECK_THAT(missing.output,
             Contains("cannot run 'bazel-bin/missing_program' for rank 0: No such file or directory (looked for " +
                      dir + "/bazel-bin/missing_program"));

  const CommandResult bare = run_command(launch_path + " -- no_such_program_anywhere");
  INFO(bare.output);
  CHECK(bare.exit_code == 127);
  CHECK_THAT(
      bare.output,
      Contains("cannot run 'no_such_program_anywhere' for rank 0: No such file or directory (not found on PATH="));

  const CommandResult bad_dir = run_command("BUILD_WORKING_DIRECTORY=" + dir + "/nowhere " + launch_path + " -- true");
  INFO(bad_dir.output);
  CHECK(bad_dir.exit_code == 2);
  CHECK_THAT(bad_dir.output, Contains("cannot change to BUILD_WORKING_DIRECTORY=" + dir + "/nowhere"));
}

TEST_CASE("launch: workers share the node's cores (intra-op threads, --cpu_bind)", "[launcher][threads]") {
  using tinyddp::launcher::CoreShare;
  using tinyddp::launcher::LaunchConfig;
  using tinyddp::launcher::share_cores;
  // Four cores with two hyperthreads each (CPUs k and k + 4).
  const std::vector<std::vector<int>> cores = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  LaunchConfig o;
  o.nproc_per_node = 2;
  o.cpu_bind = true;
  CoreShare two = share_cores(o, cores, 4, nullptr);
  CHECK(two.threads == 2);
  CHECK(two.cpus == std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}});
  CHECK_THAT(two.message, Contains("2 worker(s) on this node's 4 physical core(s): 2 intra-op thread(s) each") &&
                              Contains("local rank 0 on CPUs 0-1, 4-5; local rank 1 on CPUs 2-3, 6-7"));
  o.nproc_per_node = 6;  // more workers than cores: one thread each, cores dealt out in turn
  const CoreShare six = share_cores(o, cores, 4, nullptr);
  CHECK(six.threads == 1);
  CHECK(six.cpus[4] == std::vector<int>{0, 4});
  CHECK_THAT(six.message, Contains("more workers than cores"));
  o.cpu_bind = false;  // a cgroup quota of 2 CPUs caps the threads; the user's setting is kept
  CHECK(share_cores(o, cores, 2, nullptr).cpus.empty());
  o.nproc_per_node = 1;
  CHECK(share_cores(o, cores, 2, nullptr).threads == 2);
  CHECK_THAT(share_cores(o, cores, 2, "3").message, Contains("TINYDDP_NUM_THREADS=3 intra-op threads, as set"));

  // On this machine: what each worker is given and where it runs.
  const std::vector<std::vector<int>> here = tinyddp::available_cores();
  o.nproc_per_node = 2;
  o.cpu_bind = true;
  const CoreShare expected = share_cores(o, here, tinyddp::available_physical_cores(), nullptr);
  const CommandResult r = run_command("env -u TINYDDP_NUM_THREADS " + kLaunch +
                                      " --nproc_per_node 2 --cpu_bind -- /bin/bash -c 'echo \"T=$TINYDDP_NUM_THREADS "
                                      "$(grep Cpus_allowed_list /proc/self/status | tr -d \"\\t\")\"'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::set<int> cpus;
    for (const int cpu : expected.cpus[static_cast<size_t>(rank)]) cpus.insert(cpu);
    const std::regex line(fmt::format(R"(\[rank {}\] T={} Cpus_allowed_list:([0-9,-]+))", rank, expected.threads));
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m, line));
    // The kernel's list ("0-1,4-5") as a set.
    std::set<int> got;
    std::stringstream list(m[1].str());
    for (std::string part; std::getline(list, part, ',');) {
      const size_t dash = part.find('-');
      const int from = std::stoi(part.substr(0, dash)),
                to = dash == std::string::npos ? from : std::stoi(part.substr(dash + 1));
      for (int cpu = from; cpu <= to; ++cpu) got.insert(cpu);
    }
    CHECK(got == cpus);
  }
}
