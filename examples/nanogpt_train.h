// train_gpt's nanoGPT mode: nanoGPT's train.py, its keys, its loop and its random draws, on
// nanoGPT's data files (nanogpt_data.h). With the same data directory, settings and seed it
// prints the same `step N: train loss X, val loss Y` and `iter N: loss X` lines as train.py run
// with device='cpu' compile=False dtype='float32' (tests/examples/nanogpt_train_test.cc):
//   torch.manual_seed(1337 + rank); the model's initialisation; the first batch; then each
//   iteration: its rate (get_lr: nn::NanoGptLR::at), on rank 0 every eval_interval
//   iterations estimate_loss (eval_iters train, then val batches), then per micro-step the
//   forward, the next batch, the backward (DDP reduces on the last micro-step only), then
//   clipping and AdamW's step; iterations 0 to max_iters.
// get_batch draws torch.randint(len(data) - block_size, (batch_size,)) from the default
// generator and stacks the windows at those offsets.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tinyddp::examples {

// nanoGPT's config keys with train.py's defaults, except where a CPU-only machine needs
// another (device) and where tinyddp has its own (backend auto, threads).
struct NanoGptConfig {
  // I/O
  std::string out_dir = "out";
  int64_t eval_interval = 2000, log_interval = 1, eval_iters = 200;
  bool eval_only = false, always_save_checkpoint = true;
  std::string init_from = "scratch";  // or resume: out_dir's checkpoint (nanogpt_checkpoint.h)
  // data: a directory, or a name under data/ as nanoGPT's data/<dataset>
  std::string dataset = "openwebtext";
  int64_t gradient_accumulation_steps = 5 * 8, batch_size = 12, block_size = 1024;
  int64_t vocab_size = 0;  // without meta.pkl: nanoGPT's 50304 unless given
  // model
  int64_t n_layer = 12, n_head = 12, n_embd = 768;
  double dropout = 0.0;
  bool bias = false;
  // AdamW and its schedule
  double learning_rate = 6e-4;
  int64_t max_iters = 600000;
  double weight_decay = 1e-1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0;
  bool decay_lr = true;
  int64_t warmup_iters = 2000, lr_decay_iters = 600000;
  double min_lr = 6e-5;
  // system
  // dtype: on a GPU, bfloat16 runs the forward under autocast; on the CPU every dtype computes
  // in float32, as nanoGPT's (its CPU context is a nullcontext).
  std::string backend = "auto", device = "cpu", dtype = "float32";
  double timeout_s = 60;
  int threads = 0;
  uint64_t seed = 1337;  // each rank seeds its generator with seed + rank (nanoGPT: 1337 + seed_offset)
  // tinyddp's own key: DDP's deterministic option, the same bits on any world size. Every rank
  // draws one process's batches (seed, not seed + rank), and each iteration's
  // gradient_accumulation_steps micro-batches are its chunks, summed exactly; `iter` lines
  // print the iteration's mean loss over all of them. Resumes on any world size.
  bool deterministic = false;
  // tinyddp's own keys: the op profiler over profile_ops iterations after the first, its table
  // printed by rank 0, each rank's Chrome trace written to profile_trace (examples/op_profile.h).
  int64_t profile_ops = 0;
  std::string profile_trace;
  // tinyddp's own keys, on one GPU: capturable, AdamW's step count and rate as tensors on the
  // device (torch's capturable=True, param_group["lr"] a tensor); cuda_graph (implies capturable),
  // three iterations eagerly, then the fourth's micro-steps, clipping and AdamW captured in a
  // CUDA graph and each later iteration one replay (its batches copied into the graph's inputs;
  // the same draws in the same order). With dropout each replay draws its masks' keys after the
  // iteration's batches, so its masks are not the eager iteration's, which draws batches between
  // micro-steps. Not with deterministic or more than one rank.
  bool capturable = false, cuda_graph = false;
  // tinyddp's own key: rank 0 prints the peak tensor memory of the iterations at the end (on a
  // GPU the caching allocator's, as torch.cuda.max_memory_allocated; on the CPU the tensors').
  bool report_memory = false;

  // Throws tinyddp::Error naming the first key out of range.
  void validate() const;
};

struct NanoGptResult {
  std::vector<double> iter_losses;             // rank 0's printed `iter N: loss` values, by iteration
  std::vector<double> train_evals, val_evals;  // estimate_loss at each eval
  int64_t iterations = 0;
  // The iteration the ranks stopped before for a requeue (a signal, examples/preemption.h; the
  // checkpoint in out_dir is written there), or -1: the run went to the end.
  int64_t stopped_before = -1;
};

NanoGptResult train_nanogpt(const NanoGptConfig& config, std::ostream& log);

// train_gpt's command line in nanoGPT's form: `--key=value` (or `--key value`), and config
// files of `key = literal` lines wherever they stand, applied in order as nanoGPT's
// configurator.py does (anything else in a file is an error naming its line). Returns the
// exit status.
int nanogpt_main(int argc, char** argv);

// Whether a command line asks for the nanoGPT mode: a config file first, or --dataset.
bool wants_nanogpt_mode(int argc, char** argv);

// The options that name the same thing differently in the two modes (the replay mode's
// --lr is nanoGPT's --learning_rate, with the differences in `note`), for the errors below
// and docs/nn.md's table.
struct ModeFlag {
  const char* replay;   // train_gpt's own option, without --
  const char* nanogpt;  // nanoGPT's key
  const char* note;     // how the two differ
};
const std::vector<ModeFlag>& mode_flags();

// Throws naming the option of the other mode in `args` (options as typed, `--key` or
// `--key=value`) and its counterpart in this one, e.g. --learning_rate without --dataset:
// a run would otherwise stop at "not expected" with no hint of the other mode.
void check_flags_of_mode(const std::vector<std::string>& args, bool nanogpt_mode);

}  // namespace tinyddp::examples
