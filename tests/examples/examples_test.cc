// The DDP examples and //examples:train, each run on 2 ranks under //launcher:launch as a user
// runs them, with their printed results checked: identical checksums on every rank, the
// input counts of the Join example, the classifier's held-out accuracy.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/examples/example_runs.h"
#include "tests/test_util.h"
#include "tinyddp/base/cpus.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/cuda.h"

using Catch::Contains;
using tinyddp::testing::all_matches;
using tinyddp::testing::CommandResult;
using tinyddp::testing::launch2;
using tinyddp::testing::read_losses;
using tinyddp::testing::require_same_on_both_ranks;
using tinyddp::testing::run_command;
using tinyddp::testing::temp_path;

namespace {

// examples/train with `args` must exit with status 1 and print `message`.
void expect_train_error(const std::string& args, const std::string& message) {
  const CommandResult r = run_command("examples/train " + args);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains(message));
}

}  // namespace

TEST_CASE("examples: ddp_basic, one DDP step on 2 ranks, ends with identical parameters", "[examples][ddp]") {
  const CommandResult r = launch2("examples/ddp_basic");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // Different data on each rank (different losses), the same parameters after the step.
  CHECK(all_matches(r.output, R"(loss ([0-9.]+),)").size() == 2);
  require_same_on_both_ranks(r.output, R"(\] rank [01]: loss [0-9.]+, parameter checksum ([0-9a-f]{16}))");
  // Started without the launcher it forks its two ranks itself.
  const CommandResult alone = run_command("examples/ddp_basic");
  INFO(alone.output);
  CHECK(alone.exit_code == 0);
  require_same_on_both_ranks(alone.output, R"(rank [01]: loss [0-9.]+, parameter checksum ([0-9a-f]{16}))");
}

TEST_CASE("examples: ddp_checkpoint saves on rank 0, loads everywhere, trains on identically", "[examples][ddp]") {
  const std::string path = temp_path("toy.checkpoint");
  const CommandResult r = launch2("examples/ddp_checkpoint " + path);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  require_same_on_both_ranks(r.output, R"(loaded .* \(4 tensors\), checksum ([0-9a-f]{16}))");
  require_same_on_both_ranks(r.output, R"(after 3 steps, checksum ([0-9a-f]{16}))");
  CHECK_FALSE(std::filesystem::exists(path));  // rank 0 cleaned up after the final barrier
}

TEST_CASE("examples: ddp_join, rank r has 5 + r inputs, every rank finishes", "[examples][ddp][join]") {
  const CommandResult r = launch2("examples/ddp_join");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank 0] Rank 0 has exhausted all 5 of its inputs!"));
  CHECK_THAT(r.output, Contains("[rank 1] Rank 1 has exhausted all 6 of its inputs!"));
  require_same_on_both_ranks(r.output, R"(of its inputs! checksum ([0-9a-f]{16}))");
  CHECK(r.seconds < 30);
}

TEST_CASE("examples: ddp_zero_join, DDP and ZeRO under Join, rank r has 10 + r inputs", "[examples][ddp][join][zero]") {
  const CommandResult r = launch2("examples/ddp_zero_join");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank 0] Rank 0 has exhausted all 10 of its inputs!"));
  CHECK_THAT(r.output, Contains("[rank 1] Rank 1 has exhausted all 11 of its inputs!"));
  require_same_on_both_ranks(r.output, R"(of its inputs! checksum ([0-9a-f]{16}))");
  CHECK(r.seconds < 30);
}

TEST_CASE("examples: train on 2 ranks learns the synthetic classes and reports progress", "[examples][train][ddp]") {
  const std::string metrics = temp_path("train_metrics.csv");
  const std::string save = temp_path("train.safetensors");
  const CommandResult r = launch2("examples/train --device cpu --widths 32,64,4 --steps 200 --log_every 50 --metrics " +
                                  metrics + " --save " + save);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("data-parallel on 2 ranks (gloo), device cpu"));
  CHECK(all_matches(r.output, R"(\[rank 0\] step +([0-9]+)/200 +loss [0-9.]+ +[0-9]+ samples/s +elapsed [0-9.]+ s)")
            .size() == 4);
  CHECK_THAT(r.output, !Contains("[rank 1]"));  // progress from rank 0 only
  // 4 classes whose centres are ~4.2 noise deviations apart: the best possible accuracy is
  // about 95%; the trained model must come close.
  const std::vector<std::string> accuracy =
      all_matches(r.output, R"(held-out accuracy ([0-9.]+)% on 1024 new samples)");
  REQUIRE(accuracy.size() == 1);
  CHECK(std::stod(accuracy[0]) > 85.0);
  std::ifstream csv(metrics);
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  CHECK(lines == 201);  // header + one row per step
  CHECK(std::filesystem::file_size(save) > 0);
}

TEST_CASE("examples: train --device cuda without a GPU says why", "[examples][train][errors]") {
  // On a GPU host train succeeds with --device cuda: there is nothing to refuse.
  if (tinyddp::tensor::cuda::is_available()) TINYDDP_SKIP("a GPU is present, so --device cuda is valid here");
  expect_train_error("--device cuda --steps 1", "train: error: --device cuda: ");
}

TEST_CASE("examples: train --backend nccl without a GPU says why", "[examples][train][errors]") {
  expect_train_error("--device cpu --backend nccl --steps 1", "--backend nccl needs --device cuda");
}

TEST_CASE("examples: TINYDDP_CPU_ISA that names nothing stops train at start-up; avx2 runs",
          "[examples][train][errors]") {
  const CommandResult bad = run_command("TINYDDP_CPU_ISA=sse4 examples/train --steps 1");
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Contains("train: error: TINYDDP_CPU_ISA='sse4' names no instruction set"));
  const CommandResult forced = run_command("TINYDDP_CPU_ISA=avx2 examples/train --steps 1");
  INFO(forced.output);
  CHECK(forced.exit_code == 0);
  CHECK_THAT(forced.output, Contains("cpu kernels: ") && Contains(": avx2 (matmul: "));
}

TEST_CASE("examples: bad thread counts stop train at start-up, naming the range; --threads runs",
          "[examples][train][errors][threads]") {
  const std::string most = std::to_string(4 * tinyddp::available_cpus());
  for (const char* bad : {"abc", "0", "100000"}) {
    const CommandResult r = run_command(std::string("TINYDDP_NUM_THREADS=") + bad + " examples/train --steps 1");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(std::string("train: error: TINYDDP_NUM_THREADS='") + bad + "'") &&
                             Contains("from 1 to " + most));
  }
  CHECK_THAT(run_command("env -u TINYDDP_NUM_THREADS OMP_NUM_THREADS=x examples/train --steps 1").output,
             Contains("OMP_NUM_THREADS='x': not a whole number"));
  expect_train_error("--threads -1 --steps 1", "--threads must be positive (or 0: the default), got -1");
  expect_train_error("--threads 100000 --steps 1", "set_num_threads: 100000 threads; expected 1 to " + most);
  const CommandResult two = run_command("examples/train --steps 2 --threads 2");
  INFO(two.output);
  CHECK(two.exit_code == 0);
  CHECK_THAT(two.output, Contains("; 2 intra-op threads (set_num_threads)"));
  // Under Slurm (srun -c 1) the task's CPUs, said where they came from; a bad value is named.
  const std::string slurm = "env -u TINYDDP_NUM_THREADS -u OMP_NUM_THREADS SLURM_CPUS_PER_TASK=";
  CHECK_THAT(run_command(slurm + "1 examples/train --steps 1").output,
             Contains("; 1 intra-op threads (SLURM_CPUS_PER_TASK=1)"));
  CHECK_THAT(run_command(slurm + "x examples/train --steps 1").output,
             Contains("train: error: SLURM_CPUS_PER_TASK='x': not a whole number"));
}

TEST_CASE("examples: TINYDDP_CPU_ISA=avx512 on a CPU without it stops train at start-up", "[examples][train][errors]") {
  if (tinyddp::tensor::cpu_has(tinyddp::tensor::CpuIsa::kAvx512)) {
    TINYDDP_SKIP("this CPU has AVX-512, so TINYDDP_CPU_ISA=avx512 is valid here");
  }
  const CommandResult lacking = run_command("TINYDDP_CPU_ISA=avx512 examples/train --steps 1");
  INFO(lacking.output);
  CHECK(lacking.exit_code == 1);
  CHECK_THAT(lacking.output,
             Contains("train: error: TINYDDP_CPU_ISA=avx512, but this CPU") && Contains("cannot run AVX-512 code"));
}

TEST_CASE("examples: train on 2 ranks sharing one GPU (gloo staging) matches the CPU run",
          "[examples][train][ddp][cuda]") {
  if (!tinyddp::tensor::cuda::is_available()) TINYDDP_SKIP(tinyddp::tensor::cuda::unavailable_reason());
  const std::string cpu_metrics = temp_path("train_cpu.csv"), gpu_metrics = temp_path("train_gpu.csv");
  const std::string args = " --widths 32,64,4 --steps 30 --log_every 30 --metrics ";
  const CommandResult cpu = launch2("examples/train --device cpu" + args + cpu_metrics);
  INFO(cpu.output);
  REQUIRE(cpu.exit_code == 0);
  const CommandResult gpu = launch2("examples/train --device cuda --backend gloo" + args + gpu_metrics);
  INFO(gpu.output);
  REQUIRE(gpu.exit_code == 0);
  CHECK_THAT(gpu.output, Contains("data-parallel on 2 ranks (gloo), device cuda:0"));
  const std::vector<double> on_cpu = read_losses(cpu_metrics), on_gpu = read_losses(gpu_metrics);
  REQUIRE(on_cpu.size() == 30);
  REQUIRE(on_gpu.size() == 30);
  // The same weights and data on both devices: float32 results agree to rounding (reduction
  // orders differ), after 30 steps of training too.
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    INFO("step " << i);
    CHECK(on_gpu[i] == Catch::Detail::Approx(on_cpu[i]).epsilon(1e-4));
  }
}

TEST_CASE("examples: train --dataset digits on 2 ranks gives the one-process losses and learns the digits",
          "[examples][train][ddp][digits]") {
  if (!std::filesystem::exists("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz")) {
    TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  }
  const std::string one_csv = temp_path("digits_one.csv"), two_csv = temp_path("digits_two.csv");
  const std::string args = " --dataset digits --steps 300 --momentum 0.9 --lr 0.05 --log_every 100 --metrics ";
  const CommandResult one = run_command("examples/train" + args + one_csv);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  const CommandResult two = launch2("examples/train --stats" + args + two_csv);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.output, Contains("1500 training digits from "));
  CHECK_THAT(two.output, Contains("(23 batches of 64 per epoch), data-parallel on 2 ranks (gloo)"));
  // Each rank's 32 rows of every global batch of 64: after the allreduce the gradients, and so
  // the losses, are the one-process ones (to float32 rounding).
  const std::vector<double> alone = read_losses(one_csv), ddp = read_losses(two_csv);
  REQUIRE(alone.size() == 300);
  REQUIRE(ddp.size() == 300);
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("step " << i);
    CHECK(ddp[i] == Catch::Detail::Approx(alone[i]).epsilon(1e-4).margin(1e-6));
  }
  const std::vector<std::string> accuracy =
      all_matches(two.output, R"(held-out accuracy ([0-9.]+)% on 297 held-out digits)");
  REQUIRE(accuracy.size() == 1);
  CHECK(std::stod(accuracy[0]) > 93.0);
  // --stats: DDP's statistics from rank 0, the buckets rebuilt after the first iteration.
  CHECK_THAT(two.output, Contains("[rank 0] DDP statistics of rank 0 over 300 synchronised iterations:"));
  CHECK_THAT(two.output, Contains("1 bucket(s) in launch order: 37.5 KiB; rebuilt in the order gradients arrived"));
  CHECK(all_matches(two.output,
                    R"(communication overlapped with backward [0-9.]+ ms \([0-9.]+ ms\): ([0-9]+)% of it hidden)")
            .size() == 1);
}

TEST_CASE("examples: train --comm_hook powersgd on the digits reaches plain allreduce's accuracy within 2 points",
          "[examples][train][ddp][digits][powersgd]") {
  if (!std::filesystem::exists("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz")) {
    TINYDDP_SKIP("python3-sklearn's digits are missing: bash scripts/setup.sh installs them");
  }
  const std::string args = "examples/train --dataset digits --steps 300 --momentum 0.9 --lr 0.05 --log_every 300";
  const CommandResult plain = launch2(args);
  const CommandResult compressed = launch2(args + " --comm_hook powersgd --powersgd_start_iter 10");
  INFO(plain.output << compressed.output);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(compressed.exit_code == 0);
  const auto accuracy = [](const std::string& output) {
    const std::vector<std::string> found =
        all_matches(output, R"(held-out accuracy ([0-9.]+)% on 297 held-out digits)");
    REQUIRE(found.size() == 1);
    return std::stod(found[0]);
  };
  CHECK(accuracy(compressed.output) > 93.0);
  CHECK(accuracy(compressed.output) >= accuracy(plain.output) - 2.0);
  // Rank 1 of the 128 x 64 weight sends 192 numbers instead of 8192: well over 5x overall.
  const std::vector<std::string> rate =
      all_matches(compressed.output, R"(PowerSGD rank 1: ([0-9.]+)x fewer gradient elements sent)");
  REQUIRE(rate.size() == 1);
  CHECK(std::stod(rate[0]) > 5.0);
}

TEST_CASE("examples: train under mpirun -np 2 (Open MPI's variables) gives the launcher's losses",
          "[examples][train][mpi]") {
  if (run_command("command -v mpirun").exit_code != 0)
    TINYDDP_SKIP("no mpirun: bash scripts/setup.sh installs openmpi-bin");
  const std::string mpi_csv = temp_path("mpi.csv"), launch_csv = temp_path("launch.csv");
  const std::string args = "examples/train --device cpu --widths 32,64,4 --steps 30 --log_every 30 --metrics ";
  // mpirun sets OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK; the master is exported with -x. Root
  // needs Open MPI's consent; its session files go to the test's directory.
  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  const CommandResult mpi = run_command("TMPDIR=" + temp_path("") +
                                        " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                        "mpirun -np 2 --oversubscribe -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" +
                                        port + " " + args + mpi_csv);
  INFO(mpi.output);
  REQUIRE(mpi.exit_code == 0);
  CHECK_THAT(mpi.output, Contains("data-parallel on 2 ranks (gloo)"));
  const CommandResult launched = launch2(args + launch_csv);
  INFO(launched.output);
  REQUIRE(launched.exit_code == 0);
  const std::vector<double> a = read_losses(mpi_csv), b = read_losses(launch_csv);
  REQUIRE(a.size() == 30);
  REQUIRE(b == a);
}

TEST_CASE("examples: a failed attempt restarted by launch --max_restarts resumes from rank 0's checkpoint, same result",
          "[examples][train][ddp][restart]") {
  const std::string args = "examples/train --device cpu --widths 32,64,4 --steps 40 --log_every 40";
  const std::string full = temp_path("full.safetensors"), restarted = temp_path("restarted.safetensors");
  const std::string full_csv = temp_path("full.csv"), restarted_csv = temp_path("restarted.csv");
  const std::string checkpoint = temp_path("train.checkpoint");
  std::filesystem::remove(checkpoint);
  // What a writer killed mid-write leaves behind (its pid is gone): the run removes it.
  const std::string dead_writer = checkpoint + ".tmp.999999999";
  std::ofstream(dead_writer) << "half a checkpoint";
  const CommandResult once = launch2(args + " --save " + full + " --metrics " + full_csv);
  INFO(once.output);
  REQUIRE(once.exit_code == 0);
  // Both ranks fail before step 25 on the first attempt; the checkpoint of step 20 survives.
  const CommandResult twice = run_command("launcher/launch --nproc_per_node 2 --max_restarts 1 -- " + args +
                                          " --save " + restarted + " --metrics " + restarted_csv + " --checkpoint " +
                                          checkpoint + " --checkpoint_every 10 --resume --fail_at_step 25");
  INFO(twice.output);
  REQUIRE(twice.exit_code == 0);
  CHECK_THAT(twice.output, Contains("fails on purpose before step 25"));
  CHECK_THAT(twice.output, Contains("launch: restarting the workers (restart 1 of 1)"));
  CHECK_THAT(twice.output, Contains("resuming from " + checkpoint + " after 20 steps"));
  CHECK_FALSE(std::filesystem::exists(dead_writer));
  CHECK(tinyddp::nn::load_safetensors(checkpoint).metadata.at("step") == "40");  // nn::save_checkpoint's file
  // The same parameters and the same per-step losses as the run that never failed.
  const auto a = tinyddp::nn::load_safetensors(full).tensors, b = tinyddp::nn::load_safetensors(restarted).tensors;
  for (const auto& [name, t] : a) CHECK(tinyddp::tensor::equal(t, b.at(name)));
  CHECK(read_losses(restarted_csv) == read_losses(full_csv));
  // Fully sharded: each rank writes and reads its own file of shards; the same result again.
  const std::string sharded = temp_path("train_fsdp.checkpoint"), fsdp_csv = temp_path("fsdp.csv");
  const std::string fsdp_full_csv = temp_path("fsdp_full.csv"), fsdp_saved = temp_path("fsdp.safetensors");
  for (const std::string rank : {"0", "1"}) std::filesystem::remove(sharded + ".rank" + rank + "-of-2");
  const CommandResult fsdp_once = launch2(args + " --fsdp --metrics " + fsdp_full_csv);
  REQUIRE(fsdp_once.exit_code == 0);
  const CommandResult fsdp_twice = run_command(
      "launcher/launch --nproc_per_node 2 --max_restarts 1 -- " + args + " --fsdp --save " + fsdp_saved +
      " --metrics " + fsdp_csv + " --checkpoint " + sharded + " --checkpoint_every 10 --resume --fail_at_step 25");
  INFO(fsdp_twice.output);
  REQUIRE(fsdp_twice.exit_code == 0);
  CHECK_THAT(fsdp_twice.output, Contains("resuming from " + sharded + " after 20 steps"));
  CHECK(std::filesystem::exists(sharded + ".rank1-of-2"));
  CHECK(read_losses(fsdp_csv) == read_losses(fsdp_full_csv));
  const auto c = tinyddp::nn::load_safetensors(fsdp_saved).tensors;
  for (const auto& [name, t] : a) CHECK(tinyddp::tensor::allclose(t, c.at(name), 1e-5, 1e-6));  // DDP's, to rounding
  // Without a retry, the failure ends the job with the worker's status.
  const CommandResult no_retry = launch2(args + " --checkpoint " + checkpoint + ".2 --resume --fail_at_step 5");
  CHECK(no_retry.exit_code == 3);
  expect_train_error("--resume --steps 1", "--resume needs --checkpoint PATH");
}

TEST_CASE("examples: train's bad digits and DDP options get clear errors", "[examples][train][errors][digits]") {
  expect_train_error("--dataset digits --digits /nonexistent/digits.csv.gz --steps 1",
                     "digits: cannot open /nonexistent/digits.csv.gz");
  expect_train_error("--dataset digits --model toy --steps 1", "--dataset digits trains a classifier");
  expect_train_error("--dataset digits --widths 32,10 --steps 1", "--dataset digits: the widths must start with 64");
  expect_train_error("--timeline /tmp/never --steps 1",
                     "--timeline records DDP's events, but this run is on one process");
  const CommandResult zero = run_command("examples/train --bucket_cap_mb 0 --steps 1");
  CHECK(zero.exit_code != 0);
  CHECK_THAT(zero.output, Contains("--bucket_cap_mb"));
}

namespace {

// /usr/bin/python3 with matplotlib (python3-matplotlib), which the picture scripts need.
bool have_matplotlib() { return run_command("/usr/bin/python3 -c 'import matplotlib'").exit_code == 0; }

bool is_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.good() && std::string(magic, 8) == "\x89PNG\r\n\x1a\n";
}

}  // namespace

TEST_CASE("examples: train --timeline on 2 ranks; the scripts merge the traces and draw them and the loss",
          "[examples][train][ddp][timeline]") {
  if (!have_matplotlib())
    TINYDDP_SKIP("/usr/bin/python3 has no matplotlib: bash scripts/setup.sh installs python3-matplotlib");
  const std::string prefix = temp_path("train_tl"), merged = temp_path("train_tl.json");
  const std::string metrics = temp_path("train_tl.csv");
  const CommandResult r = launch2(
      "examples/train --device cpu --widths 32,256,256,4 --steps 12 --bucket_cap_mb 0.02 "
      "--first_bucket_cap_mb 0.002 --stats --timeline " +
      prefix + " --metrics " + metrics);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(std::filesystem::exists(prefix + ".rank0.json"));
  REQUIRE(std::filesystem::exists(prefix + ".rank1.json"));

  const CommandResult merge = run_command("/usr/bin/python3 scripts/merge_timelines.py " + prefix + " -o " + merged);
  INFO(merge.output);
  REQUIRE(merge.exit_code == 0);
  std::ifstream in(merged);
  const nlohmann::json trace = nlohmann::json::parse(in);
  CHECK(trace["otherData"]["ranks"] == 2);
  // A process per rank; in each a compute row and one row per bucket: 4 here (--stats says
  // so), as caps of 2 KiB (first) and 20 KiB cut the parameters in gradient-ready order.
  const std::vector<std::string> buckets = all_matches(r.output, R"(\] +([0-9]+) bucket\(s\) in launch order)");
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0] == "4");
  std::map<int, std::set<std::string>> rows;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "thread_name") rows[e["pid"].get<int>()].insert(e["args"]["name"].get<std::string>());
  }
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == rows[1]);
  CHECK(rows[0] == std::set<std::string>{"compute", "bucket 0 allreduce", "bucket 1 allreduce", "bucket 2 allreduce",
                                         "bucket 3 allreduce"});

  // --last N keeps the last N iterations (of 12) and the row names.
  const CommandResult last =
      run_command("/usr/bin/python3 scripts/merge_timelines.py " + prefix + " --last 2 -o " + merged + ".last");
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  std::ifstream last_in(merged + ".last");
  const nlohmann::json last_trace = nlohmann::json::parse(last_in);
  std::set<int64_t> kept;
  for (const auto& e : last_trace["traceEvents"]) {
    if (e["ph"] != "M") kept.insert(e["args"]["iteration"].get<int64_t>());
  }
  CHECK(kept == std::set<int64_t>{10, 11});

  const std::string png = temp_path("train_tl.png");
  const CommandResult drawn = run_command("/usr/bin/python3 scripts/plot_timeline.py " + merged + " -o " + png);
  INFO(drawn.output);
  CHECK(drawn.exit_code == 0);
  CHECK_THAT(drawn.output, Contains("2 ranks"));
  CHECK(is_png(png));
  const std::string loss_png = temp_path("train_loss.png");
  const CommandResult loss =
      run_command("/usr/bin/python3 scripts/plot_loss.py 'a=" + metrics + "' 'b=" + metrics + "' -o " + loss_png);
  INFO(loss.output);
  CHECK(loss.exit_code == 0);
  CHECK_THAT(loss.output, Contains("b: largest difference from a: 0.000e+00"));
  CHECK(is_png(loss_png));

  // What the scripts refuse, and say why.
  std::filesystem::remove(prefix + ".rank0.json");
  const CommandResult missing = run_command("/usr/bin/python3 scripts/merge_timelines.py " + prefix + " -o " + merged);
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.output, Contains("no timeline for rank(s) [0]"));
  const CommandResult twice = run_command("/usr/bin/python3 scripts/merge_timelines.py " + prefix + ".rank1.json " +
                                          prefix + ".rank1.json -o " + merged);
  CHECK_THAT(twice.output, Contains("rank 1 appears twice"));
  const CommandResult not_trace =
      run_command("/usr/bin/python3 scripts/merge_timelines.py " + metrics + ".json -o " + merged);
  CHECK_THAT(not_trace.output, Contains("cannot read"));
  std::ofstream(temp_path("bad.csv")) << "step,loss\n0,abc\n";
  const CommandResult bad_csv =
      run_command("/usr/bin/python3 scripts/plot_loss.py 'a=" + temp_path("bad.csv") + "' -o " + loss_png);
  CHECK(bad_csv.exit_code != 0);
  CHECK_THAT(bad_csv.output, Contains("line 2: expected 'step,loss'"));
}

TEST_CASE("scripts/plot_data_parallel.py draws the three steps and names what a results file lacks",
          "[examples][pictures][dp]") {
  if (!have_matplotlib())
    TINYDDP_SKIP("/usr/bin/python3 has no matplotlib: bash scripts/setup.sh installs python3-matplotlib");
  const std::string results = temp_path("dp.txt"), png = temp_path("dp.png");
  std::ofstream(results) << "RESULT model=mlp mode=local median_us=20000\n"
                            "RESULT mode=dp replicas=2 step_us=17000 scatter_us=6 replicate_us=40 forward_us=4000 "
                            "gather_us=70 backward_us=12000 optimizer_us=1000\n"
                            "RESULT model=mlp mode=ddp buckets=2 hidden=35% median_us=20500\n";
  const CommandResult drawn = run_command("/usr/bin/python3 scripts/plot_data_parallel.py " + results + " -o " + png);
  INFO(drawn.output);
  CHECK(drawn.exit_code == 0);
  CHECK(is_png(png));
  std::ofstream(results) << "RESULT model=mlp mode=local median_us=20000\n";
  const CommandResult partial = run_command("/usr/bin/python3 scripts/plot_data_parallel.py " + results + " -o " + png);
  CHECK(partial.exit_code != 0);
  CHECK_THAT(partial.output, Contains("has no RESULT line of mode=dp"));
}
