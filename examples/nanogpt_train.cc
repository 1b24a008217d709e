// train_gpt's nanoGPT mode (nanogpt_train.h): the configuration's checks, get_batch,
// estimate_loss and train.py's loop, in train.py's order of random draws.
#include "examples/nanogpt_train.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "examples/nanogpt_checkpoint.h"
#include "examples/nanogpt_data.h"
#include "examples/nanogpt_report.h"
#include "examples/op_profile.h"
#include "examples/preemption.h"
#include "examples/run_env.h"
#include "examples/train_exact.h"
#include "tinyddp/base/error.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/clip_grad.h"
#include "tinyddp/nn/optim.h"
#include "tinyddp/nn/scheduler.h"
#include "tinyddp/nn/transformer.h"
#include "tinyddp/tensor/autocast.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using tensor::Tensor;

void NanoGptConfig::validate() const {
  TDDP_CHECK(eval_interval >= 1 && log_interval >= 1 && eval_iters >= 1,
             "eval_interval ({}), log_interval ({}) and eval_iters ({}) must be at least 1", eval_interval,
             log_interval, eval_iters);
  TDDP_CHECK(init_from == "scratch" || init_from == "resume",
             "init_from={}: scratch or resume (nanoGPT's gpt2* weights are not supported)", init_from);
  TDDP_CHECK(gradient_accumulation_steps >= 1 && batch_size >= 1 && block_size >= 1,
             "gradient_accumulation_steps ({}), batch_size ({}) and block_size ({}) must be at least 1",
             gradient_accumulation_steps, batch_size, block_size);
  TDDP_CHECK(n_layer >= 1 && n_head >= 1 && n_embd >= 1 && n_embd % n_head == 0,
             "n_layer {}, n_head {}, n_embd {}: each at least 1, and n_embd divisible by n_head", n_layer, n_head,
             n_embd);
  TDDP_CHECK(dropout >= 0 && dropout < 1, "dropout={} is not in [0, 1)", dropout);
  TDDP_CHECK(max_iters >= 0 && warmup_iters >= 0 && lr_decay_iters >= 0,
             "max_iters ({}), warmup_iters ({}) and lr_decay_iters ({}) must not be negative", max_iters, warmup_iters,
             lr_decay_iters);
  TDDP_CHECK(!decay_lr || lr_decay_iters != warmup_iters,
             "lr_decay_iters equals warmup_iters ({}): nanoGPT's get_lr would divide by zero there", warmup_iters);
  TDDP_CHECK(dtype == "float32" || dtype == "bfloat16" || dtype == "float16",
             "dtype={}: float32, bfloat16 or float16, as nanoGPT's", dtype);
  TDDP_CHECK(profile_ops >= 0 && (profile_trace.empty() || profile_ops > 0),
             "profile_ops={} must not be negative, and profile_trace needs profile_ops", profile_ops);
  TDDP_CHECK(!cuda_graph || device != "cpu", "cuda_graph=True captures the iteration on a GPU: pass --device=cuda");
  TDDP_CHECK(!cuda_graph || !deterministic,
             "cuda_graph=True does not take deterministic=True (the iteration it captures reduces nothing across "
             "ranks)");
}

namespace {

// get_batch: batch_size offsets from torch.randint on the default generator, the windows at
// them as inputs, the same shifted by one as targets.
struct Batches {
  const NanoGptDataset& data;
  int64_t block, batch;
  t::Device device;

  std::pair<Tensor, Tensor> get(bool train) const {
    const TokenFile& file = train ? *data.train : *data.val;
    const std::vector<int64_t> offsets = t::randint(file.size() - block, {batch}).to_vector<int64_t>();
    std::vector<int64_t> x(static_cast<size_t>(batch * block)), y(x.size());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < block; ++j) {
        x[static_cast<size_t>(b * block + j)] = file[offsets[static_cast<size_t>(b)] + j];
        y[static_cast<size_t>(b * block + j)] = file[offsets[static_cast<size_t>(b)] + j + 1];
      }
    }
    return {t::from_vector<int64_t>(x, t::Shape{batch, block}).to(device),
            t::from_vector<int64_t>(y, t::Shape{batch, block}).to(device)};
  }
};

// estimate_loss: eval_iters batches of each split in eval mode, their float32 losses averaged.
std::pair<float, float> estimate_loss(nn::GPT& model, const Batches& batches, int64_t eval_iters) {
  t::NoGradGuard no_grad;
  model.eval();
  float means[2];
  for (int split = 0; split < 2; ++split) {
    std::vector<float> losses;
    for (int64_t k = 0; k < eval_iters; ++k) {
      const auto [x, y] = batches.get(split == 0);
      losses.push_back(model(x, y)[1].item<float>());
    }
    means[split] = t::mean(t::from_vector<float>(losses, t::Shape{eval_iters})).item<float>();
  }
  model.train();
  return {means[0], means[1]};
}

nn::GPTConfig model_config(const NanoGptConfig& config, int64_t vocab_size) {
  nn::GPTConfig c;
  c.n_layer = config.n_layer;
  c.n_head = config.n_head;
  c.n_embd = config.n_embd;
  c.block_size = config.block_size;
  c.vocab_size = vocab_size;
  c.dropout = config.dropout;
  c.bias = config.bias;
  return c;
}

// An evaluation iteration: rank 0's estimate_loss and its line, then the checkpoint, which every
// rank joins (rank 0 alone knows the val loss; each rank saves its generator and batch).
void evaluate(const NanoGptConfig& config, int64_t iter, int rank, comm::ProcessGroup* pg, t::Device device,
              nn::GPT& model, nn::Optimizer& optimizer, const Batches& batches, NanoGptState& state,
              NanoGptResult& result, std::ostream& out) {
  bool save = false;
  if (rank == 0) {
    const auto [train_loss, val_loss] = estimate_loss(model, batches, config.eval_iters);
    result.train_evals.push_back(train_loss);
    result.val_evals.push_back(val_loss);
    out << fmt::format("step {}: train loss {:.4f}, val loss {:.4f}\n", iter, train_loss, val_loss);
    if (val_loss < state.best_val_loss || config.always_save_checkpoint) {
      state.best_val_loss = val_loss;
      save = iter > 0;
    }
  } else if (config.deterministic) {
    // One process's stream on every rank: the draws rank 0's estimate_loss made.
    for (int64_t k = 0; k < 2 * config.eval_iters; ++k) batches.get(k < config.eval_iters);
  }
  if (pg != nullptr) save = comm::broadcast_ints(*pg, device, {save ? 1 : 0}, 0)[0] != 0;
  if (save) {
    if (rank == 0) out << fmt::format("saving checkpoint to {}\n", config.out_dir);
    state.iter = iter;
    save_nanogpt_state(config, rank, pg != nullptr ? pg->size() : 1, model, optimizer, state);
  }
}

// What the loop runs on.
struct Run {
  Placement placement;
  std::shared_ptr<comm::ProcessGroup> pg;
  int rank = 0, world = 1;
  int64_t micro_steps = 1;  // this rank's share of gradient_accumulation_steps
  std::unique_ptr<NanoGptDataset> data;
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<nn::AdamW> optimizer;
  std::shared_ptr<ddp::DistributedDataParallel> ddp;
  bool exact = false;  // deterministic=True: ddp has the deterministic option
  struct Graphed {     // cuda_graph=True: the captured iteration and its inputs and loss
    t::cuda::CudaGraph graph;
    Tensor x, y, loss;  // x, y: [micro-steps, batch_size, block_size]
  };
  std::unique_ptr<Graphed> graphed;
};

// train.py up to its loop: the ranks, the seed, the data, the model, AdamW, DDP.
Run set_up(const NanoGptConfig& config, std::ostream& out) {
  use_threads(config.threads);
  Run run;
  run.placement = choose_placement(config.device, config.backend);
  if (run.placement.on_gpu) t::cuda::set_allow_tf32(true);  // as nanoGPT's train.py
  TDDP_CHECK(!run.placement.on_gpu || config.dtype != "float16",
             "dtype=float16 on a GPU needs nanoGPT's GradScaler, which this mode lacks so far: use bfloat16");
  if (config.cuda_graph) {  // before joining the ranks: one process only
    check_graph_placement(run.placement, "cuda_graph=True", "iteration", /*collectives=*/false);
    run.graphed = std::make_unique<Run::Graphed>();
  }
  run.pg = join_ranks(run.placement.backend, config.timeout_s);
  run.rank = run.pg ? run.pg->rank() : 0;
  run.world = run.pg ? run.pg->size() : 1;
  TDDP_CHECK(config.gradient_accumulation_steps % run.world == 0,
             "gradient_accumulation_steps={} is not divisible by the {} ranks: each rank runs an equal share",
             config.gradient_accumulation_steps, run.world);
  run.micro_steps = config.gradient_accumulation_steps / run.world;
  if (run.rank == 0) {
    out << fmt::format("tokens per iteration will be: {}\n",
                       run.micro_steps * run.world * config.batch_size * config.block_size);
    std::filesystem::create_directories(config.out_dir);
  }
  // nanoGPT's seed_offset (the rank); deterministic=True: one process's stream on every rank.
  t::manual_seed(config.seed + static_cast<uint64_t>(config.deterministic ? 0 : run.rank));
  run.data =
      std::make_unique<NanoGptDataset>(open_dataset(dataset_dir(config.dataset), config.block_size, config.vocab_size));
  if (run.data->vocab) {
    out << fmt::format("found vocab_size = {} (inside {}/meta.pkl)\n", run.data->vocab_size, run.data->dir);
  }
  run.model = std::make_shared<nn::GPT>(model_config(config, run.data->vocab_size));
  run.model->to(run.placement.device);
  const bool capturable = config.capturable || config.cuda_graph;
  run.optimizer = std::make_unique<nn::AdamW>(
      nn::weight_decay_groups(*run.model, config.weight_decay),
      nn::AdamOptions(config.learning_rate).betas(config.beta1, config.beta2).capturable(capturable));
  for (size_t g = 0; capturable && g < run.optimizer->num_param_groups(); ++g) {  // set_lr fills them
    run.optimizer->set_lr_tensor(g, t::scalar_tensor(config.learning_rate, t::kFloat32).to(run.placement.device));
  }
  run.exact = config.deterministic;
  if (run.exact) {
    // Each micro-batch of batch_size windows is a chunk; a single process gets a world of one.
    run.ddp = deterministic_ddp(run.model, run.pg, config.batch_size);
  } else if (run.pg) {
    run.ddp = std::make_shared<ddp::DistributedDataParallel>(run.model, run.pg);
  }
  return run;
}

// deterministic=True: the iteration's gradient_accumulation_steps micro-batches, drawn in one
// process's order (the batch in hand, the rest, then the next iteration's first), as one
// global batch whose chunks DDP's deterministic option runs on the ranks and sums exactly.
// Returns the mean loss over all of them (float64).
Tensor exact_iteration(const NanoGptConfig& config, Run& run, const Batches& batches, NanoGptState& state) {
  std::vector<Tensor> xs{state.x}, ys{state.y};
  for (int64_t k = 1; k < config.gradient_accumulation_steps; ++k) {
    auto [x, y] = batches.get(true);
    xs.push_back(x);
    ys.push_back(y);
  }
  std::tie(state.x, state.y) = batches.get(true);
  ddp::DistributedDataParallel& model = *run.ddp;
  const Tensor loss = exact_step(model, Batch{t::cat(xs), t::cat(ys)},
                                 [&](const Tensor& x, const Tensor& y) { return model(x, y)[1]; });
  save_grids(model, state.metadata);  // what a checkpoint of the next evaluation carries
  return loss;
}

// One iteration's micro-steps: the forward (under nanoGPT's context: autocast on a GPU, on the
// CPU float32 for every dtype), the loss over the count, the next batch (drawn before the
// backward, as nanoGPT's), the backward; DDP reduces on the last micro-step only (nanoGPT's
// require_backward_grad_sync). Returns the last micro-step's loss.
Tensor micro_steps(const NanoGptConfig& config, Run& run, const Batches& batches, NanoGptState& state) {
  if (run.exact) return exact_iteration(config, run, batches, state);
  nn::Module& forward = run.ddp ? static_cast<nn::Module&>(*run.ddp) : static_cast<nn::Module&>(*run.model);
  Tensor loss;
  for (int64_t micro = 0; micro < run.micro_steps; ++micro) {
    std::optional<ddp::DistributedDataParallel::NoSyncGuard> no_sync;
    if (run.ddp && micro + 1 < run.micro_steps) no_sync.emplace(*run.ddp);
    {
      std::optional<t::Autocast> autocast;
      if (run.placement.on_gpu && config.dtype == "bfloat16") autocast.emplace(t::DeviceType::kCUDA, t::kBFloat16);
      loss = t::div(forward(state.x, state.y)[1], static_cast<double>(run.micro_steps));
    }
    std::tie(state.x, state.y) = batches.get(true);
    loss.backward();
  }
  return loss;
}

// One iteration's micro-steps, clipping and AdamW's step; zero_grad(true) after the step, as
// nanoGPT's. cuda_graph=True: from the fourth iteration on, the same work captured once and
// replayed: the iteration's batches are drawn first, in micro_steps' order (the one in hand, then
// one per micro-step, the last kept for the next iteration), and copied into the graph's
// inputs; with dropout the replay then draws its masks' keys (eagerly they come between the
// batches: other masks, as likely). The graph's first backward writes the
// gradients (none at the capture), so they are not zeroed after a replay. Returns the last
// micro-step's loss (divided by the count).
Tensor run_iteration(const NanoGptConfig& config, Run& run, const std::vector<Tensor>& params, const Batches& batches,
                     NanoGptState& state, int64_t done) {
  constexpr int64_t kEagerIterations = 3;
  if (!run.graphed || done < kEagerIterations) {
    const Tensor loss = micro_steps(config, run, batches, state);
    if (config.grad_clip != 0.0) nn::clip_grad_norm_(params, config.grad_clip);
    run.optimizer->step();
    run.optimizer->zero_grad(true);
    return loss;
  }
  std::vector<Tensor> xs{state.x}, ys{state.y};
  for (int64_t micro = 0; micro < run.micro_steps; ++micro) {
    std::tie(state.x, state.y) = batches.get(true);
    if (micro + 1 < run.micro_steps) {
      xs.push_back(state.x);
      ys.push_back(state.y);
    }
  }
  Run::Graphed& g = *run.graphed;
  if (g.graph.captured()) {
    g.x.copy_(t::stack(xs));
    g.y.copy_(t::stack(ys));
  } else {
    g.x = t::stack(xs);
    g.y = t::stack(ys);
    g.graph.capture_begin(run.placement.device.index);
    for (int64_t micro = 0; micro < run.micro_steps; ++micro) {
      std::optional<t::Autocast> autocast;
      if (config.dtype == "bfloat16") autocast.emplace(t::DeviceType::kCUDA, t::kBFloat16);
      g.loss =
          t::div((*run.model)(g.x.select(0, micro), g.y.select(0, micro))[1], static_cast<double>(run.micro_steps));
      autocast.reset();
      g.loss.backward();
    }
    if (config.grad_clip != 0.0) nn::clip_grad_norm_(params, config.grad_clip);
    run.optimizer->step();
    g.graph.capture_end();  // nothing ran yet: the replay below runs this iteration
  }
  g.graph.replay();
  return g.loss;
}

// The ranks agreed to stop before `iter`'s micro-steps (its evaluation is done): every rank
// saves its part of the state there, as evaluate() does, and rank 0 says so.
void stop_for_requeue(const NanoGptConfig& config, int64_t iter, int signo, Run& run, NanoGptState& state,
                      NanoGptResult& result, std::ostream& out) {
  state.iter = iter;
  save_nanogpt_state(config, run.rank, run.world, *run.model, *run.optimizer, state);
  if (run.rank == 0) {
    out << stop_message(signo, fmt::format("before iteration {} of {}", iter, config.max_iters),
                        checkpoint_path(config.out_dir), "--init_from=resume")
        << "\n";
  }
  result.stopped_before = iter;
}

}  // namespace

NanoGptResult train_nanogpt(const NanoGptConfig& given, std::ostream& out) {
  given.validate();
  NanoGptConfig config = given;
  const bool resume = config.init_from == "resume";
  if (resume) use_checkpoint_model_args(config);  // the checkpoint's shape, as nanoGPT's resume
  Run run = set_up(config, out);
  const bool master = run.rank == 0;
  nn::AdamW& optimizer = *run.optimizer;
  const std::vector<Tensor> params = run.model->parameters();
  const Batches batches{*run.data, config.block_size, config.batch_size, run.placement.device};
  NanoGptResult result;
  NanoGptState state;
  if (resume) {
    state = resume_nanogpt_state(config, run.rank, run.world, *run.model, optimizer, run.placement.device);
    if (run.exact) load_grids(state.metadata, *run.ddp);
    out << fmt::format("resuming training from {} at iteration {}\n", config.out_dir, state.iter);
    if (state.fresh_streams_from_world != 0) {  // the world changed: every rank draws anew
      out << fmt::format(
          "the checkpoint was written by {} rank(s), this run has {}: each rank starts a fresh data "
          "stream (seed + rank)\n",
          state.fresh_streams_from_world, run.world);
      t::manual_seed(config.seed + static_cast<uint64_t>(run.rank));
      std::tie(state.x, state.y) = batches.get(true);
    }
  } else {
    std::tie(state.x, state.y) = batches.get(true);  // the very first batch
  }
  const int64_t first_iter = state.iter;
  const double peak = master ? peak_flops(run.placement, config.dtype, out) : 0.0;
  StopSignals signals;  // SIGUSR1 and SIGTERM stop the run with a checkpoint (preemption.h)
  bool stop = false;
  double running_mfu = -1.0;
  OpProfileWindow op_profile(first_iter, config.max_iters + 1, config.profile_ops, config.profile_trace, run.rank);
  if (config.report_memory) reset_memory_peaks(run.placement);  // the iterations', not construction's
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t iter = first_iter;; ++iter) {
    const double lr = config.decay_lr ? nn::NanoGptLR::at(iter, config.learning_rate, config.warmup_iters,
                                                          config.lr_decay_iters, config.min_lr)
                                      : config.learning_rate;
    for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(g, lr);
    // A resumed run starts after its first iteration's evaluation: the checkpoint was saved there.
    if (iter % config.eval_interval == 0 && !(resume && iter == first_iter)) {
      evaluate(config, iter, run.rank, run.pg.get(), run.placement.device, *run.model, optimizer, batches, state,
               result, out);
    }
    if (iter == 0 && config.eval_only) break;
    if (stop) {
      stop_for_requeue(config, iter, signals.received(), run, state, result, out);
      break;
    }
    op_profile.begin_step(iter);
    const Tensor loss = run_iteration(config, run, params, batches, state, iter - first_iter);
    stop = any_rank_stopping(run.pg.get(), run.placement.device, signals);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    if (iter % config.log_interval == 0 && master) {
      const double lossf = run.exact ? loss.item<double>()  // the iteration's mean, exact
                                     : static_cast<double>(loss.item<float>()) * static_cast<double>(run.micro_steps);
      result.iter_losses.push_back(lossf);
      if (iter - first_iter >= 5 && peak > 0) {  // let the loop settle, as nanoGPT's
        const double mfu = flops_per_iteration(*run.model, config.batch_size * run.micro_steps) / dt / peak;
        running_mfu = running_mfu < 0 ? mfu : 0.9 * running_mfu + 0.1 * mfu;
      }
      out << fmt::format("iter {}: loss {:.4f}, time {:.2f}ms", iter, lossf, dt * 1000)
          << (peak > 0 ? fmt::format(", mfu {:.2f}%", running_mfu * 100) : "") << "\n"
          << std::flush;
    }
    op_profile.end_step(iter, out);
    result.iterations = iter + 1;
    if (iter + 1 > config.max_iters) break;
  }
  if (config.report_memory && master) report_memory_peak(run.placement, out);
  if (run.exact && master && run.ddp->exact_sum() != nullptr) {
    out << fmt::format("deterministic: {} chunks of {} windows an iteration, exact sums, {} iteration(s) run twice\n",
                       config.gradient_accumulation_steps, config.batch_size, run.ddp->exact_sum()->reruns());
  } else if (run.ddp && master && !run.exact) {
    report_reductions(*run.ddp, (result.iterations - first_iter) * run.micro_steps, out);
  }
  return result;
}

}  // namespace tinyddp::examples
