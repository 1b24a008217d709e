// The training loop behind //examples:train_gpt, as a library so that tests can run it: a
// small GPT (nn::GPT, nanoGPT's model) trained on the characters of a text corpus
// (gpt_data.h), or on batches from a file (--data) to replay a PyTorch run, with AdamW over
// nanoGPT's weight-decay groups (or ZeroRedundancyOptimizer around it), gradient clipping
// after DDP's averaging, and linear warmup + cosine decay. Launched with WORLD_SIZE > 1 it
// trains data-parallel under DDP: each rank draws its own windows (corpus) or takes its share
// of each global batch (--data).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tinyddp::examples {

struct GPTTrainConfig {
  // The model (nanoGPT's GPTConfig). vocab_size 0: the corpus's vocabulary (required with data).
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64, vocab_size = 0;
  double dropout = 0.0;
  bool bias = true;
  // The text, or batches "inputs"/"targets" int64 [steps, batch, T] replayed from a file.
  std::string corpus;  // empty: kFortunesPath
  std::string data;
  int64_t batch = 32;  // the global batch in windows (corpus); split over the ranks
  // Micro-steps per step over all ranks, as nanoGPT's (0: one per rank). Each rank splits its
  // share of the step's rows into gradient_accumulation_steps / world micro-steps, in order,
  // divides each one's loss by that count and lets DDP reduce on the last one only (no_sync).
  int64_t gradient_accumulation_steps = 0;
  // The same bits at any world size (docs/ddp.md): the global batch in chunks of chunk_size
  // windows, each chunk's gradient added exactly (ddp::ExactGradientSum); every rank reads the
  // one-process batches. Not with dropout, ZeRO, fully_shard, a comm hook or accumulation steps.
  bool deterministic = false;
  int64_t chunk_size = 4;
  uint64_t seed = 1337;
  std::string init;  // a nanoGPT-named state dict (safetensors) to start from
  // AdamW (decay on weights of two or more dimensions), clipping (0: off) and the schedule:
  // lr * (s + 1) / warmup_steps while s < warmup_steps, then constant or cosine to min_lr.
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  int64_t warmup_steps = 100;
  std::string lr_schedule = "cosine";  // constant | cosine
  double min_lr = 1e-4;
  int64_t steps = 1000;
  // Validation loss every eval_every steps (0: at the end only) on eval_windows windows.
  int64_t eval_every = 250, eval_windows = 64;
  // The text sampled at the end (corpus only): sample_tokens after the prompt.
  int64_t sample_tokens = 300;
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 40;
  // Outputs: the final state dict, a CSV "step,loss,grad_norm,lr", progress every log_every.
  std::string save, metrics;
  int64_t log_every = 0;  // 0: about twenty lines
  // Checkpoints as examples/train's (with the scheduler's state), ZeRO, DDP's hook.
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  bool resume = false;
  int64_t fail_at_step = -1;  // exit with status 3 before this step on the first attempt (launch --max_restarts)
  bool zero = false;
  bool report_memory = false;    // every rank prints its peak resident memory over the steps
  bool profile_phases = false;   // rank 0 prints each step phase's median time (examples/step_phases.h)
  int64_t profile_ops = 0;       // the op profiler over this many steps after the first (examples/op_profile.h)
  std::string profile_trace;     // with profile_ops: each rank's Chrome trace of them
  bool fsdp = false;             // under a launcher: fully_shard (each Block a unit, then the root) in place of DDP
  std::string fsdp_param_dtype;  // --fsdp's mixed precision: "bfloat16" gathers, computes and reduces in it
  std::string comm_hook = "allreduce";
  std::string device = "cpu", backend = "auto";
  std::string autocast;     // "" (float32) | bf16: the forward and loss under tensor::Autocast
  bool tf32 = false;        // on a GPU: float32 products on TF32 tensor cores (default: full float32)
  bool capturable = false;  // AdamW's step count and rate on the device (as torch's capturable=True)
  bool cuda_graph = false;  // on a GPU: 3 eager steps, then each step one replay of a captured one
  double timeout_s = 60;
  int threads = 0;  // intra-op threads per process (tensor::set_num_threads); 0: the default

  // Throws tinyddp::Error naming the first option out of range (train_gpt() calls it first).
  void validate() const;
};

struct GPTTrainResult {
  std::vector<double> losses;  // per step (its micro-steps' divided losses summed), the mean over ranks
  double validation_loss = -1, bigram_loss = -1;  // corpus only: at the end
  std::string sample;                             // corpus only
  double seconds = 0, tokens_per_second = 0;
  int64_t optimizer_state_bytes = 0;  // this rank's Adam state (ZeRO: its shard's)
  // The steps done when the ranks stopped early for a requeue (a signal, examples/preemption.h;
  // the checkpoint is written there), or -1: the run went to the end.
  int64_t stopped_after = -1;
};

GPTTrainResult train_gpt(const GPTTrainConfig& config, std::ostream& log);

}  // namespace tinyddp::examples
