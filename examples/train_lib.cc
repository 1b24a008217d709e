// The training loop of //examples:train: see train_lib.h.
#include "examples/train_lib.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tinyddp/comm/init.h"
#include "tinyddp/comm/launch_env.h"
#include "examples/train_data.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/powersgd.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

namespace {

// DDP's statistics as lines of text: the buckets, and the per-iteration times.
std::string describe_stats(const ddp::DDPStats& s, int rank) {
  std::vector<std::string> sizes;
  for (size_t bytes : s.bucket_bytes) sizes.push_back(fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024));
  const auto ms = [](double us) { return fmt::format("{:.3f} ms", us / 1000); };
  return fmt::format(
      "DDP statistics of rank {} over {} synchronised iterations:\n"
      "  {} bucket(s) in launch order: {}; {}\n"
      "  per iteration, average (last): forward {} ({}), backward compute {} ({}), communication {} ({}),\n"
      "  communication overlapped with backward {} ({}): {:.0f}% of it hidden\n",
      rank, s.iterations, s.bucket_bytes.size(), fmt::join(sizes, ", "),
      s.buckets_rebuilt ? "rebuilt in the order gradients arrived" : "not rebuilt",
      ms(s.avg_forward_compute_us), ms(s.last_forward_compute_us), ms(s.avg_backward_compute_us),
      ms(s.last_backward_compute_us), ms(s.avg_backward_comm_us), ms(s.last_backward_comm_us), ms(s.avg_overlap_us),
      ms(s.last_overlap_us), s.avg_backward_comm_us > 0 ? 100 * s.avg_overlap_us / s.avg_backward_comm_us : 0.0);
}
}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  TDDP_CHECK(config.model == "toy" || config.model == "mlp", "--model must be toy or mlp, got '{}'", config.model);
  const std::string loss_name = config.loss.empty() ? (config.model == "toy" ? "mse" : "ce") : config.loss;
  TDDP_CHECK(loss_name == "mse" || loss_name == "ce", "--loss must be mse or ce, got '{}'", loss_name);
  TDDP_CHECK(config.optimizer == "sgd" || config.optimizer == "adam", "--optimizer must be sgd or adam, got '{}'",
             config.optimizer);
  TDDP_CHECK(config.steps >= 1, "--steps must be at least 1, got {}", config.steps);
  TDDP_CHECK(config.lr > 0, "--lr must be positive, got {}", config.lr);
  const bool classification = loss_name == "ce";
  const bool digits = config.data.empty() && config.dataset == "digits";
  TDDP_CHECK(config.dataset == "synthetic" || config.dataset == "digits", "--dataset must be synthetic or digits, got '{}'",
             config.dataset);
  TDDP_CHECK(!digits || (config.model == "mlp" && classification),
             "--dataset digits trains a classifier: use --model mlp with the ce loss (got --model {}, --loss {})",
             config.model, loss_name);
  TDDP_CHECK(config.bucket_cap_mb > 0 && config.first_bucket_cap_mb > 0,
             "--bucket_cap_mb and --first_bucket_cap_mb must be positive, got {} and {}", config.bucket_cap_mb,
             config.first_bucket_cap_mb);
  TDDP_CHECK(config.device == "auto" || config.device == "cpu" || config.device == "cuda",
             "--device must be auto, cpu or cuda, got '{}'", config.device);
  TDDP_CHECK(config.backend == "auto" || config.backend == "gloo" || config.backend == "nccl",
             "--backend must be auto, gloo or nccl, got '{}'", config.backend);
  TDDP_CHECK(config.device != "cuda" || t::cuda::is_available(), "--device cuda: {}", t::cuda::unavailable_reason());
  const bool on_gpu = config.device == "cuda" || (config.device == "auto" && t::cuda::is_available());
  // One GPU per rank: LOCAL_RANK picks it. More local ranks than GPUs share them round-robin,
  // which only the gloo backend allows (NCCL refuses two ranks on one device).
  const int gpus = on_gpu ? t::cuda::device_count() : 0;
  // Under launch, mpirun or srun (comm/launch_env.h).
  const comm::LaunchEnv launched = comm::launch_env();
  const int local_rank = launched.local_rank.value_or(0), local_world = launched.local_world_size.value_or(1);
  const t::Device device = on_gpu ? t::Device(t::DeviceType::kCUDA, local_rank % gpus) : t::Device(t::kCPU);
  const std::string backend =
      config.backend != "auto" ? config.backend : (on_gpu && local_world <= gpus ? "nccl" : "gloo");
  TDDP_CHECK(backend != "nccl" || on_gpu, "--backend nccl needs --device cuda (NCCL reduces GPU tensors only)");
  TDDP_CHECK(backend != "nccl" || local_world <= gpus,
             "--backend nccl: {} ranks on this node but {} GPU(s); NCCL needs one GPU per rank (use --backend gloo to "
             "share GPUs)",
             local_world, gpus);

  // This process's GPU, chosen before anything touches CUDA (as torch.cuda.set_device): no
  // thread of it ever makes a context on another GPU (tensor/cuda/device_guard.h).
  if (on_gpu) t::cuda::set_device(device.index);
  // Distributed when launched with WORLD_SIZE > 1.
  std::shared_ptr<comm::ProcessGroup> pg;
  TDDP_CHECK(config.timeout_s > 0, "--timeout must be positive, got {}", config.timeout_s);
  if (launched.world_size.value_or(1) > 1) {
    comm::InitOptions init;
    init.timeout = comm::Millis(static_cast<int64_t>(config.timeout_s * 1000));
    pg = comm::init_process_group(backend, init);
  }
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  TDDP_CHECK(config.timeline.empty() || pg,
             "--timeline records DDP's events, but this run is on one process: start it with launch --nproc_per_node 2 "
             "(or more)");
  std::ostringstream quiet;  // only rank 0 prints progress
  std::ostream& progress = rank == 0 ? log : quiet;

  // The model: created right after manual_seed(seed), so its initial weights equal
  // PyTorch's for the same seed; --init replaces them.
  t::manual_seed(config.seed);
  std::shared_ptr<nn::Module> model;
  int64_t in = 10, out = 5;
  if (config.model == "toy") {
    model = std::make_shared<nn::ToyModel>();
  } else {
    const std::vector<int64_t> widths = !config.widths.empty() ? config.widths
                                        : digits                 ? std::vector<int64_t>{kDigitsPixels, 128, kDigitsClasses}
                                                                 : std::vector<int64_t>{784, 256, 10};
    TDDP_CHECK(widths.size() >= 2, "--widths needs at least two numbers, got {}", widths.size());
    TDDP_CHECK(!digits || (widths.front() == kDigitsPixels && widths.back() == kDigitsClasses),
               "--dataset digits: the widths must start with {} (8x8 pixels) and end with {} (classes), got {}",
               kDigitsPixels, kDigitsClasses, fmt::join(widths, ","));
    model = nn::mlp(widths);
    in = widths.front();
    out = widths.back();
  }
  TDDP_CHECK(!classification || out >= 2, "--loss ce needs at least 2 output classes, the model has {}", out);
  if (!config.init.empty()) nn::load_state_dict(*model, config.init);
  TDDP_CHECK(!config.resume || !config.checkpoint.empty(), "--resume needs --checkpoint PATH");
  model->to(device);  // after initialising on the CPU: the same weights on every device
  std::unique_ptr<nn::Optimizer> optimizer;
  if (config.optimizer == "sgd") {
    optimizer = std::make_unique<nn::SGD>(model->parameters(), nn::SGDOptions(config.lr).momentum(config.momentum));
  } else {
    optimizer = std::make_unique<nn::Adam>(model->parameters(), nn::AdamOptions(config.lr));
  }
  // --checkpoint: one file (nn::save_checkpoint) with the model, the optimizer and the steps
  // done; a run that starts removes the temporaries of writers that were killed.
  if (!config.checkpoint.empty() && rank == 0) nn::remove_stale_checkpoint_temporaries(config.checkpoint);
  std::optional<nn::TrainingCheckpoint> resumed;
  if (config.resume && std::filesystem::exists(config.checkpoint)) {
    resumed = nn::load_checkpoint(config.checkpoint, *model, *optimizer);  // before DDP: rank 0's is broadcast anyway
    TDDP_CHECK(resumed->step < config.steps, "--resume: {} is {} steps in, nothing left of --steps {}", config.checkpoint,
               resumed->step, config.steps);
  }
  std::shared_ptr<nn::Module> runner = model;  // what the loop calls: the model, or DDP around it
  std::shared_ptr<ddp::DistributedDataParallel> ddp_model;
  std::shared_ptr<ddp::PowerSGDState> powersgd;
  TDDP_CHECK(config.comm_hook == "allreduce" || config.comm_hook == "fp16" || config.comm_hook == "bf16" ||
                 config.comm_hook == "powersgd",
             "--comm_hook must be allreduce, fp16, bf16 or powersgd, got '{}'", config.comm_hook);
  if (pg) {
    ddp::DDPOptions options;
    options.bucket_cap_mb(config.bucket_cap_mb).first_bucket_cap_mb(config.first_bucket_cap_mb);
    if (!config.timeline.empty()) options.timeline(config.timeline);
    ddp_model = std::make_shared<ddp::DistributedDataParallel>(model, pg, options);
    runner = ddp_model;
    if (config.comm_hook == "fp16") ddp_model->register_comm_hook(ddp::hooks::fp16_compress(pg));
    if (config.comm_hook == "bf16") ddp_model->register_comm_hook(ddp::hooks::bf16_compress(pg));
    if (config.comm_hook == "powersgd") {
      powersgd = std::make_shared<ddp::PowerSGDState>(pg, ddp::PowerSGDOptions()
                                                              .matrix_approximation_rank(config.powersgd_rank)
                                                              .start_powerSGD_iter(config.powersgd_start_iter));
      ddp_model->register_comm_hook(ddp::powersgd_hook(powersgd));
    }
  }

  const int64_t batch_size = config.batch > 0 ? config.batch : (config.model == "toy" ? 20 : 64);
  TDDP_CHECK(config.data.empty() ? batch_size % world == 0 : true,
             "--batch {} is not divisible by WORLD_SIZE {}: every rank takes an equal share of each batch", batch_size,
             world);
  const std::unique_ptr<Dataset> data =
      !config.data.empty() ? file_dataset(config.data, config.steps, in, out, classification, rank, world)
      : digits ? digits_dataset(config.digits.empty() ? default_digits_path() : config.digits, config.seed, batch_size, rank, world)
               : synthetic_dataset(config.seed, batch_size, in, out, classification, rank, world);

  const int64_t first_step = resumed ? resumed->step : 0;
  if (resumed) {
    for (int64_t step = 0; step < first_step; ++step) data->batch(step);  // the generators where they were
    progress << fmt::format("resuming from {} after {} steps\n", config.checkpoint, first_step);
  }

  std::ofstream metrics;
  if (!config.metrics.empty() && rank == 0) {
    // Resuming: keep the rows of the steps the checkpoint holds, drop those of steps it lost.
    std::vector<std::string> kept;
    if (resumed) {
      std::ifstream old(config.metrics);
      std::string line;
      std::getline(old, line);  // the header
      while (std::getline(old, line)) {
        if (!line.empty() && std::stoll(line.substr(0, line.find(','))) < first_step) kept.push_back(line);
      }
    }
    metrics.open(config.metrics);
    TDDP_CHECK(metrics.good(), "--metrics: cannot write {}", config.metrics);
    metrics << "step,loss\n";
    for (const std::string& line : kept) metrics << line << "\n";
  }

  progress << "training " << config.model << " (" << model->parameters().size() << " parameter tensors) with "
      << config.optimizer << " lr " << config.lr << ", " << loss_name << " loss, " << config.steps << " steps, "
      << data->describe()
      << (pg ? fmt::format(", data-parallel on {} ranks ({})", world, backend) : std::string()) << ", device " << device.str()
      << "\n";
  const int64_t log_every = config.log_every > 0 ? config.log_every : std::max<int64_t>(1, config.steps / 10);
  // Where the loss is averaged over ranks (DDP's choice: the GPU under NCCL, else the CPU).
  const t::Device report_device = pg ? ddp::control_device(*pg, model->parameters()) : device;
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  const char* restart = std::getenv("TINYDDP_RESTART_COUNT");
  const bool first_attempt = restart == nullptr || std::string(restart) == "0";
  for (int64_t step = first_step; step < config.steps; ++step) {
    if (step == config.fail_at_step && first_attempt) {
      std::cerr << fmt::format("train: rank {} fails on purpose before step {} (--fail_at_step)\n", rank, step);
      std::_Exit(3);
    }
    const Batch mine = data->batch(step);  // this rank's share of the step's global batch
    const Batch b{mine.inputs.to(device), mine.targets.to(device)};
    optimizer->zero_grad();
    const Tensor prediction = runner->forward(b.inputs);
    const Tensor loss = classification ? nn::cross_entropy(prediction, b.targets) : nn::mse_loss(prediction, b.targets);
    double loss_value = loss.item<double>();
    if (pg) {  // report the mean over ranks: the loss of the whole global batch
      const Tensor mean = t::scalar_tensor(loss_value, t::TensorOptions(t::kFloat64).device(report_device));
      pg->allreduce(mean, comm::ReduceOp::kAvg)->wait();
      loss_value = mean.item<double>();
    }
    TDDP_CHECK(std::isfinite(loss_value), "the loss became {} at step {}; lower --lr", loss_value, step);
    result.losses.push_back(loss_value);
    if (classification && step + 1 == config.steps) {
      const Tensor accuracy = t::mean(t::eq(t::argmax(prediction, 1), b.targets).to(t::kFloat64));
      if (pg) pg->allreduce(accuracy, comm::ReduceOp::kAvg)->wait();
      result.accuracy = accuracy.item<double>();
    }
    loss.backward();
    optimizer->step();
    result.samples += mine.inputs.size(0) * world;
    if (metrics.is_open()) metrics << step << "," << fmt::format("{:.9g}", loss_value) << std::endl;
    const bool checkpoint_now =
        config.checkpoint_every > 0 && ((step + 1) % config.checkpoint_every == 0 || step + 1 == config.steps);
    if (!config.checkpoint.empty() && rank == 0 && (checkpoint_now || (config.checkpoint_every == 0 && step + 1 == config.steps))) {
      nn::save_checkpoint(config.checkpoint, *model, *optimizer, step + 1);
    }
    if ((step + 1) % log_every == 0 || step + 1 == config.steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress << fmt::format("step {:>{}}/{}  loss {:.6f}  {:.0f} samples/s  elapsed {:.2f} s\n", step + 1,
                         std::to_string(config.steps).size(), config.steps, loss_value,
                         static_cast<double>(result.samples) / std::max(elapsed, 1e-9), elapsed);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress << fmt::format("done: {} steps in {:.2f} s ({:.0f} samples/s); loss {:.6f} -> {:.6f}", config.steps,
                     result.seconds, static_cast<double>(result.samples) / std::max(result.seconds, 1e-9),
                     result.losses.front(), result.losses.back());
  if (result.accuracy >= 0) progress << fmt::format("; accuracy on the last batch {:.1f}%", 100 * result.accuracy);
  progress << "\n";
  if (const std::optional<Batch> held = classification ? data->held_out() : std::nullopt) {
    // The same model on every rank, the same held-out samples: every rank gets the same figure.
    t::NoGradGuard no_grad;
    result.held_out_accuracy =
        t::mean(t::eq(t::argmax(model->forward(held->inputs.to(device)), 1), held->targets.to(device)).to(t::kFloat64))
            .item<double>();
    progress << fmt::format("held-out accuracy {:.1f}% on {}\n", 100 * result.held_out_accuracy, data->describe_held_out());
  }
  if (powersgd) {
    progress << fmt::format("PowerSGD rank {}: {:.1f}x fewer gradient elements sent (from iteration {} on)\n",
                            config.powersgd_rank, powersgd->compression_rate(), config.powersgd_start_iter);
  }
  if (config.stats) {
    progress << (ddp_model ? describe_stats(ddp_model->stats(), rank)
                           : "no DDP statistics: this run trained on one process (start it with launch for DDP)\n");
  }
  if (!config.save.empty() && rank == 0) {
    nn::save_state_dict(*model, config.save);
    progress << "saved the final weights to " << config.save << "\n";
  }
  if (pg) {
    pg->barrier()->wait();  // rank 0 hosts the store: nobody leaves before everyone is done
    runner.reset();
    ddp_model.reset();  // writes the timeline
    comm::destroy_process_group();
  }
  return result;
}

}  // namespace tinyddp::examples
