// //bench:train_step: times one training step (zero_grad, forward, loss, backward, SGD step)
// on --threads intra-op threads per process (default 1) and prints the median as
// "RESULT model=<name> mode=<mode> median_us=<x>" (from rank 0).
//   --model toy: the DDP tutorial's ToyModel, batch 20, MSE
//   --model mlp: 784-1024-1024-10, batch 128, cross-entropy
//   --model huge: 1024-4096-4096-1024 (25 M parameters), batch 32 (--batch), MSE
//   --model cnn: examples/train's digits CNN (Conv2d, BatchNorm2d, MaxPool2d, Dropout 0.25,
//     Linear), batch 64 of [1, 8, 8], cross-entropy
//   --mode local: the plain model; nosync: wrapped in DDP inside no_sync (no communication);
//          ddp: DDP with gradient synchronisation (batch sizes are per rank); fsdp: fully_shard
//          (ddp/fully_shard.h), every layer with parameters a unit, then the root
// With --nproc N > 1 (or under a launcher: RANK/WORLD_SIZE set) every process runs the same
// mode at the same time, so that "local" and "ddp" see the same CPU contention.
// --device cuda (a --config=cuda build): the model and data on cuda:LOCAL_RANK, each timed
// step ending with a device synchronisation; DDP over --backend nccl (default on GPUs) or gloo.
// --cuda_graph (--device cuda, --mode local): after the warm-up steps one step is captured in a
// CudaGraph (zero_grad, forward, loss, backward, optimizer step) and each timed step replays
// it (toy, mlp, huge; the CNN's dropout samples on the host, which a capture cannot, and
// stops with the error that names it).
// --turns R: R rounds at 1 thread and at --threads taking turns in this one process (each
// count's median of round medians and the rounds it won): thread scaling that the host's
// swings between fast and slow phases hit alike.
// Build with -c opt: bazel run -c opt //bench:train_step -- --model mlp --mode ddp --nproc 2
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "bench/memory_trace.h"
#include "examples/models.h"
#include "examples/op_profile.h"
#include "examples/run_env.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/powersgd.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/launcher/spawn.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/parallel.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;

namespace {

struct Config {
  std::string model = "toy";
  std::string mode = "local";
  int iterations = 0;
  int warmup = 5;
  std::string device = "cpu";
  std::string backend;            // default: nccl on GPUs, gloo on the CPU
  std::string optimizer = "sgd";  // sgd (momentum 0.9), adam, zero_adam (ZeroRedundancyOptimizer over Adam)
  std::string comm_hook;          // DDP's default; allreduce, bf16, powersgd1, powersgd4 (PowerSGD rank 1 or 4)
  double bucket_cap_mb = 25, first_bucket_cap_mb = 1;  // DDP's bucket sizes (PyTorch's defaults)
  int64_t batch = 0;                                   // mlp, huge: the batch per rank (0: 128, 32)
  bool find_unused_parameters = false, static_graph = false, gradient_as_bucket_view = false;
  bool report_memory = false;       // append the process's peak resident memory
  bool zero_grad_in_place = false;  // zero_grad(set_to_none = false): .grad kept, zeroed
  bool autocast = false;            // forward and loss under Autocast (bfloat16)
  bool cuda_graph = false;          // time replays of one captured step (--device cuda, --mode local)
  bool tf32 = false;                // float32 products and convolutions on TF32 tensor cores (--device cuda)
  int threads = 1;                  // intra-op threads per process; 0: tinyddp's default (the physical cores)
  std::string memory_trace;         // rank 0 writes the live CPU tensor bytes over one more step here
  std::string profile_trace;        // rank 0 profiles three more steps' ops and writes their trace here
  int accumulate = 1;               // micro-batches per step (gradient accumulation)
  bool sync_each = false;           // with --accumulate: every micro-batch allreduces (no no_sync)
  int turns = 0;                    // rounds of 1 thread and --threads taking turns in this process
};

// " find_unused_parameters=1 ...": the DDP options set away from their defaults.
std::string ddp_flags(const Config& c) {
  return std::string(c.find_unused_parameters ? " find_unused_parameters=1" : "") +
         (c.static_graph ? " static_graph=1" : "") + (c.gradient_as_bucket_view ? " gradient_as_bucket_view=1" : "") +
         (c.zero_grad_in_place ? " zero_grad_in_place=1" : "") + (c.autocast ? " autocast=bf16" : "") +
         (c.cuda_graph ? " cuda_graph=1" : "") + (c.tf32 ? " tf32=1" : "") +
         (c.accumulate > 1 ? " accumulate=" + std::to_string(c.accumulate) + (c.sync_each ? " sync_each=1" : "") : "") +
         " threads=" + std::to_string(tinyddp::tensor::get_num_threads());
}

// Forgets the peak resident memory so far, so that the peak read at the end is that of the
// timed steps, not of construction or the first steps.
void reset_peak_memory(const Config& c) {
  if (c.report_memory) tinyddp::examples::reset_peak_rss();
}

// " peak_rss_mb=M": the most resident memory this process held during the timed steps.
std::string peak_memory(const Config& c) {
  return c.report_memory ? " peak_rss_mb=" + std::to_string(tinyddp::examples::peak_rss_mib()) : "";
}

// " buckets=B hidden=H%": DDP's bucket count and the share of communication that overlapped
// backward (DDPStats averages).
std::string hidden(const tinyddp::ddp::DistributedDataParallel& ddp) {
  const tinyddp::ddp::DDPStats s = ddp.stats();
  const double share = s.avg_backward_comm_us > 0 ? 100 * s.avg_overlap_us / s.avg_backward_comm_us : 0;
  return " buckets=" + std::to_string(s.bucket_bytes.size()) + " hidden=" + std::to_string(static_cast<int>(share)) +
         "%";
}

// The model and one batch for c.model, on `device` (the same draws from manual_seed(0) on
// every run).
struct Workload {
  std::shared_ptr<nn::Module> model;
  t::Tensor inputs, targets;
};
Workload make_workload(const Config& c, const t::Device& device) {
  t::manual_seed(0);
  Workload w;
  if (c.model == "toy") {
    w.model = std::make_shared<nn::ToyModel>();
    w.inputs = t::randn({20, 10});
    w.targets = t::randn({20, 5});
  } else if (c.model == "cnn") {
    w.model = tinyddp::examples::digits_cnn(0.25);
    w.inputs = t::randn({64, 1, 8, 8});
    w.targets = t::rand({64}).mul_(10.0).to(t::kInt64);
  } else if (c.model == "huge") {
    const int64_t batch = c.batch > 0 ? c.batch : 32;
    w.model = nn::mlp({1024, 4096, 4096, 1024});
    w.inputs = t::randn({batch, 1024});
    w.targets = t::randn({batch, 1024});
  } else {
    const int64_t batch = c.batch > 0 ? c.batch : 128;
    w.model = nn::mlp({784, 1024, 1024, 10});
    w.inputs = t::randn({batch, 784});
    w.targets = t::rand({batch}).mul_(10.0).to(t::kInt64);
  }
  w.model->to(device);
  w.inputs = w.inputs.to(device);
  w.targets = w.targets.to(device);
  return w;
}

// Registers c.comm_hook on `ddp` (none: DDP's default); returns PowerSGD's state for its hooks.
std::shared_ptr<tinyddp::ddp::PowerSGDState> register_comm_hook(
    const Config& c, tinyddp::ddp::DistributedDataParallel* ddp,
    const std::shared_ptr<tinyddp::comm::ProcessGroup>& pg) {
  if (c.comm_hook.empty()) return nullptr;
  TDDP_CHECK(ddp != nullptr, "--comm_hook needs --mode ddp");
  namespace hooks = tinyddp::ddp::hooks;
  if (c.comm_hook == "allreduce") ddp->register_comm_hook(hooks::allreduce(pg));
  if (c.comm_hook == "bf16") ddp->register_comm_hook(hooks::bf16_compress(pg));
  if (c.comm_hook.rfind("powersgd", 0) != 0) return nullptr;
  // Compression from the third step on: the warm-up steps run the plain allreduce.
  auto powersgd = std::make_shared<tinyddp::ddp::PowerSGDState>(
      pg, tinyddp::ddp::PowerSGDOptions()
              .matrix_approximation_rank(c.comm_hook == "powersgd4" ? 4 : 1)
              .start_powerSGD_iter(2));
  ddp->register_comm_hook(tinyddp::ddp::powersgd_hook(powersgd));
  return powersgd;
}

// `params`: the model's, or under --mode fsdp its shards.
std::unique_ptr<nn::Optimizer> make_optimizer(const Config& c, const std::vector<t::Tensor>& params,
                                              const std::shared_ptr<tinyddp::comm::ProcessGroup>& pg) {
  if (c.optimizer == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions(0.01).momentum(0.9));
  if (c.optimizer == "adam") return std::make_unique<nn::Adam>(params, nn::AdamOptions(1e-4));
  TDDP_CHECK(pg != nullptr && c.mode != "fsdp", "--optimizer zero_adam needs --mode ddp or nosync (a process group)");
  return std::make_unique<tinyddp::ddp::ZeroRedundancyOptimizer>(
      params, tinyddp::ddp::optimizer_class<nn::Adam>(nn::AdamOptions(1e-4)), pg);
}

// --mode fsdp: every child with parameters a unit (each Linear of the MLPs), then the root.
void shard_model(const Workload& w, const std::shared_ptr<tinyddp::comm::ProcessGroup>& pg) {
  for (const auto& [name, child] : w.model->named_children()) {
    if (!child->parameters().empty()) tinyddp::ddp::fully_shard(child, pg);
  }
  tinyddp::ddp::fully_shard(w.model, pg);
}

// The optimizer state this rank holds (ZeRO: its shard's).
int64_t state_bytes(nn::Optimizer& optimizer) {
  if (auto* zero = dynamic_cast<tinyddp::ddp::ZeroRedundancyOptimizer*>(&optimizer)) return zero->local_state_bytes();
  int64_t bytes = 0;
  for (const auto& [name, t] : optimizer.state_dict()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

// The step's forward and loss, under autocast (bfloat16) with --autocast.
t::Tensor forward_and_loss(const Config& c, const Workload& w, tinyddp::ddp::DistributedDataParallel* ddp,
                           const t::Device& device) {
  std::optional<t::Autocast> autocast;
  if (c.autocast) autocast.emplace(device.type, t::kBFloat16);
  // The model called (its hooks run: --mode fsdp), or DDP around it.
  const t::Tensor out = ddp != nullptr ? ddp->forward(w.inputs) : (*w.model)(w.inputs);
  return c.model == "mlp" || c.model == "cnn" ? nn::cross_entropy(out, w.targets) : nn::mse_loss(out, w.targets);
}

std::shared_ptr<tinyddp::ddp::DistributedDataParallel> make_ddp(
    const Config& c, const Workload& w, const std::shared_ptr<tinyddp::comm::ProcessGroup>& pg) {
  return std::make_shared<tinyddp::ddp::DistributedDataParallel>(
      w.model, pg,
      tinyddp::ddp::DDPOptions()
          .bucket_cap_mb(c.bucket_cap_mb)
          .first_bucket_cap_mb(c.first_bucket_cap_mb)
          .find_unused_parameters(c.find_unused_parameters)
          .static_graph(c.static_graph)
          .gradient_as_bucket_view(c.gradient_as_bucket_view));
}

// One step's forwards and backwards: --accumulate micro-batches (the same batch each time,
// each loss divided by their count), all but the last under no_sync unless --sync_each
// (then every micro-batch allreduces, as without no_sync); --mode nosync: all under it.
void forward_backward(const Config& c, const Workload& w, tinyddp::ddp::DistributedDataParallel* ddp,
                      const t::Device& device) {
  for (int m = 0; m < c.accumulate; ++m) {
    const bool local = ddp != nullptr && (c.mode == "nosync" || (m + 1 < c.accumulate && !c.sync_each));
    std::optional<tinyddp::ddp::DistributedDataParallel::NoSyncGuard> guard;
    if (local) guard.emplace(*ddp);
    const t::Tensor loss = forward_and_loss(c, w, ddp, device);
    (c.accumulate > 1 ? t::mul(loss, 1.0 / c.accumulate) : loss).backward();
  }
}

// --memory_trace: one more step, the bytes of live CPU tensors sampled through it (rank 0
// writes the trace; bench/memory_trace.h).
void trace_memory(const Config& c, const Workload& w, tinyddp::ddp::DistributedDataParallel* ddp, nn::Optimizer& opt,
                  const t::Device& device, const tinyddp::comm::ProcessGroup* pg) {
  if (c.memory_trace.empty()) return;
  tinyddp::bench::MemoryTrace trace;
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the level before the step
  trace.mark("forward");
  opt.zero_grad(!c.zero_grad_in_place);
  const t::Tensor loss = forward_and_loss(c, w, ddp, device);
  trace.mark("backward");
  loss.backward();
  trace.mark("optimizer");
  opt.step();
  trace.mark("end");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (pg == nullptr || pg->rank() == 0) trace.write(c.memory_trace);
}

// --mode: nothing (local), DDP, or fully_shard (fsdp: returns null); a group of one when no
// launcher made one.
std::shared_ptr<tinyddp::ddp::DistributedDataParallel> wrap_model(const Config& c, const Workload& w,
                                                                  std::shared_ptr<tinyddp::comm::ProcessGroup>& pg,
                                                                  const std::string& backend) {
  if (c.mode == "local") return nullptr;
  if (!pg) pg = tinyddp::comm::init_process_group(backend, tinyddp::comm::InitOptions().world_size(1));
  if (c.mode != "fsdp") return make_ddp(c, w, pg);
  shard_model(w, pg);
  return nullptr;
}

// --cuda_graph and --tf32 need a GPU; float32 stays float32 unless --tf32 (PyTorch's side sets
// the same two switches).
void set_up_gpu_flags(const Config& c, bool gpu) {
  TDDP_CHECK(!c.cuda_graph || (gpu && c.mode == "local"), "--cuda_graph needs --device cuda and --mode local");
  TDDP_CHECK(!c.tf32 || gpu, "--tf32 needs --device cuda");
  t::cuda::set_allow_tf32(c.tf32);
  t::cuda::set_cudnn_allow_tf32(c.tf32);
}

// --turns: `c.turns` rounds, each timing --iterations steps at one thread and then at
// --threads, in this one process, so that the host's swings between fast and slow phases hit
// both counts alike (bench/README.md: processes on this host land in either). Prints a RESULT
// line per count: the median of its rounds' medians, and the rounds in which it was faster.
void time_in_turns(const Config& c, int iterations, const std::function<void()>& step) {
  const std::vector<int> counts{1, t::get_num_threads()};
  std::vector<std::vector<double>> medians(counts.size());
  for (int round = 0; round < c.turns; ++round) {
    for (size_t k = 0; k < counts.size(); ++k) {
      t::set_num_threads(counts[k]);
      for (int i = 0; i < std::max(c.warmup, 3); ++i) step();
      std::vector<double> us;
      for (int i = 0; i < iterations; ++i) {
        const auto start = std::chrono::steady_clock::now();
        step();
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
      medians[k].push_back(us[us.size() / 2]);
    }
  }
  for (size_t k = 0; k < counts.size(); ++k) {
    int faster = 0;
    for (int round = 0; round < c.turns; ++round) faster += medians[k][round] < medians[1 - k][round];
    std::vector<double> sorted = medians[k];
    std::sort(sorted.begin(), sorted.end());
    std::cout << "RESULT model=" << c.model << " mode=local" << (c.autocast ? " autocast=bf16" : "")
              << " threads=" << counts[k] << " turns=" << c.turns << " median_us=" << sorted[sorted.size() / 2]
              << " faster_rounds=" << faster << std::endl;
  }
}

int run(const Config& c) {
  const bool gpu = c.device == "cuda";
  const std::string backend = !c.backend.empty() ? c.backend : gpu ? "nccl" : "gloo";
  const char* local_rank = std::getenv("LOCAL_RANK");
  const t::Device device =
      gpu ? t::Device::cuda((local_rank != nullptr ? std::atoi(local_rank) : 0) % std::max(1, t::cuda::device_count()))
          : t::Device(t::kCPU);
  std::shared_ptr<tinyddp::comm::ProcessGroup> pg;
  if (std::getenv("RANK") != nullptr) pg = tinyddp::comm::init_process_group(backend);
  const int iterations = c.iterations > 0 ? c.iterations
                                          : (c.model == "toy"    ? 2000
                                             : c.model == "huge" ? 8
                                             : c.model == "cnn"  ? 300
                                                                 : 30);
  const Workload w = make_workload(c, device);
  std::shared_ptr<tinyddp::ddp::DistributedDataParallel> ddp = wrap_model(c, w, pg, backend);
  // A communication hook, and the gradient bytes each step sends (the allreduce payload).
  const std::shared_ptr<tinyddp::ddp::PowerSGDState> powersgd = register_comm_hook(c, ddp.get(), pg);
  int64_t gradient_bytes = 0;
  for (const t::Tensor& p : w.model->parameters()) gradient_bytes += static_cast<int64_t>(p.nbytes());
  const std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(c, w.model->parameters(), pg);
  const auto queue_step = [&] {
    optimizer->zero_grad(!c.zero_grad_in_place);
    forward_backward(c, w, ddp.get(), device);
    optimizer->step();
  };
  t::cuda::CudaGraph graph;
  const auto step = [&] {
    if (graph.captured()) {
      graph.replay();
    } else {
      queue_step();
    }
    if (gpu) t::cuda::synchronize(device.index);  // the step is done when the GPU is
  };
  set_up_gpu_flags(c, gpu);
  if (c.turns > 0) {
    TDDP_CHECK(!gpu && c.mode == "local" && !pg, "--turns times one local process on the CPU");
    time_in_turns(c, iterations, step);
    return 0;
  }
  for (int i = 0; i < c.warmup; ++i) step();
  if (c.cuda_graph) {
    graph.capture_begin(device.index);
    queue_step();  // recorded, not run
    graph.capture_end();
  }
  reset_peak_memory(c);
  const int64_t sent_before = powersgd ? powersgd->numel_after_compression : 0;
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  trace_memory(c, w, ddp.get(), *optimizer, device, pg.get());
  if (!c.profile_trace.empty())
    tinyddp::examples::profile_steps(step, 3, !pg || pg->rank() == 0, c.profile_trace, std::cout);
  std::sort(us.begin(), us.end());
  if (!pg || pg->rank() == 0) {
    std::cout << "RESULT model=" << c.model << " mode=" << c.mode << (gpu ? " device=cuda" : "") << ddp_flags(c)
              << (c.optimizer != "sgd"
                      ? " optimizer=" + c.optimizer + " state_bytes=" + std::to_string(state_bytes(*optimizer))
                      : "")
              << (c.comm_hook.empty()
                      ? ""
                      : " comm_hook=" + c.comm_hook + " wire_bytes_per_step=" +
                            std::to_string(powersgd ? (powersgd->numel_after_compression - sent_before) * 4 / iterations
                                           : c.comm_hook == "bf16" ? gradient_bytes / 2
                                                                   : gradient_bytes))
              << (ddp && c.mode == "ddp" ? hidden(*ddp) : "") << " median_us=" << us[us.size() / 2] << peak_memory(c)
              << std::endl;
  }
  if (pg) {
    pg->barrier()->wait();
    ddp.reset();
    tinyddp::comm::destroy_process_group();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  int nproc = 1;
  CLI::App app{"Time one training step of tinyddp, locally or with DDP."};
  app.add_option("--model", c.model, "toy, mlp, huge or cnn")->check(CLI::IsMember({"toy", "mlp", "huge", "cnn"}));
  app.add_option("--mode", c.mode, "local, nosync, ddp or fsdp (fully_shard: each layer a unit)")
      ->check(CLI::IsMember({"local", "nosync", "ddp", "fsdp"}));
  app.add_option("--bucket_cap_mb", c.bucket_cap_mb, "DDP's bucket size (default 25)")->check(CLI::PositiveNumber);
  app.add_option("--first_bucket_cap_mb", c.first_bucket_cap_mb, "DDP's first bucket size (default 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--comm_hook", c.comm_hook, "allreduce, bf16, powersgd1 or powersgd4 (PowerSGD of rank 1 or 4)")
      ->check(CLI::IsMember({"allreduce", "bf16", "powersgd1", "powersgd4"}));
  app.add_option("--optimizer", c.optimizer, "sgd (momentum 0.9, default), adam or zero_adam (ZeroRedundancyOptimizer)")
      ->check(CLI::IsMember({"sgd", "adam", "zero_adam"}));
  app.add_option("--iterations", c.iterations, "timed steps (default 2000 toy, 30 mlp, 8 huge)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", c.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--batch", c.batch, "--model mlp or huge: the batch per rank (default 128, huge 32)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--find_unused_parameters", c.find_unused_parameters, "DDP walks the graph after each forward");
  app.add_flag("--static_graph", c.static_graph, "DDP's static_graph");
  app.add_flag("--autocast", c.autocast, "forward and loss under autocast (bfloat16)");
  app.add_flag("--tf32", c.tf32, "float32 products and convolutions may use TF32 tensor cores (default: off)");
  app.add_flag("--cuda_graph", c.cuda_graph,
               "capture one step in a CUDA graph after the warm-up and time its replays (--device cuda)");
  app.add_flag("--gradient_as_bucket_view", c.gradient_as_bucket_view, ".grad are views of DDP's buckets");
  app.add_flag("--zero_grad_in_place", c.zero_grad_in_place,
               "zero_grad(set_to_none = false): keep .grad and zero it (PyTorch 1.x's default)");
  app.add_flag("--report_memory", c.report_memory,
               "append the peak resident memory of the timed steps (peak_rss_mb) to the RESULT line");
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches per step, their gradients accumulated; all but the last under DDP's no_sync")
      ->check(CLI::PositiveNumber);
  app.add_flag("--sync_each", c.sync_each, "with --accumulate: no no_sync, every micro-batch allreduces");
  app.add_option("--memory_trace", c.memory_trace,
                 "after the timed steps, one more with the bytes of live CPU tensors sampled every 100 us; rank 0 "
                 "writes them to this file (scripts/plot_memory.py draws them)");
  app.add_option("--profile_trace", c.profile_trace,
                 "after the timed steps, three more under the op profiler: rank 0 prints its table and writes the "
                 "Chrome trace here");
  app.add_option("--nproc", nproc, "processes to fork when not under a launcher")->check(CLI::Range(1, 64));
  app.add_option("--device", c.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--backend", c.backend, "gloo or nccl (default: nccl with --device cuda, else gloo)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  app.add_option("--threads", c.threads,
                 "intra-op threads per process (default 1; 0: tinyddp's default, the physical cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--turns", c.turns,
                 "rounds of --iterations steps at 1 thread and at --threads taking turns in this process (--mode "
                 "local, CPU); a RESULT line per thread count: the median of the rounds' medians, the rounds it won")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
#ifndef NDEBUG
  std::cerr << "train_step: built without -c opt; these numbers mean nothing\n";
#endif
  try {
    if (c.threads > 0) tinyddp::tensor::set_num_threads(c.threads);
    tinyddp::tensor::get_num_threads();  // a bad TINYDDP_NUM_THREADS stops here
    if (nproc == 1 || std::getenv("RANK") != nullptr) return run(c);
    return tinyddp::launcher::spawn_local(nproc, [&](int) { return run(c); }) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "train_step: " << e.what() << "\n";
    return 1;
  }
}
