// The training loop of //examples:train_gpt (train_gpt_lib.h). train_gpt() at the end is the
// mainline: batch, forward, backward, clip, step, schedule, log, checkpoint. The named steps
// above it set up the text, the model, the optimizer and its schedule, resuming and DDP; what
// is printed and saved around the loop is train_gpt_report.cc's (train_gpt_run.h).
#include "examples/train_gpt_lib.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "examples/gpt_data.h"
#include "examples/op_profile.h"
#include "examples/preemption.h"
#include "examples/run_env.h"
#include "examples/step_phases.h"
#include "examples/train_exact.h"
#include "examples/train_gpt_run.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/ddp/fully_shard.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

namespace {

// ---- Setup, in the order train_gpt() runs it ---------------------------------------------------

GptText open_text(const GPTTrainConfig& config, int rank, int world) {
  GptText text;
  if (!config.data.empty()) {
    text.file = std::make_unique<TokenBatches>(config.data, config.steps, config.block_size, rank, world);
    TDDP_CHECK(text.file->max_id() < config.vocab_size,
               "--data {}: token id {} is outside the vocabulary of --vocab_size {}", config.data, text.file->max_id(),
               config.vocab_size);
    return text;
  }
  text.corpus = std::make_unique<TextCorpus>(TextCorpus::load(config.corpus.empty() ? kFortunesPath : config.corpus));
  TDDP_CHECK(config.vocab_size == 0 || config.vocab_size >= text.corpus->vocab_size(),
             "--vocab_size {} is smaller than the corpus's vocabulary of {} characters", config.vocab_size,
             text.corpus->vocab_size());
  text.split = std::make_unique<TextSplit>(*text.corpus, config.seed, config.block_size);
  return text;
}

nn::GPTConfig model_config(const GPTTrainConfig& config, const GptText& text) {
  nn::GPTConfig c;
  c.n_layer = config.n_layer;
  c.n_head = config.n_head;
  c.n_embd = config.n_embd;
  c.block_size = config.block_size;
  c.vocab_size = config.vocab_size > 0 ? config.vocab_size : text.corpus->vocab_size();
  c.dropout = config.dropout;
  c.bias = config.bias;
  return c;
}

std::shared_ptr<nn::GPT> build_model(const GPTTrainConfig& config, const nn::GPTConfig& c, t::Device device) {
  t::manual_seed(config.seed);  // nanoGPT's initialisation, the same on every rank
  auto model = std::make_shared<nn::GPT>(c);
  if (!config.init.empty()) model->load_state_dict(nn::load_safetensors(config.init).tensors);
  model->to(device);
  return model;
}

// AdamW over nanoGPT's two groups, or ZeRO around it (each rank keeps its shard's moments).
// `params`: the model's, or under --fsdp its shards (their dims are the parameters').
std::unique_ptr<nn::Optimizer> make_optimizer(const GPTTrainConfig& config, const std::vector<Tensor>& params,
                                              const std::shared_ptr<comm::ProcessGroup>& pg) {
  const bool capturable = config.capturable || config.cuda_graph;
  const nn::AdamOptions options = nn::AdamOptions(config.lr)
                                      .betas(config.beta1, config.beta2)
                                      .eps(config.eps)
                                      .weight_decay(config.weight_decay)
                                      .capturable(capturable);
  std::vector<nn::ParamGroup> groups = nn::weight_decay_groups(params, config.weight_decay);
  if (config.zero && pg) {
    return std::make_unique<ddp::ZeroRedundancyOptimizer>(std::move(groups), ddp::optimizer_class<nn::AdamW>(options),
                                                          pg);
  }
  auto adamw = std::make_unique<nn::AdamW>(std::move(groups), options);
  // capturable: each group's rate a float32 tensor on the parameters' device, which the
  // scheduler fills (as param_group["lr"] = torch.tensor(lr, device=...)); a captured step reads it.
  for (size_t g = 0; capturable && g < adamw->num_param_groups(); ++g) {
    adamw->set_lr_tensor(g, t::scalar_tensor(config.lr, t::kFloat32).to(params.front().device()));
  }
  return adamw;
}

std::unique_ptr<nn::LRScheduler> make_scheduler(const GPTTrainConfig& config, nn::Optimizer& optimizer) {
  if (config.lr_schedule == "cosine") {
    return std::make_unique<nn::WarmupCosineLR>(optimizer, config.warmup_steps, config.steps, config.min_lr);
  }
  const int64_t warmup = config.warmup_steps;
  return std::make_unique<nn::LambdaLR>(optimizer, [warmup](int64_t s) {
    return s < warmup ? static_cast<double>(s + 1) / static_cast<double>(warmup) : 1.0;
  });
}

// --resume: the model, the optimizer, the scheduler and the generator from --checkpoint.
// --fsdp: every rank its own file of its shards (ddp::load_sharded_checkpoint).
void resume_if_asked(const GPTTrainConfig& config, GptRun& run) {
  if (!config.checkpoint.empty() && run.rank == 0) nn::remove_stale_checkpoint_temporaries(config.checkpoint);
  const bool sharded = !run.units.empty();
  const std::string file =
      sharded ? ddp::sharded_checkpoint_file(config.checkpoint, run.rank, run.world) : config.checkpoint;
  if (!config.resume || !std::filesystem::exists(file)) return;
  const nn::TrainingCheckpoint resumed =
      sharded ? ddp::load_sharded_checkpoint(config.checkpoint, *run.model, *run.optimizer, *run.shard_pg)
              : nn::load_checkpoint(config.checkpoint, *run.model, *run.optimizer);
  TDDP_CHECK(resumed.step < config.steps, "--resume: {} is {} steps in, nothing left of --steps {}", config.checkpoint,
             resumed.step, config.steps);
  if (!sharded) restore_generator(resumed.metadata, run.rank, run.world, config.seed, resumed.step);
  run.resumed_metadata = resumed.metadata;
  run.scheduler->load_state_dict(resumed.extra);
  if (sharded && config.deterministic) load_grids(resumed.extra, *run.model);
  run.first_step = resumed.step;
}

GptRun set_up(const GPTTrainConfig& config) {
  use_threads(config.threads);  // a bad --threads or TINYDDP_NUM_THREADS stops here, before any work
  GptRun run;
  run.placement = choose_placement(config.device, config.backend);
  TDDP_CHECK(!config.tf32 || run.placement.on_gpu, "--tf32 needs the model on a GPU (--device cuda)");
  if (config.tf32) tensor::cuda::set_allow_tf32(true);
  if (config.cuda_graph) check_graph_placement(run.placement, "--cuda_graph", "step", true);  // before joining
  run.pg = join_ranks(run.placement.backend, config.timeout_s);
  run.rank = run.pg ? run.pg->rank() : 0;
  run.world = run.pg ? run.pg->size() : 1;
  // --deterministic: every rank reads the one-process batches and runs its chunks of each.
  const int share_of = config.deterministic ? 1 : run.world;
  run.text = open_text(config, config.deterministic ? 0 : run.rank, share_of);
  TDDP_CHECK(run.text.file || config.batch % share_of == 0,
             "--batch {} is not divisible by {} {}: every rank takes an equal share of each batch", config.batch,
             world_size_variable(), run.world);
  run.rows = run.text.file ? run.text.file->global_batch() / share_of : config.batch / share_of;
  const int64_t accumulation = config.gradient_accumulation_steps > 0 ? config.gradient_accumulation_steps : share_of;
  TDDP_CHECK(accumulation % share_of == 0,
             "--gradient_accumulation_steps {} is not divisible by {} {}: it counts the micro-steps of all "
             "ranks, as nanoGPT's",
             accumulation, world_size_variable(), run.world);
  run.micro_steps = accumulation / share_of;
  TDDP_CHECK(run.rows % run.micro_steps == 0,
             "each rank's {} rows per step do not split into its {} micro-steps (--gradient_accumulation_steps {} over "
             "{} ranks)",
             run.rows, run.micro_steps, accumulation, run.world);
  run.model = build_model(config, model_config(config, run.text), run.placement.device);
  seed_training(config.seed, config.deterministic ? 0 : run.rank);  // Dropout's masks differ by rank (seed + rank)
  if (config.fsdp && (run.pg || config.deterministic)) {
    run.shard_pg = run.pg ? run.pg : world_of_one();
    auto options = ddp::FullyShardOptions().deterministic(config.deterministic).chunk_size(config.chunk_size);
    if (config.fsdp_param_dtype == "bfloat16") options.mp_policy(ddp::MixedPrecisionPolicy().param_dtype(t::kBFloat16));
    run.units = ddp::fully_shard_by_policy(run.model, run.shard_pg, ddp::is_a<nn::Block>, options);
  }
  run.optimizer = make_optimizer(config, run.model->parameters(), run.pg);  // with fully_shard: the shards
  run.scheduler = make_scheduler(config, *run.optimizer);
  resume_if_asked(config, run);
  run.forward = run.model.get();
  if (config.deterministic) {
    chunk_share(run.rows, config.chunk_size, run.rank, run.world);  // the flags' errors before any step
    run.exact = true;
    if (run.units.empty()) {
      run.ddp = deterministic_ddp(run.model, run.pg, config.chunk_size);
      load_grids(run.resumed_metadata, *run.ddp);
      run.forward = run.ddp.get();
    }
  } else if (run.pg && run.units.empty()) {
    run.ddp = std::make_shared<ddp::DistributedDataParallel>(run.model, run.pg);
    run.powersgd = register_comm_hook(*run.ddp, run.pg, config.comm_hook, 1, 1000);
    run.forward = run.ddp.get();
  }
  if (config.cuda_graph) run.graphed = std::make_unique<GptRun::Graphed>();
  return run;
}

// ---- Inside the loop ---------------------------------------------------------------------------

std::pair<Tensor, Tensor> batch_of(const GptRun& run, int64_t step) {
  auto [x, y] = run.text.file ? run.text.file->batch(step)
                              : run.text.split->train_batch(step, run.exact ? 0 : run.rank, run.rows);
  return {x.to(run.placement.device), y.to(run.placement.device)};
}

// The step's loss: the forward (and loss) under autocast with --autocast bf16; the backward
// is the caller's, outside the scope, as PyTorch's autocast is used.
Tensor forward_loss(const GPTTrainConfig& config, const GptRun& run, const Tensor& x, const Tensor& y) {
  std::optional<tensor::Autocast> autocast;
  if (!config.autocast.empty()) autocast.emplace(x.device().type, tensor::kBFloat16);
  return (*run.forward)(x, y)[1];
}

// One step's forward and backward, in --gradient_accumulation_steps micro-steps: this rank's
// rows in order, each micro-step's loss divided by their count; DDP reduces on the last one
// only (the others run inside no_sync). Returns the step's loss (the divided losses' sum).
Tensor forward_backward(const GPTTrainConfig& config, const GptRun& run, const Tensor& x, const Tensor& y) {
  if (run.exact) {  // --deterministic: this rank's chunks of the whole batch; the loss is already the batch's
    const auto chunk_loss = [&](const Tensor& xs, const Tensor& ys) { return forward_loss(config, run, xs, ys); };
    return run.units.empty() ? exact_step(*run.ddp, Batch{x, y}, chunk_loss)
                             : exact_step(*run.model, *run.shard_pg, config.chunk_size, Batch{x, y}, chunk_loss);
  }
  if (run.micro_steps == 1) {
    const Tensor loss = forward_loss(config, run, x, y);
    loss.backward();
    return loss;
  }
  const int64_t rows = x.size(0) / run.micro_steps;
  Tensor total;
  for (int64_t micro = 0; micro < run.micro_steps; ++micro) {
    std::optional<ddp::DistributedDataParallel::NoSyncGuard> no_sync;
    if (run.ddp && micro + 1 < run.micro_steps) no_sync.emplace(*run.ddp);
    if (!run.units.empty()) ddp::set_requires_gradient_sync(*run.model, micro + 1 == run.micro_steps);
    const Tensor loss =
        t::div(forward_loss(config, run, x.narrow(0, micro * rows, rows), y.narrow(0, micro * rows, rows)),
               static_cast<double>(run.micro_steps));
    loss.backward();
    total = total.defined() ? t::add(total, loss.detach()) : loss.detach();
  }
  return total;
}

// The gradients' total norm, clipped to --grad_clip. After backward, DDP has averaged the
// gradients: every rank clips by the same factor.
Tensor clip_gradients(const GPTTrainConfig& config, const GptRun& run, const std::vector<Tensor>& params) {
  const double clip = config.grad_clip > 0 ? config.grad_clip : INFINITY;
  return run.units.empty() ? nn::clip_grad_norm_(params, clip)
                           : ddp::clip_sharded_grad_norm_(params, clip, *run.shard_pg);
}

// One optimizer step: the batch, forward and backward, clipping, the update; returns the loss
// and the gradients' norm, both still on the device. --profile_phases times each part.
std::pair<Tensor, Tensor> train_step(const GPTTrainConfig& config, const GptRun& run, int64_t step,
                                     const std::vector<Tensor>& params, StepPhases& phases) {
  phases.begin_step();
  const auto [x, y] = batch_of(run, step);
  phases.end_phase("batch");
  run.optimizer->zero_grad();
  Tensor loss;
  if (config.profile_phases && run.micro_steps == 1 && !run.exact) {  // forward and backward apart
    loss = forward_loss(config, run, x, y);
    phases.end_phase("forward");
    loss.backward();
    phases.end_phase("backward");
  } else {
    loss = forward_backward(config, run, x, y);
    phases.end_phase("fwd+bwd");
  }
  const Tensor norm = clip_gradients(config, run, params);
  phases.end_phase("clip");
  run.optimizer->step();
  run.scheduler->step();
  phases.end_phase("optimizer");
  return {loss, norm};
}

// --cuda_graph: three eager steps (cuBLAS's workspaces, AdamW's state, DDP's rebuilt buckets, the checks
// that read back), then the fourth captured: forward, backward with DDP's allreduces, clipping, AdamW (its
// step count and rate device tensors). Each later step copies its batch in and replays: one launch a step
// (--dropout: the eager masks). The scheduler fills the rate between replays; the graph writes loss and norm.
std::pair<Tensor, Tensor> graphed_step(const GPTTrainConfig& config, const GptRun& run, int64_t step,
                                       const std::vector<Tensor>& params, StepPhases& phases) {
  constexpr int64_t kEagerSteps = 3;
  if (step < run.first_step + kEagerSteps) return train_step(config, run, step, params, phases);
  GptRun::Graphed& g = *run.graphed;
  const auto [x, y] = batch_of(run, step);
  if (!g.graph.captured()) {
    g.x = x;
    g.y = y;
    run.optimizer->zero_grad();  // set to none: the captured backward makes them, in the graph's pool
    g.graph.capture_begin(run.placement.device.index);
    g.loss = forward_backward(config, run, g.x, g.y);
    g.norm = clip_gradients(config, run, params);
    run.optimizer->step();
    g.graph.capture_end();  // nothing ran yet: the replay below runs this step
  } else {
    g.x.copy_(x);
    g.y.copy_(y);
  }
  g.graph.replay();
  run.scheduler->step();
  return {g.loss, g.norm};
}

// Rank 0 writes a checkpoint every --checkpoint_every steps and at the end (with ZeRO every
// rank first sends it its shard of the optimizer state; with --fsdp every rank writes its own).
// `now`: also when not due (the ranks stop for a requeue).
void save_checkpoint_if_due(const GPTTrainConfig& config, const GptRun& run, int64_t steps_done, bool now) {
  if (config.checkpoint.empty()) return;
  const bool last = steps_done == config.steps;
  if (!now && !(config.checkpoint_every > 0 ? steps_done % config.checkpoint_every == 0 || last : last)) return;
  if (!run.units.empty()) {  // --fsdp: every rank writes its shards
    nn::OrderedDict<Tensor> extra = run.scheduler->state_dict();
    if (run.exact) save_grids(*run.model, extra);
    ddp::save_sharded_checkpoint(config.checkpoint, *run.model, *run.optimizer, *run.shard_pg, steps_done, extra);
    return;
  }
  if (auto* zero = dynamic_cast<ddp::ZeroRedundancyOptimizer*>(run.optimizer.get())) zero->consolidate_state_dict(0);
  std::map<std::string, std::string> metadata = generator_states(run.pg.get(), run.placement.device);
  if (run.exact) save_grids(*run.ddp, metadata);
  if (run.rank == 0) {
    nn::save_checkpoint(config.checkpoint, *run.model, *run.optimizer, steps_done, run.scheduler->state_dict(),
                        metadata);
  }
}

std::ofstream open_metrics(const GPTTrainConfig& config, const GptRun& run) {
  if (config.metrics.empty() || run.rank != 0) return std::ofstream();
  return open_metrics_csv(config.metrics, "step,loss,grad_norm,lr", run.first_step);
}

// Every rank waits for the others (rank 0 hosts the store); the graph, DDP, then the group go.
void leave_group(GptRun& run) {
  if (!run.pg) return;
  if (run.graphed) run.graphed->graph.reset();
  run.pg->barrier()->wait();
  run.ddp.reset();
  comm::destroy_process_group();
}

// Every loss read back is finite, or the run stops naming its step.
void check_loss(double loss, int64_t step) {
  TDDP_CHECK(std::isfinite(loss), "the loss became {} at step {}; lower --lr", loss, step);
}

// The bigram model's validation loss (corpus runs only; -1 otherwise), printed by rank 0.
double bigram_baseline(const GPTTrainConfig& config, const GptRun& run, std::ostream& out) {
  if (!run.text.split) return -1;
  const double loss = run.text.split->bigram_loss(config.eval_windows);
  out << fmt::format("bigram model (next-character counts of the training split): validation loss {:.4f}\n", loss);
  return loss;
}

// --report_memory: the peaks start again from here.
void reset_peaks(const GptRun& run) {
  reset_peak_rss();
  t::reset_cpu_peak_memory();
  if (run.placement.on_gpu) t::cuda::reset_peak_memory_stats(run.placement.device.index);
}

// The losses of steps that print nothing, left on the device (no host wait inside those
// steps: on a GPU the host queues the next step while this one runs), read back in one copy
// at the next step that prints, and checked then. A copy of each (a replayed graph writes its
// loss to the same tensor every step).
struct PendingLosses {
  explicit PendingLosses(bool on) : on(on) {}
  void keep(int64_t step, const Tensor& loss) {
    steps.push_back(step);
    losses.push_back(loss.detach().clone());
  }
  void flush(std::vector<double>& out) {
    if (losses.empty()) return;
    const std::vector<double> values = t::stack(losses).to(t::kCPU).to(t::kFloat64).to_vector<double>();
    for (size_t i = 0; i < values.size(); ++i) {
      check_loss(values[i], steps[i]);
      out.push_back(values[i]);
    }
    steps.clear();
    losses.clear();
  }
  const bool on;
  std::vector<int64_t> steps;
  std::vector<Tensor> losses;
};

}  // namespace

GPTTrainResult train_gpt(const GPTTrainConfig& config, std::ostream& log) {
  config.validate();
  GptRun run = set_up(config);
  std::ostringstream quiet;  // only rank 0 prints
  std::ostream& out = run.rank == 0 ? log : quiet;
  if (run.first_step > 0) out << fmt::format("resuming from {} after {} steps\n", config.checkpoint, run.first_step);
  describe(config, run, out);
  GPTTrainResult result;
  result.bigram_loss = bigram_baseline(config, run, out);
  std::ofstream metrics = open_metrics(config, run);
  const int64_t log_every = config.log_every > 0 ? config.log_every : std::max<int64_t>(1, config.steps / 20);
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const std::vector<Tensor> params = run.model->parameters();
  StepPhases phases(config.profile_phases, run.placement.device);
  OpProfileWindow op_profile(run.first_step, config.steps, config.profile_ops, config.profile_trace, run.rank);
  if (config.report_memory) reset_peaks(run);  // the steps' peaks, not construction's
  // With a checkpoint to write, SIGUSR1 and SIGTERM stop the run after a step (preemption.h).
  std::optional<StopSignals> signals;
  if (!config.checkpoint.empty()) signals.emplace();
  // One process that writes no metrics row and waits for no signal reads a step's loss only
  // when it prints or evaluates (PendingLosses).
  PendingLosses pending(!run.pg && !signals && !metrics.is_open() && !config.profile_phases);
  for (int64_t step = run.first_step; step < config.steps; ++step) {
    fail_on_purpose_if_asked(config.fail_at_step, step, run.rank, "train_gpt");
    op_profile.begin_step(step);
    const double lr = run.optimizer->lr(0);
    const auto [loss, norm_tensor] =
        run.graphed ? graphed_step(config, run, step, params, phases) : train_step(config, run, step, params, phases);
    const bool eval_now = run.text.split && config.eval_every > 0 && (step + 1) % config.eval_every == 0;
    if (pending.on && (step + 1) % log_every != 0 && step + 1 != config.steps && !eval_now) {
      pending.keep(step, loss);
      op_profile.end_step(step, out);
      continue;
    }
    pending.flush(result.losses);
    auto [mean_loss, stop] = loss_and_stop_over_ranks(run.pg.get(), run.placement.device, loss.item<double>(),
                                                      signals ? &*signals : nullptr);
    if (run.exact) mean_loss = loss.item<double>();  // the whole batch's already, the same bits everywhere
    result.losses.push_back(mean_loss);
    phases.end_phase("read loss");
    check_loss(mean_loss, step);
    const bool log_now = (step + 1) % log_every == 0 || step + 1 == config.steps || stop;
    // The norm is read back only when it is written out (the loss above was read already).
    const double norm = metrics.is_open() || log_now ? norm_tensor.item<double>() : 0.0;
    if (metrics.is_open()) metrics << fmt::format("{},{:.9g},{:.9g},{:.9g}", step, mean_loss, norm, lr) << std::endl;
    const int64_t done = step + 1 - run.first_step;
    const double tokens = static_cast<double>(done * run.global_rows() * config.block_size);
    if (log_now) {
      out << fmt::format("step {:>{}}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}  {:.0f} tokens/s\n", step + 1,
                         std::to_string(config.steps).size(), config.steps, mean_loss, norm, lr, tokens / seconds())
          << std::flush;
    }
    if (eval_now && step + 1 != config.steps) {
      out << fmt::format("step {}: validation loss {:.4f}\n", step + 1, validation_loss(config, run));
    }
    save_checkpoint_if_due(config, run, step + 1, stop);
    result.seconds = seconds();
    result.tokens_per_second = tokens / result.seconds;
    op_profile.end_step(step, out);
    if (stop && step + 1 < config.steps) {  // the ranks agreed to stop here: the checkpoint is written
      out << stop_message(signals->received(), fmt::format("after step {} of {}", step + 1, config.steps),
                          config.checkpoint, "--resume")
          << "\n";
      result.stopped_after = step + 1;
      leave_group(run);
      return result;
    }
  }
  report_end(config, run, phases, result, log);
  leave_group(run);
  return result;
}

}  // namespace tinyddp::examples
