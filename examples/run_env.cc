// What the training examples share (run_env.h): where each rank runs (device, threads), the
// communication hook chosen on the command line, the metrics CSV, the failure a test can ask
// for, and the peak memory a run reports.
#include "examples/run_env.h"

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "tinyddp/comm/init.h"
#include "tinyddp/comm/launch_env.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;

Placement choose_placement(const std::string& device, const std::string& backend) {
  TDDP_CHECK(device != "cuda" || t::cuda::is_available(), "--device cuda: {}", t::cuda::unavailable_reason());
  Placement p;
  p.on_gpu = device == "cuda" || (device == "auto" && t::cuda::is_available());
  // One GPU per rank: LOCAL_RANK picks it. More local ranks than GPUs share them round-robin,
  // which only the gloo backend allows (NCCL refuses two ranks on one device).
  const int gpus = p.on_gpu ? t::cuda::device_count() : 0;
  const comm::LaunchEnv launched = comm::launch_env();  // under launch, mpirun or srun (comm/launch_env.h)
  const int local_rank = launched.local_rank.value_or(0), local_world = launched.local_world_size.value_or(1);
  if (p.on_gpu) p.device = t::Device(t::DeviceType::kCUDA, local_rank % gpus);
  p.backend = backend != "auto" ? backend : (p.on_gpu && local_world <= gpus ? "nccl" : "gloo");
  TDDP_CHECK(p.backend != "nccl" || p.on_gpu, "--backend nccl needs --device cuda (NCCL reduces GPU tensors only)");
  TDDP_CHECK(p.backend != "nccl" || local_world <= gpus,
             "--backend nccl: {} ranks on this node but {} GPU(s); NCCL needs one GPU per rank (use --backend gloo to "
             "share GPUs)",
             local_world, gpus);
  // This process's GPU, chosen before anything touches CUDA (as torch.cuda.set_device): no
  // thread of it ever makes a context on another GPU (tensor/cuda_runtime/device_guard.h).
  if (p.on_gpu) t::cuda::set_device(p.device.index);
  return p;
}

int use_threads(int threads) {
  if (threads > 0) tensor::set_num_threads(threads);
  return tensor::get_num_threads();
}

void check_graph_placement(const Placement& placement, const std::string& option, const std::string& what,
                           bool collectives) {
  TDDP_CHECK(placement.on_gpu, "{} captures the {} on a GPU; this run is on {}", option, what, placement.device.str());
  const char* world = std::getenv("WORLD_SIZE");
  if (world == nullptr) return;
  TDDP_CHECK(collectives || std::string(world) == "1",
             "{} runs one process ({} ranks here): DDP's collectives are not captured", option, world);
  TDDP_CHECK(!collectives || placement.backend == "nccl",
             "{} captures DDP's collectives only on the nccl backend (gloo's run on the host); this run uses {}",
             option, placement.backend);
}

std::shared_ptr<comm::ProcessGroup> join_ranks(const std::string& backend, double timeout_s) {
  // Under a launcher a process group is made even for a world of one (as nanoGPT's train.py
  // wraps its model in DDP whenever torchrun set RANK): `launch --nproc_per_node 1` runs the
  // DDP path, its timeline included. Run directly, a process trains alone.
  if (!comm::launch_env().world_size) return nullptr;
  comm::InitOptions init;
  init.timeout(comm::Millis(static_cast<int64_t>(timeout_s * 1000)));
  return comm::init_process_group(backend, init);
}

void report_reductions(const ddp::DistributedDataParallel& ddp, int64_t micro_steps, std::ostream& out) {
  out << fmt::format("ddp: {} of {} micro-steps reduced their gradients, in {} bucket(s) each\n",
                     ddp.stats().iterations, micro_steps, ddp.stats().bucket_bytes.size());
}

bool known_comm_hook(const std::string& name) {
  return name == "allreduce" || name == "fp16" || name == "bf16" || name == "powersgd" || name == "sum" ||
         name == "none";
}

std::string comm_hook_choices() { return "allreduce, fp16, bf16 or powersgd (or, wrong on purpose, sum or none)"; }

namespace {

// Wrong on purpose: the ranks' gradients added, not averaged (a step world_size times too long).
ddp::CommHook sum_hook(std::shared_ptr<comm::ProcessGroup> pg) {
  return [pg = std::move(pg)](ddp::GradBucket& bucket) { return pg->allreduce(bucket.buffer)->get_future(); };
}

// Wrong on purpose: nothing sent; each rank keeps the gradient of its own share.
ddp::CommHook local_hook() {
  return [](ddp::GradBucket& bucket) { return comm::Future::completed(bucket.buffer); };
}

}  // namespace

std::shared_ptr<ddp::PowerSGDState> register_comm_hook(ddp::DistributedDataParallel& ddp,
                                                       const std::shared_ptr<comm::ProcessGroup>& pg,
                                                       const std::string& name, int powersgd_rank,
                                                       int64_t powersgd_start_iter) {
  TDDP_CHECK(known_comm_hook(name), "--comm_hook must be {}, got '{}'", comm_hook_choices(), name);
  if (name == "fp16") ddp.register_comm_hook(ddp::hooks::fp16_compress(pg));
  if (name == "bf16") ddp.register_comm_hook(ddp::hooks::bf16_compress(pg));
  if (name == "sum") ddp.register_comm_hook(sum_hook(pg));
  if (name == "none") ddp.register_comm_hook(local_hook());
  if (name != "powersgd") return nullptr;
  auto state = std::make_shared<ddp::PowerSGDState>(
      pg, ddp::PowerSGDOptions().matrix_approximation_rank(powersgd_rank).start_powerSGD_iter(powersgd_start_iter));
  ddp.register_comm_hook(ddp::powersgd_hook(state));
  return state;
}

std::ofstream open_metrics_csv(const std::string& path, const std::string& header, int64_t first_step) {
  std::vector<std::string> kept;
  if (first_step > 0) {
    std::ifstream old(path);
    std::string line;
    std::getline(old, line);  // the header
    while (std::getline(old, line)) {
      if (!line.empty() && std::stoll(line.substr(0, line.find(','))) < first_step) kept.push_back(line);
    }
  }
  std::ofstream metrics(path);
  TDDP_CHECK(metrics.good(), "--metrics: cannot write {}", path);
  metrics << header << "\n";
  for (const std::string& line : kept) metrics << line << "\n";
  return metrics;
}

std::string world_size_variable() { return comm::launch_env().world_size_variable; }

void fail_on_purpose_if_asked(int64_t fail_at_step, int64_t step, int rank, const char* program) {
  if (step != fail_at_step) return;
  const char* restart = std::getenv("TINYDDP_RESTART_COUNT");
  if (restart != nullptr && std::string(restart) != "0") return;
  std::cerr << fmt::format("{}: rank {} fails on purpose before step {} (--fail_at_step)\n", program, rank, step);
  std::_Exit(3);
}

int64_t peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) / 1024;  // "VmHWM:  123456 kB"
  }
  return -1;
}

void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

void seed_training(uint64_t seed, int rank) { tensor::manual_seed(seed + static_cast<uint64_t>(rank)); }

std::map<std::string, std::string> generator_states(comm::ProcessGroup* pg, tensor::Device device) {
  std::map<std::string, std::string> out;
  if (pg == nullptr) return out;
  const std::string mine = tensor::default_generator().get_state();
  for (int r = 0; r < pg->size(); ++r)
    out[fmt::format("rng.cpu.rank{}", r)] = comm::broadcast_bytes(*pg, device, mine, r);
  return out;
}

void restore_generator(const std::map<std::string, std::string>& metadata, int rank, int world, uint64_t seed,
                       int64_t step) {
  size_t saved = 0;  // the ranks that saved it
  while (metadata.count(fmt::format("rng.cpu.rank{}", saved)) == 1) ++saved;
  if (saved == 0) return;  // one process: load_checkpoint put its generator back
  if (saved == static_cast<size_t>(world)) {
    tensor::default_generator().set_state(metadata.at(fmt::format("rng.cpu.rank{}", rank)));
    return;
  }
  seed_training(seed + static_cast<uint64_t>(step), rank);
}

}  // namespace tinyddp::examples
