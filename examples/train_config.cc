// TrainConfig's checks and the values its options mean once the defaults are filled in
// (train_lib.h): the one place //examples:train's options are interpreted.
#include "examples/run_env.h"
#include "examples/train_lib.h"
#include "tinyddp/base/error.h"

namespace tinyddp::examples {

std::string TrainConfig::loss_used() const { return loss.empty() ? (model == "toy" ? "mse" : "ce") : loss; }
bool TrainConfig::classification() const { return loss_used() == "ce"; }
bool TrainConfig::uses_digits() const { return data.empty() && dataset == "digits"; }

int64_t TrainConfig::global_batch(int world) const {
  if (batch_per_rank > 0) return batch_per_rank * world;
  return batch > 0 ? batch : (model == "toy" ? 20 : 64);
}

double TrainConfig::lr_on(int world) const { return scale_lr ? lr * world : lr; }

void TrainConfig::validate() const {
  TDDP_CHECK(model == "toy" || model == "mlp" || model == "cnn", "--model must be toy, mlp or cnn, got '{}'", model);
  const std::string used = loss_used();
  TDDP_CHECK(used == "mse" || used == "ce", "--loss must be mse or ce, got '{}'", used);
  TDDP_CHECK(optimizer == "sgd" || optimizer == "adam", "--optimizer must be sgd or adam, got '{}'", optimizer);
  TDDP_CHECK(autocast.empty() || autocast == "bf16", "--autocast must be bf16 (or absent), got '{}'", autocast);
  TDDP_CHECK(steps >= 1, "--steps must be at least 1, got {}", steps);
  TDDP_CHECK(lr > 0, "--lr must be positive, got {}", lr);
  TDDP_CHECK(momentum >= 0, "--momentum must not be negative, got {}", momentum);
  TDDP_CHECK(batch >= 0, "--batch must be positive, got {}", batch);
  TDDP_CHECK(batch_per_rank >= 0, "--batch_per_rank must be positive, got {}", batch_per_rank);
  TDDP_CHECK(batch_per_rank == 0 || (batch == 0 && data.empty()),
             "--batch_per_rank sets the global batch (it times the world size): give it without --batch or --data");
  TDDP_CHECK(dtype == "float32" || dtype == "float64", "--dtype must be float32 or float64, got '{}'", dtype);
  TDDP_CHECK(dtype == "float32" || autocast.empty(), "--autocast bf16 keeps float32 master weights: drop --dtype {}",
             dtype);
  TDDP_CHECK(log_every >= 0, "--log_every must be positive, got {}", log_every);
  TDDP_CHECK(dataset == "synthetic" || dataset == "digits", "--dataset must be synthetic or digits, got '{}'", dataset);
  TDDP_CHECK(
      !uses_digits() || (model != "toy" && used == "ce"),
      "--dataset digits trains a classifier: use --model mlp or cnn with the ce loss (got --model {}, --loss {})",
      model, used);
  TDDP_CHECK(model != "cnn" || ((uses_digits() || !data.empty()) && used == "ce"),
             "--model cnn classifies 8x8 images: use it with --dataset digits or --data, and the ce loss (got "
             "--dataset {}, --loss {})",
             dataset, used);
  TDDP_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got {}", dropout);
  TDDP_CHECK(!sync_bn || model == "cnn",
             "--sync_bn applies to --model cnn (the only model with BatchNorm), got --model {}", model);
  TDDP_CHECK(bucket_cap_mb > 0 && first_bucket_cap_mb > 0,
             "--bucket_cap_mb and --first_bucket_cap_mb must be positive, got {} and {}", bucket_cap_mb,
             first_bucket_cap_mb);
  TDDP_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device must be auto, cpu or cuda, got '{}'",
             device);
  TDDP_CHECK(backend == "auto" || backend == "gloo" || backend == "nccl",
             "--backend must be auto, gloo or nccl, got '{}'", backend);
  TDDP_CHECK(timeout_s > 0, "--timeout must be positive, got {}", timeout_s);
  TDDP_CHECK(known_comm_hook(comm_hook), "--comm_hook must be {}, got '{}'", comm_hook_choices(), comm_hook);
  TDDP_CHECK(powersgd_rank >= 1, "--powersgd_rank must be at least 1, got {}", powersgd_rank);
  TDDP_CHECK(powersgd_start_iter >= 2, "--powersgd_start_iter must be at least 2, got {}", powersgd_start_iter);
  TDDP_CHECK(checkpoint_every >= 0, "--checkpoint_every must not be negative, got {}", checkpoint_every);
  TDDP_CHECK(!resume || !checkpoint.empty(), "--resume needs --checkpoint PATH");
  TDDP_CHECK(!fsdp || (!sync_bn && comm_hook == "allreduce" && autocast.empty()),
             "--fsdp does not take --sync_bn, --comm_hook or --autocast (DDP's options)");
  TDDP_CHECK(chunk_size >= 1, "--chunk_size must be positive, got {}", chunk_size);
  TDDP_CHECK(!deterministic || (!fsdp && !sync_bn && comm_hook == "allreduce" && autocast.empty() &&
                                !find_unused_parameters && timeline.empty()),
             "--deterministic replaces DDP's reduction: it does not take --fsdp, --sync_bn, --comm_hook, --autocast, "
             "--find_unused_parameters or --timeline");
  TDDP_CHECK(!fsdp || !find_unused_parameters, "--fsdp does not take --find_unused_parameters (an option of DDP)");
  TDDP_CHECK(threads >= 0, "--threads must be positive (or 0: the default), got {}", threads);
}

}  // namespace tinyddp::examples
