// //examples:train: training an MLP classifier (default) or the DDP tutorial's ToyModel, from the
// command line (CLI11), on synthetic data by default or on real handwritten digits
// (--dataset digits). Alone it trains on one process; under
// the launcher it trains data-parallel with DDP:
//   bazel run -c opt //examples:train -- --steps 100
//   launch --nproc_per_node 2 -- bazel-bin/examples/train --steps 100
#include <CLI/CLI.hpp>
#include <iostream>

#include "examples/preemption.h"
#include "examples/train_lib.h"
#include "tinyddp/base/error.h"

namespace {

// The model, the data and the optimization.
void add_training_options(CLI::App& app, tinyddp::examples::TrainConfig& config) {
  app.add_option("--model", config.model,
                 "mlp (default: a classifier, widths 784,256,10), toy (the DDP tutorial's ToyModel) or cnn (two "
                 "Conv2d-BatchNorm2d-ReLU-MaxPool2d blocks, Dropout, Linear: for --dataset digits)");
  app.add_option("--dataset", config.dataset,
                 "synthetic (default) or digits (the 8x8 handwritten digits of python3-sklearn: 1500 for training, 297 "
                 "held out)");
  app.add_option("--digits", config.digits,
                 "the digits file (default: python3-sklearn's digits.csv.gz, or $TINYDDP_DIGITS)");
  app.add_option("--widths", config.widths, "layer widths of the mlp (default 784,256,10; digits: 64,128,10)")
      ->delimiter(',');
  app.add_option("--loss", config.loss, "mse or ce (default: mse for toy, ce for mlp and cnn)");
  app.add_option("--dropout", config.dropout, "the cnn's dropout probability (default 0.25; 0 turns it off)");
  app.add_flag("--fsdp", config.fsdp,
               "under a launcher: fully sharded data parallelism (ddp::fully_shard, each layer a unit) in place of "
               "DDP");
  app.add_flag("--sync_bn", config.sync_bn,
               "cnn under DDP: SyncBatchNorm (statistics of the global batch) in place of BatchNorm2d");
  app.add_option("--optimizer", config.optimizer, "sgd or adam");
  app.add_option("--autocast", config.autocast,
                 "bf16: forward and loss under autocast (bfloat16 matmuls, float32 master weights)");
  app.add_option("--lr", config.lr, "learning rate (default 0.1)");
  app.add_option("--momentum", config.momentum, "SGD momentum");
  app.add_option("--steps", config.steps, "number of training steps");
  app.add_option("--seed", config.seed, "seed for the initial weights and the synthetic data");
  app.add_option("--batch", config.batch, "global batch size, split over the ranks (default 20 toy, 64 mlp)");
  app.add_option("--batch_per_rank", config.batch_per_rank,
                 "each rank's batch instead: the global batch grows with the ranks (not with --batch)");
  app.add_flag("--scale_lr", config.scale_lr,
               "multiply --lr by the number of ranks (the linear scaling rule, for --batch_per_rank)");
  app.add_flag("--deterministic", config.deterministic,
               "the same bits on any number of ranks: the global batch in chunks of --chunk_size rows, their "
               "gradients summed exactly (fixed point, integer allreduce); a BatchNorm normalises per chunk");
  app.add_option("--chunk_size", config.chunk_size, "rows per chunk with --deterministic (default 16)");
  app.add_option("--dtype", config.dtype,
                 "float32 (default) or float64: the parameters, inputs and arithmetic (float64 shows that 1, 2 and 4 "
                 "ranks differ only by rounding)");
  app.add_option("--init", config.init, "safetensors state dict with the initial weights");
  app.add_option("--data", config.data, "safetensors file with 'inputs' and 'targets' batches");
  app.add_option("--save", config.save, "write the final state dict here (safetensors)");
  app.add_option("--metrics", config.metrics, "write a CSV with one row per step (step,loss)");
  app.add_option("--log_every", config.log_every, "print progress every N steps (default: about ten lines)");
}

// Where and how the run goes: devices, DDP, checkpoints, faults, threads, statistics.
void add_run_options(CLI::App& app, tinyddp::examples::TrainConfig& config) {
  app.add_option("--device", config.device, "auto, cpu or cuda (auto: CUDA when built with it and a GPU is present)");
  app.add_option("--backend", config.backend,
                 "auto, gloo or nccl: the process group when launched on several ranks (auto: nccl on GPUs when every "
                 "local rank has its own, else gloo)");
  app.add_option("--bucket_cap_mb", config.bucket_cap_mb, "DDP bucket size in MiB (default 25)");
  app.add_option("--first_bucket_cap_mb", config.first_bucket_cap_mb, "DDP's first bucket size in MiB (default 1)");
  app.add_flag("--find_unused_parameters", config.find_unused_parameters,
               "DDP looks for parameters the forward did not use, every iteration (PyTorch's option: it warns once "
               "when there are none, since the search costs time)");
  app.add_option("--timeline", config.timeline,
                 "write DDP's (or --fsdp's) events of each rank to PATH.rank<r>.json (Chrome trace; merge with "
                 "scripts/merge_timelines.py)");
  app.add_option(
      "--comm_hook", config.comm_hook,
      "how DDP reduces gradients: allreduce (default), fp16, bf16 or powersgd; sum or none are wrong on purpose "
      "(the ranks' gradients added, or not sent at all), to show what averaging does");
  app.add_option("--powersgd_rank", config.powersgd_rank, "PowerSGD's matrix_approximation_rank (default 1)");
  app.add_option("--powersgd_start_iter", config.powersgd_start_iter,
                 "PowerSGD's start_powerSGD_iter: plain allreduce before it (default 1000, PyTorch's)");
  app.add_option(
      "--checkpoint", config.checkpoint,
      "rank 0 writes the model, optimizer state and step here (every --checkpoint_every steps, at the end, and "
      "when SIGUSR1 or SIGTERM stops the run: exit status 75, for a requeue)");
  app.add_option("--checkpoint_every", config.checkpoint_every, "steps between checkpoints (default: only at the end)");
  app.add_flag("--resume", config.resume,
               "continue from --checkpoint when it exists (e.g. after launch --max_restarts)");
  app.add_option("--fail_at_step", config.fail_at_step,
                 "exit with status 3 before this step on the first attempt (to try launch --max_restarts)");
  app.add_option("--timeout", config.timeout_s,
                 "seconds a collective or the store waits for the other ranks before failing (default 60)");
  app.add_option("--threads", config.threads,
                 "intra-op threads per process, as torch.set_num_threads (default: TINYDDP_NUM_THREADS, "
                 "OMP_NUM_THREADS, else the physical cores this process may use)");
  app.add_flag("--stats", config.stats,
               "print DDP's statistics at the end: buckets, rebuilt or not, compute, "
               "communication and overlap per iteration");
}

}  // namespace

int main(int argc, char** argv) {
  tinyddp::examples::TrainConfig config;
  CLI::App app{"Train a model with tinyddp (data-parallel when started by launch with WORLD_SIZE > 1)."};
  // An option given twice takes its last value (scripts/main.sh's defaults, then the user's).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_training_options(app, config);
  add_run_options(app, config);
  CLI11_PARSE(app, argc, argv);
  try {  // the values are checked once, by TrainConfig::validate (train_lib.h)
    const tinyddp::examples::TrainResult result = tinyddp::examples::train(config, std::cout);
    return result.stopped_after >= 0 ? tinyddp::kRequeueExitStatus : 0;
  } catch (const std::exception& e) {
    std::cerr << "train: error: " << e.what() << "\n";
    return 1;
  }
}
