// The training loop of //examples:train (train_lib.h). train() at the end is the mainline:
// forward, loss, backward, step, log. Everything else is a named step above it: the checks
// of the configuration, the device and process group, the model and optimizer, resuming,
// DDP and its communication hook, the data, the metrics and progress, the checkpoints, the
// fault injected on purpose, the report at the end and the teardown.
#include "examples/train_lib.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "examples/models.h"
#include "examples/preemption.h"
#include "examples/run_env.h"
#include "examples/train_data.h"
#include "examples/train_exact.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/powersgd.h"
#include "tinyddp/ddp/sync_batchnorm.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cpu_isa.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/random.h"

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
      s.buckets_rebuilt ? "rebuilt in the order gradients arrived" : "not rebuilt", ms(s.avg_forward_compute_us),
      ms(s.last_forward_compute_us), ms(s.avg_backward_compute_us), ms(s.last_backward_compute_us),
      ms(s.avg_backward_comm_us), ms(s.last_backward_comm_us), ms(s.avg_overlap_us), ms(s.last_overlap_us),
      s.avg_backward_comm_us > 0 ? 100 * s.avg_overlap_us / s.avg_backward_comm_us : 0.0);
}

// ---- Setup, in the order train() runs it ------------------------------------------------------

// Over the model's parameters (--fsdp: its shards).
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainConfig& config, const std::vector<Tensor>& params, int world) {
  const double lr = config.lr_on(world);
  if (config.optimizer == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions(lr).momentum(config.momentum));
  return std::make_unique<nn::Adam>(params, nn::AdamOptions(lr));
}

// --checkpoint: one file (nn::save_checkpoint) with the model, the optimizer and the steps
// done. A run that starts removes the temporaries of writers that were killed; with --resume
// it continues from the file when there is one (before DDP: rank 0's state is broadcast anyway).
std::optional<nn::TrainingCheckpoint> resume_if_asked(const TrainConfig& config, int rank, int world, nn::Module& model,
                                                      nn::Optimizer& optimizer) {
  if (!config.checkpoint.empty() && rank == 0) nn::remove_stale_checkpoint_temporaries(config.checkpoint);
  if (!config.resume || !std::filesystem::exists(config.checkpoint)) return std::nullopt;
  nn::TrainingCheckpoint resumed = nn::load_checkpoint(config.checkpoint, model, optimizer);
  TDDP_CHECK(resumed.step < config.steps, "--resume: {} is {} steps in, nothing left of --steps {}", config.checkpoint,
             resumed.step, config.steps);
  // This rank's Dropout stream (--deterministic: the one-process stream, on every world size).
  restore_generator(resumed.metadata, config.deterministic ? 0 : rank, world, config.seed, resumed.step);
  return resumed;
}

// What the loop calls: the model itself, or DDP around it with the chosen communication hook.
struct Runner {
  std::shared_ptr<nn::Module> module;
  std::shared_ptr<ddp::DistributedDataParallel> ddp;
  std::shared_ptr<ddp::PowerSGDState> powersgd;
  std::shared_ptr<ddp::Timeline> fsdp_timeline;  // --fsdp --timeline: every unit records into it
};

Runner wrap_in_ddp(const TrainConfig& config, const std::shared_ptr<nn::Module>& model,
                   const std::shared_ptr<comm::ProcessGroup>& pg) {
  if (!pg) return Runner{model, nullptr, nullptr, nullptr};
  if (config.fsdp) {  // every layer with parameters of its own a unit, then the root
    ddp::FullyShardOptions options;
    if (!config.timeline.empty()) options.timeline(std::make_shared<ddp::Timeline>());
    ddp::fully_shard_by_policy(
        model, pg, [](const nn::Module& m) { return m.children().empty() && !m.parameters().empty(); }, options);
    return Runner{model, nullptr, nullptr, options.timeline()};
  }
  // In place: the optimizer keeps the same weight and buffer tensors.
  if (config.sync_bn) ddp::SyncBatchNorm::convert_sync_batchnorm(model, pg);
  ddp::DDPOptions options;
  options.bucket_cap_mb(config.bucket_cap_mb).first_bucket_cap_mb(config.first_bucket_cap_mb);
  options.find_unused_parameters(config.find_unused_parameters);
  if (!config.timeline.empty()) options.timeline(config.timeline);
  Runner r;
  r.ddp = std::make_shared<ddp::DistributedDataParallel>(model, pg, options);
  r.module = r.ddp;
  r.powersgd = register_comm_hook(*r.ddp, pg, config.comm_hook, config.powersgd_rank, config.powersgd_start_iter);
  return r;
}

// This rank's share of each step's global batch (train_data.h).
std::unique_ptr<Dataset> open_dataset(const TrainConfig& config, const BuiltModel& model, int rank, int world) {
  const int64_t batch_size = config.global_batch(world);
  TDDP_CHECK(config.data.empty() ? batch_size % world == 0 : true,
             "--batch {} is not divisible by {} {}: every rank takes an equal share of each batch", batch_size,
             world_size_variable(), world);
  if (!config.data.empty())
    return file_dataset(config.data, config.steps, model.sample, model.out, config.classification(), rank, world);
  if (config.uses_digits()) {
    return digits_dataset(config.digits.empty() ? default_digits_path() : config.digits, config.seed, batch_size, rank,
                          world, /*blocks=*/config.deterministic);
  }
  return synthetic_dataset(config.seed, batch_size, model.in, model.out, config.classification(), rank, world);
}

// The metrics CSV ("step,loss"), on rank 0.
std::ofstream open_metrics(const TrainConfig& config, int rank, int64_t first_step) {
  if (config.metrics.empty() || rank != 0) return std::ofstream();
  return open_metrics_csv(config.metrics, "step,loss", first_step);
}

// Everything the loop uses, set up in order.
struct Run {
  Placement placement;
  std::shared_ptr<comm::ProcessGroup> pg;
  int rank = 0, world = 1;
  BuiltModel model;
  std::unique_ptr<nn::Optimizer> optimizer;
  int64_t first_step = 0;
  Runner runner;
  std::unique_ptr<Dataset> data;
  t::DType dtype = t::kFloat32;  // --dtype: the parameters' and so the inputs'

  // A batch of the data shaped for the model, on this run's device, in its dtype (class targets
  // stay int64).
  Batch placed(const Batch& b) const {
    const auto cast = [&](const Tensor& x) { return t::is_floating_point(x.dtype()) ? x.to(dtype) : x; };
    return Batch{model.shaped(cast(b.inputs).to(placement.device)), cast(b.targets).to(placement.device)};
  }
};

Run set_up(const TrainConfig& config) {
  Run run;
  run.placement = choose_placement(config.device, config.backend);
  run.pg = join_ranks(run.placement.backend, config.timeout_s);
  run.rank = run.pg ? run.pg->rank() : 0;
  run.world = run.pg ? run.pg->size() : 1;
  TDDP_CHECK(config.timeline.empty() || run.pg,
             "--timeline records DDP's events, but this run is on one process: start it with launch --nproc_per_node 2 "
             "(or more)");
  run.model = build_model(config, run.placement.device, config.classification(), config.uses_digits());
  run.dtype = config.dtype == "float64" ? t::kFloat64 : t::kFloat32;
  // Dropout's masks differ by rank (nanoGPT's seed + rank); --deterministic: every rank draws
  // the one-process stream (it reads the whole global batch, and the models it takes draw nothing).
  seed_training(config.seed, config.deterministic ? 0 : run.rank);
  if (config.fsdp && run.pg) {  // the optimizer steps the shards; a checkpoint is a file per rank
    run.runner = wrap_in_ddp(config, run.model.module, run.pg);
    run.optimizer = make_optimizer(config, run.model.module->parameters(), run.world);
    const std::string mine = ddp::sharded_checkpoint_file(config.checkpoint, run.rank, run.world);
    if (config.resume && std::filesystem::exists(mine)) {
      run.first_step = ddp::load_sharded_checkpoint(config.checkpoint, *run.model.module, *run.optimizer, *run.pg).step;
      TDDP_CHECK(run.first_step < config.steps, "--resume: {} is {} steps in, nothing left of --steps {}",
                 config.checkpoint, run.first_step, config.steps);
    }
  } else {
    run.optimizer = make_optimizer(config, run.model.module->parameters(), run.world);
    const std::optional<nn::TrainingCheckpoint> resumed =
        resume_if_asked(config, run.rank, run.world, *run.model.module, *run.optimizer);
    run.first_step = resumed ? resumed->step : 0;
    if (config.deterministic) {  // DDP's deterministic option, on one process too; the grids from the checkpoint
      run.runner.ddp = deterministic_ddp(run.model.module, run.pg, config.chunk_size);
      run.runner.module = run.runner.ddp;
      if (resumed) load_grids(resumed->metadata, *run.runner.ddp);
    } else {
      run.runner = wrap_in_ddp(config, run.model.module, run.pg);
    }
  }
  // --deterministic: each rank reads its chunks of the one-process batches (rows r n .. (r + 1)
  // n - 1 of each), and runs them; the chunks' errors come first.
  if (config.deterministic && config.data.empty())
    chunk_share(config.global_batch(run.world), config.chunk_size, run.rank, run.world);
  run.data = open_dataset(config, run.model, run.rank, run.world);
  // Resuming: the data's generators where they were. Skipping draws from the default
  // generator too (each epoch's loader draws a seed from it, as PyTorch's), which the
  // checkpoint already counts: its state, this rank's, is put back after.
  const std::string resumed_generator = tensor::default_generator().get_state();
  for (int64_t step = 0; step < run.first_step; ++step) run.data->batch(step);
  if (run.first_step > 0) tensor::default_generator().set_state(resumed_generator);
  return run;
}

// "training mlp (4 parameter tensors) with sgd lr 0.1, ce loss, 100 steps, <data>, ...".
std::string describe_run(const TrainConfig& config, const Run& run) {
  std::ostringstream line;
  line << "training " << config.model << " (" << run.model.module->parameters().size() << " parameter tensors) with "
       << config.optimizer << " lr " << config.lr_on(run.world)
       << (config.scale_lr ? fmt::format(" ({} x {} ranks: --scale_lr)", config.lr, run.world) : std::string()) << ", "
       << config.loss_used() << " loss, " << (config.dtype == "float32" ? "" : config.dtype + ", ") << config.steps
       << " steps, " << run.data->describe()
       << (run.pg ? fmt::format(", {} on {} ranks ({})", config.fsdp ? "fully sharded (fully_shard)" : "data-parallel",
                                run.world, run.placement.backend)
                  : std::string())
       << ", device " << run.placement.device.str() << "\n";
  return line.str();
}

// ---- Inside the loop ------------------------------------------------------------------------

Tensor loss_of(const TrainConfig& config, const Tensor& prediction, const Tensor& targets) {
  return config.classification() ? nn::cross_entropy(prediction, targets) : nn::mse_loss(prediction, targets);
}

// Rank 0 writes a checkpoint every --checkpoint_every steps and at the end.
// --fsdp: every rank writes its own file of its shards (ddp::save_sharded_checkpoint).
// `now`: also when not due (the ranks stop for a requeue).
void save_checkpoint_if_due(const TrainConfig& config, const Run& run, int64_t steps_done, bool now = false) {
  if (config.checkpoint.empty()) return;
  const bool last = steps_done == config.steps;
  const bool due = now || (config.checkpoint_every > 0 ? steps_done % config.checkpoint_every == 0 || last : last);
  if (!due) return;
  if (config.fsdp && run.pg) {
    ddp::save_sharded_checkpoint(config.checkpoint, *run.model.module, *run.optimizer, *run.pg, steps_done);
    return;
  }
  // Every rank's generator (a collective), then rank 0 writes.
  std::map<std::string, std::string> metadata = generator_states(run.pg.get(), run.placement.device);
  if (config.deterministic) save_grids(*run.runner.ddp, metadata);
  if (run.rank == 0)
    nn::save_checkpoint(config.checkpoint, *run.model.module, *run.optimizer, steps_done, {}, metadata);
}

// The losses and accuracy of the run (averaged over ranks: the figures of the whole global
// batch), the metrics CSV and the progress lines.
class Log {
 public:
  Log(const TrainConfig& config, const Run& run, std::ostream& progress)
      : config_(config), run_(run), progress_(progress), metrics_(open_metrics(config, run.rank, run.first_step)),
        log_every_(config.log_every > 0 ? config.log_every : std::max<int64_t>(1, config.steps / 10)),
        // Where the figures are averaged (DDP's choice: the GPU under NCCL, else the CPU).
        report_device_(run.pg ? ddp::control_device(*run.pg, run.model.module->parameters()) : run.placement.device),
        start_(std::chrono::steady_clock::now()) {}

  // Before backward: the step's loss over all ranks (and on the last step, the accuracy), and
  // whether any rank was asked to stop (`signals`, or null: preemption.h): then every rank
  // stops after this step.
  // `global`: the loss is already the whole batch's, the same on every rank (--deterministic).
  bool loss(int64_t step, const Tensor& loss, const Tensor& prediction, const Tensor& targets, StopSignals* signals,
            bool global = false) {
    auto [value, stop] = loss_and_stop_over_ranks(run_.pg.get(), report_device_, loss.item<double>(), signals);
    if (global) value = loss.item<double>();
    TDDP_CHECK(std::isfinite(value), "the loss became {} at step {}; lower --lr", value, step);
    result_.losses.push_back(value);
    if (config_.classification() && step + 1 == config_.steps && prediction.defined()) {
      result_.accuracy = mean_over_ranks(t::mean(t::eq(t::argmax(prediction, 1), targets).to(t::kFloat64)));
    }
    return stop;
  }

  // After the update: the metrics row and, every log_every steps, a progress line.
  void step_done(int64_t step, int64_t rank_samples) {
    result_.samples += rank_samples * run_.world;
    const double value = result_.losses.back();
    // Every digit the run's dtype carries (9 for float32, 17 for float64), so that the file tells runs apart as
    // far as their arithmetic does.
    if (metrics_.is_open()) metrics_ << step << "," << fmt::format("{:.{}g}", value, digits_) << std::endl;
    if ((step + 1) % log_every_ != 0 && step + 1 != config_.steps) return;
    const double elapsed = seconds();
    progress_ << fmt::format("step {:>{}}/{}  loss {:.6f}  {:.0f} samples/s  elapsed {:.2f} s\n", step + 1,
                             std::to_string(config_.steps).size(), config_.steps, value,
                             static_cast<double>(result_.samples) / std::max(elapsed, 1e-9), elapsed);
  }

  TrainResult& result() { return result_; }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double mean_over_ranks(const Tensor& value) const {
    if (run_.pg) run_.pg->allreduce(value, comm::ReduceOp::kAvg)->wait();
    return value.item<double>();
  }

  const TrainConfig& config_;
  const Run& run_;
  std::ostream& progress_;
  std::ofstream metrics_;
  int64_t log_every_;
  int digits_ = run_.dtype == t::kFloat64 ? 17 : 9;
  t::Device report_device_;
  std::chrono::steady_clock::time_point start_;
  TrainResult result_;
};

// ---- After the loop ------------------------------------------------------------------------

// The summary line, the held-out accuracy, PowerSGD's compression and DDP's statistics.
void report(const TrainConfig& config, const Run& run, TrainResult& result, std::ostream& progress) {
  progress << fmt::format("done: {} steps in {:.2f} s ({:.0f} samples/s); loss {:.6f} -> {:.6f}", config.steps,
                          result.seconds, static_cast<double>(result.samples) / std::max(result.seconds, 1e-9),
                          result.losses.front(), result.losses.back());
  if (result.accuracy >= 0) progress << fmt::format("; accuracy on the last batch {:.1f}%", 100 * result.accuracy);
  progress << "\n";
  if (const std::optional<Batch> held = config.classification() ? run.data->held_out() : std::nullopt) {
    // The same model on every rank, the same held-out samples: every rank gets the same figure.
    t::NoGradGuard no_grad;
    run.model.module->eval();  // BatchNorm's running statistics, no dropout
    const Batch placed = run.placed(*held);
    const Tensor predicted = t::argmax(run.model.module->forward(placed.inputs), 1);
    run.model.module->train();
    result.held_out_accuracy = t::mean(t::eq(predicted, placed.targets).to(t::kFloat64)).item<double>();
    progress << fmt::format("held-out accuracy {:.1f}% on {}\n", 100 * result.held_out_accuracy,
                            run.data->describe_held_out());
  }
  if (run.runner.powersgd) {
    progress << fmt::format("PowerSGD rank {}: {:.1f}x fewer gradient elements sent (from iteration {} on)\n",
                            config.powersgd_rank, run.runner.powersgd->compression_rate(), config.powersgd_start_iter);
  }
  if (config.stats && config.deterministic && run.runner.ddp->exact_sum() != nullptr) {
    const ddp::ExactGradientSum* sum = run.runner.ddp->exact_sum();
    progress << fmt::format(
        "deterministic: {} chunks of {} rows a step, {} bits below each bound, {} step(s) run twice\n",
        sum->total_chunks(), config.chunk_size, sum->precision_bits(), sum->reruns());
  } else if (config.stats) {
    progress << (run.runner.ddp
                     ? describe_stats(run.runner.ddp->stats(), run.rank)
                     : "no DDP statistics: this run trained on one process (start it with launch for DDP)\n");
  }
  if (!config.save.empty() && config.fsdp && run.pg) {
    // The parameters gathered from their shards (every rank takes part), rank 0 writes them.
    const nn::OrderedDict<Tensor> full = ddp::full_state_dict(*run.model.module);
    if (run.rank == 0) nn::save_safetensors(config.save, full);
  } else if (!config.save.empty() && run.rank == 0) {
    nn::save_state_dict(*run.model.module, config.save);
  }
  if (!config.save.empty() && run.rank == 0) progress << "saved the final weights to " << config.save << "\n";
}

// Every rank waits for the others (rank 0 hosts the store), DDP (or --fsdp) writes its timeline, and the
// group goes.
void tear_down(const TrainConfig& config, Run& run) {
  if (!run.pg) return;
  run.pg->barrier()->wait();
  if (run.runner.fsdp_timeline)  // as DDP writes its own when it goes
    run.runner.fsdp_timeline->write(fmt::format("{}.rank{}.json", config.timeline, run.rank), run.rank);
  run.runner = Runner{};
  comm::destroy_process_group();
}

// The ranks agreed to stop after `steps_done` steps (a signal, preemption.h): the checkpoint is
// written; the group goes and the run ends early.
TrainResult stop_for_requeue(const TrainConfig& config, Run& run, Log& logged, int signo, int64_t steps_done,
                             std::ostream& progress) {
  TrainResult result = logged.result();
  result.seconds = logged.seconds();
  result.stopped_after = steps_done;
  progress << stop_message(signo, fmt::format("after step {} of {}", steps_done, config.steps), config.checkpoint,
                           "--resume")
           << "\n";
  tear_down(config, run);
  return result;
}

// The loss and the optimizer step as spans on DDP's timeline (nothing on one process).
std::optional<ddp::DistributedDataParallel::TimelineSpan> timeline_span(const Run& run, const char* name) {
  if (!run.runner.ddp) return std::nullopt;
  return run.runner.ddp->timeline_span(name);
}

// One step's forward, loss (logged) and backward: through DDP (or the model alone), or, with
// --deterministic, this rank's chunks of the whole batch summed exactly. Returns whether the
// ranks agreed to stop after this step.
bool forward_and_backward(const TrainConfig& config, Run& run, Log& logged, int64_t step, const Batch& batch,
                          StopSignals* signals) {
  if (config.deterministic) {
    ddp::DistributedDataParallel& model = *run.runner.ddp;
    const Tensor loss = exact_step(
        model, batch, [&](const Tensor& x, const Tensor& y) { return loss_of(config, model.forward(x), y); },
        ddp::BatchRows::kRank);
    return logged.loss(step, loss, {}, {}, signals, true);
  }
  Tensor prediction, loss;
  {
    // --autocast bf16: forward and loss in mixed precision, backward after the scope (as PyTorch's).
    std::optional<tensor::Autocast> autocast;
    if (!config.autocast.empty()) autocast.emplace(run.placement.device.type, tensor::kBFloat16);
    prediction = (*run.runner.module)(batch.inputs);  // called: its hooks run (--fsdp's)
    const auto marked = timeline_span(run, "loss");
    loss = loss_of(config, prediction, batch.targets);
  }
  bool stop = false;
  {
    const auto marked = timeline_span(run, "loss logged (its mean over ranks)");
    stop = logged.loss(step, loss, prediction, batch.targets, signals);
  }
  loss.backward();
  return stop;
}

}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  config.validate();
  // Resolves TINYDDP_CPU_ISA and the thread count now: a value this CPU cannot run, or a bad
  // --threads or TINYDDP_NUM_THREADS, stops here, before any work.
  const int threads = use_threads(config.threads);
  const std::string cpu_kernels =
      fmt::format("{}; {} intra-op threads ({})", tensor::cpu_kernels_summary(), threads, tensor::num_threads_source());
  Run run = set_up(config);
  std::ostringstream quiet;  // only rank 0 prints progress
  std::ostream& progress = run.rank == 0 ? log : quiet;
  if (run.first_step > 0)
    progress << fmt::format("resuming from {} after {} steps\n", config.checkpoint, run.first_step);
  progress << describe_run(config, run) << "cpu kernels: " << cpu_kernels << "\n";
  Log logged(config, run, progress);
  // With a checkpoint to write, SIGUSR1 and SIGTERM stop the run after a step (preemption.h).
  std::optional<StopSignals> signals;
  if (!config.checkpoint.empty()) signals.emplace();
  for (int64_t step = run.first_step; step < config.steps; ++step) {
    fail_on_purpose_if_asked(config.fail_at_step, step, run.rank, "train");
    const Batch mine = run.data->batch(step);  // this rank's share of the step's global batch
    run.optimizer->zero_grad();
    const bool stop = forward_and_backward(config, run, logged, step, run.placed(mine), signals ? &*signals : nullptr);
    {
      const auto marked = timeline_span(run, "optimizer step");
      run.optimizer->step();
    }
    logged.step_done(step, mine.inputs.size(0));
    save_checkpoint_if_due(config, run, step + 1, stop);
    if (stop && step + 1 < config.steps)
      return stop_for_requeue(config, run, logged, signals->received(), step + 1, progress);
  }
  TrainResult result = logged.result();
  result.seconds = logged.seconds();
  report(config, run, result, progress);
  tear_down(config, run);
  return result;
}

}  // namespace tinyddp::examples
