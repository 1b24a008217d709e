// The training loop behind //examples:train, as a library so that tests can run it with
// fixture weights and data: model and data setup (train_data.h), the step loop, progress
// lines, metrics CSV, DDP's statistics and timeline, and the final checkpoint. Launched with
// WORLD_SIZE > 1 (RANK, MASTER_ADDR, MASTER_PORT as torchrun sets them), it trains
// data-parallel: the model is wrapped in DistributedDataParallel and rank r of W takes its
// share of each global batch (train_data.h), so that the result equals a one-process
// run on the same data. On GPUs (--device cuda, or auto with a GPU present) rank r uses
// cuda:LOCAL_RANK; the model is initialised and the data drawn on the CPU, so the numbers are
// the same on every device.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tinyddp::examples {

// examples/train's command-line values (a Config: a plain struct CLI11 fills, checked by validate()).
struct TrainConfig {
  std::string model = "mlp";          // mlp | toy | cnn (digits_cnn() below)
  std::string dataset = "synthetic";  // synthetic | digits (ignored with `data`)
  std::string digits;                 // the digits file; empty: default_digits_path()
  std::vector<int64_t> widths;        // mlp only; empty: 784,256,10 (synthetic), 64,128,10 (digits)
  std::string loss;                   // mse | ce; empty: mse for toy, ce for mlp and cnn
  double dropout = 0.25;              // cnn: the Dropout layer's p (0: none)
  bool sync_bn = false;               // cnn under DDP: SyncBatchNorm in place of BatchNorm2d
  bool fsdp = false;                  // fully_shard (each layer a unit) in place of DDP
  std::string optimizer = "sgd";      // sgd | adam
  std::string autocast;               // "" (float32) | bf16: forward and loss under tensor::Autocast
  double lr = 0.1;
  double momentum = 0;
  int64_t steps = 100;
  uint64_t seed = 0;
  int64_t batch = 0;  // the global batch (not with `data`); 0: 20 for toy, 64 for mlp
  // Adding ranks with the per-rank batch fixed: the global batch is batch_per_rank x W (not
  // with `batch` or `data`). scale_lr: the rate is lr x W (the linear scaling rule, Goyal et
  // al. 2017), so `lr` is the rate of one rank's batch.
  int64_t batch_per_rank = 0;
  bool scale_lr = false;
  // float32 | float64: the parameters, the inputs and the arithmetic (float64 shows that the
  // ranks' curves part only by rounding: docs/ddp.md, "One curve on 1, 2 and 4 processes").
  std::string dtype = "float32";
  // The same bits at any world size (train_exact.h): the global batch in chunks of chunk_size
  // rows, each chunk's gradient added exactly; every rank reads the whole global batch.
  bool deterministic = false;
  int64_t chunk_size = 16;
  std::string init;  // safetensors state dict to start from
  // safetensors with "inputs" [steps, batch, in] ([steps, batch, 1, 8, 8] for cnn) and "targets"
  std::string data;
  std::string save;             // where to write the final state dict
  std::string metrics;          // CSV "step,loss" (loss before that step's update)
  int64_t log_every = 0;        // 0: about ten progress lines
  std::string device = "auto";  // auto | cpu | cuda (auto: CUDA when built with it and a GPU is present)
  // auto | gloo | nccl (auto: nccl on GPUs when each local rank has one, else gloo)
  std::string backend = "auto";
  // DDP's bucket sizes (PyTorch's defaults) and its timeline (or, with --fsdp, the units'):
  // each rank writes "<timeline>.rank<r>.json", on a clock shared by all ranks
  // (scripts/merge_timelines.py).
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  // DDP walks the graph from the outputs every iteration to find the parameters the forward did
  // not use (PyTorch's option; it warns once when it finds none, as PyTorch does).
  bool find_unused_parameters = false;
  std::string timeline;
  bool stats = false;  // print DDP's statistics (DDPStats) at the end
  // How DDP reduces each bucket: allreduce (DDP's default), fp16, bf16 or powersgd (rank
  // powersgd_rank, plain allreduce for the first powersgd_start_iter iterations); sum and
  // none are wrong on purpose (run_env.h).
  std::string comm_hook = "allreduce";
  // Fault tolerance: rank 0 writes the model, the optimizer state and the step count to
  // `checkpoint` every checkpoint_every steps (and at the end); with `resume`, a run whose
  // checkpoint exists continues from it (the same batches, so the same result as a run that
  // was never interrupted). fail_at_step: exit with status 3 before step N on the first
  // attempt (TINYDDP_RESTART_COUNT unset or 0), to try launch --max_restarts.
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  bool resume = false;
  int64_t fail_at_step = -1;
  // How long a collective or the store waits for the other ranks before failing, naming them.
  double timeout_s = 60;
  int threads = 0;  // intra-op threads per process (tensor::set_num_threads); 0: the default
  int powersgd_rank = 1;
  int64_t powersgd_start_iter = 1000;

  // Throws tinyddp::Error naming the first option that is out of range or unknown (the one
  // place the options are checked; train() calls it first).
  void validate() const;

  // What the options mean once the defaults are filled in (train_config.cc).
  std::string loss_used() const;          // mse for toy, ce otherwise, unless --loss says
  bool classification() const;            // the ce loss: int64 class targets, accuracies
  bool uses_digits() const;               // --dataset digits (and no --data)
  int64_t global_batch(int world) const;  // --batch, --batch_per_rank x W, or the model's default
  double lr_on(int world) const;          // --lr, times W with --scale_lr
};

struct TrainResult {
  std::vector<double> losses;     // one per step, before the update (the mean over ranks)
  double accuracy = -1;           // cross-entropy only: last batch, before the last update
  double held_out_accuracy = -1;  // cross-entropy: samples kept out of training, after training
  double seconds = 0;
  int64_t samples = 0;
  // The steps done when the ranks stopped for a requeue (SIGUSR1 or SIGTERM with --checkpoint:
  // preemption.h), or -1 when the run ended.
  int64_t stopped_after = -1;
};

// Runs the training described by `config`, printing progress to `log`. Throws
// tinyddp::Error with a clear message for bad configurations, files or data.
TrainResult train(const TrainConfig& config, std::ostream& log);

}  // namespace tinyddp::examples
