// //examples:train_gpt: a small GPT trained on the characters of the fortune-cookie files
// (Debian's fortunes package), alone or data-parallel under the launcher; it ends by printing
// text sampled from the model. Any run can be replayed in PyTorch: --init, --data and the
// optimisation options set everything (train_gpt_lib.h). Given --dataset or a config file,
// it is nanoGPT's train.py instead (nanogpt_train.h).
//   bazel run -c opt //examples:train_gpt -- --steps 500
//   launch --nproc_per_node 2 -- bazel-bin/examples/train_gpt --steps 500
#include <CLI/CLI.hpp>
#include <iostream>

#include "examples/nanogpt_train.h"
#include "examples/train_gpt_lib.h"
#include "tinyddp/base/error.h"
#include "tinyddp/base/exit_status.h"

namespace {

// The model, the data, the optimization and the run: every option but the device's.
void add_options(CLI::App& app, tinyddp::examples::GPTTrainConfig& c) {
  app.add_option("--n_layer", c.n_layer, "transformer blocks (default 4)");
  app.add_option("--n_head", c.n_head, "attention heads per block (default 4)");
  app.add_option("--n_embd", c.n_embd, "embedding width (default 128)");
  app.add_option("--block_size", c.block_size, "context length in tokens (default 64)");
  app.add_option("--vocab_size", c.vocab_size,
                 "vocabulary size (default: the corpus's characters; needed with --data)");
  app.add_option("--dropout", c.dropout, "dropout probability (default 0)");
  app.add_option("--bias", c.bias, "biases in the Linears and LayerNorms: true (default, as nanoGPT) or false");
  app.add_option("--corpus", c.corpus, "a text file or folder (default /usr/share/games/fortunes)");
  app.add_option("--data", c.data, "safetensors with int64 'inputs' and 'targets' [steps, batch, T] instead of text");
  app.add_option("--batch", c.batch, "global batch in windows, split over the ranks (default 32)");
  app.add_option("--gradient_accumulation_steps", c.gradient_accumulation_steps,
                 "micro-steps per step over all ranks, as nanoGPT's key (default: one per rank); each rank splits "
                 "its rows into count / WORLD_SIZE micro-steps and DDP reduces on the last one only");
  app.add_flag("--deterministic", c.deterministic,
               "the same bits on any number of ranks: the global batch in chunks of --chunk_size windows, their "
               "gradients summed exactly (fixed point, integer allreduce; with --fsdp, integer reduce-scatter)");
  app.add_option("--chunk_size", c.chunk_size, "windows per chunk with --deterministic (default 4)");
  app.add_option("--seed", c.seed, "seed of the weights, the split, the windows and the sample (default 1337)");
  app.add_option("--init", c.init, "a nanoGPT-named state dict (safetensors) to start from");
  app.add_option("--lr", c.lr, "peak learning rate of AdamW (default 1e-3)");
  app.add_option("--weight_decay", c.weight_decay, "AdamW's decay of weights with 2 or more dimensions (default 0.1)");
  app.add_option("--beta1", c.beta1, "AdamW's beta1 (default 0.9)");
  app.add_option("--beta2", c.beta2, "AdamW's beta2 (default 0.95)");
  app.add_option("--eps", c.eps, "AdamW's eps (default 1e-8)");
  app.add_option("--grad_clip", c.grad_clip, "clip the total gradient norm at this (default 1.0; 0: off)");
  app.add_option("--warmup_steps", c.warmup_steps, "steps of linear warmup (default 100)");
  app.add_option("--lr_schedule", c.lr_schedule, "after warmup: cosine (default, down to --min_lr) or constant");
  app.add_option("--min_lr", c.min_lr, "the cosine schedule's last rate (default 1e-4)");
  app.add_option("--steps", c.steps, "training steps (default 1000)");
  app.add_option("--autocast", c.autocast,
                 "bf16: forward and loss under autocast (bfloat16 matmuls, float32 master weights)");
  app.add_option("--eval_every", c.eval_every, "validation loss every N steps (default 250; 0: at the end only)");
  app.add_option("--eval_windows", c.eval_windows, "validation windows (default 64)");
  app.add_option("--sample_tokens", c.sample_tokens, "characters sampled at the end (default 300)");
  app.add_option("--prompt", c.prompt, "the text sampling starts from (default a newline)");
  app.add_option("--temperature", c.temperature, "sampling temperature, > 0 (default 0.8)");
  app.add_option("--top_k", c.top_k, "sample among the k most likely characters, k >= 1 (default 40)");
  app.add_option("--save", c.save, "write the final state dict here (safetensors, nanoGPT's names)");
  app.add_option("--metrics", c.metrics, "write a CSV with one row per step (step,loss,grad_norm,lr)");
  app.add_option("--log_every", c.log_every, "print progress every N steps (default: about twenty lines)");
  app.add_option("--checkpoint", c.checkpoint,
                 "rank 0 writes model, optimizer and schedule here; SIGUSR1 or SIGTERM then stops the run after a "
                 "step with a checkpoint and exit status 75 (a requeue, examples/slurm/train.sbatch)");
  app.add_option("--checkpoint_every", c.checkpoint_every, "steps between checkpoints (default: only at the end)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint when it exists");
  app.add_option("--fail_at_step", c.fail_at_step, "exit with status 3 before step N on the first attempt (tests)");
  app.add_flag("--zero", c.zero, "ZeroRedundancyOptimizer: each rank keeps Adam's state for its share only");
  app.add_flag("--report_memory", c.report_memory,
               "each rank prints its peak resident memory (Linux's VmHWM), tensor memory and, on a GPU, the caching "
               "allocator's peak");
  app.add_flag("--profile_phases", c.profile_phases, "print the median time of each part of a step (step_phases.h)");
  app.add_option("--profile_ops", c.profile_ops,
                 "profile N steps after the first: time per op and per kind of kernel (tensor/profiler.h)");
  app.add_option("--profile_trace", c.profile_trace, "with --profile_ops: write the profiled steps' Chrome trace here");
  app.add_flag("--fsdp", c.fsdp,
               "fully sharded data parallelism (ddp::fully_shard, each Block a unit) in place of DDP: parameters, "
               "gradients and Adam's state split over the ranks");
  app.add_option("--fsdp_param_dtype", c.fsdp_param_dtype,
                 "--fsdp's mixed precision: bfloat16 gathers, computes and reduce-scatters in it; float32 shards stay");
  app.add_option("--comm_hook", c.comm_hook,
                 "how DDP reduces: allreduce (default), fp16, bf16 or powersgd (sum or none: wrong on purpose)");
}

// Where the run goes: the device, the backend, the threads.
void add_device_options(CLI::App& app, tinyddp::examples::GPTTrainConfig& c) {
  app.add_option("--device", c.device, "cpu (default), cuda or auto");
  app.add_option("--backend", c.backend, "auto (default), gloo or nccl");
  app.add_flag("--capturable", c.capturable,
               "AdamW with capturable=True: its step count and rate are device tensors (what --cuda_graph uses)");
  app.add_flag("--cuda_graph", c.cuda_graph,
               "on a GPU (alone, or under DDP on nccl): three eager steps, then the whole step (forward, backward "
               "with DDP's allreduces, clipping, AdamW) captured in a CUDA graph and replayed each step");
  app.add_flag("--tf32", c.tf32, "on a GPU, float32 matrix products may use TF32 tensor cores (default: off)");
  app.add_option("--timeout", c.timeout_s, "seconds a collective waits for the other ranks (default 60)");
  app.add_option("--threads", c.threads,
                 "intra-op threads per process, as torch.set_num_threads (default: TINYDDP_NUM_THREADS, "
                 "OMP_NUM_THREADS, else the physical cores this process may use)");
}

}  // namespace

int main(int argc, char** argv) {
  // --dataset: nanoGPT's train.py, its keys and its data files (nanogpt_train.h).
  if (tinyddp::examples::wants_nanogpt_mode(argc, argv)) return tinyddp::examples::nanogpt_main(argc, argv);
  tinyddp::examples::GPTTrainConfig c;
  CLI::App app{
      "Train a small GPT on text with tinyddp (data-parallel when started by launch with WORLD_SIZE > 1).\n"
      "Given --dataset=DIR or a nanoGPT config file, it is nanoGPT's train.py instead, with nanoGPT's keys\n"
      "(--batch_size, --max_iters, --learning_rate, ...): `train_gpt --dataset=x --help` lists them."};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_options(app, c);
  add_device_options(app, c);
  try {
    tinyddp::examples::check_flags_of_mode(std::vector<std::string>(argv + 1, argv + argc), /*nanogpt_mode=*/false);
    CLI11_PARSE(app, argc, argv);
    const tinyddp::examples::GPTTrainResult result = tinyddp::examples::train_gpt(c, std::cout);
    return result.stopped_after >= 0 ? tinyddp::kRequeueExitStatus : 0;
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: error: " << e.what() << std::endl;
    return 1;
  }
}
