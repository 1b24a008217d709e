// PowerSGD gradient compression as a DDP communication hook (PyTorch's
// ddp_comm_hooks.powerSGD_hook). Each gradient matrix M (n x m; a tensor of higher rank is
// viewed as [size(0), rest]) is sent as two thin matrices, P = M Q (n x r) and Q = M^T P
// (m x r), r = matrix_approximation_rank: per bucket,
//   1. the error of the previous step is added to the bucket (error feedback);
//   2. tensors that would not shrink by min_compression_rate (biases, small matrices) are
//      allreduced uncompressed, as one flat tensor;
//   3. P = M Q from the previous step's Q (warm start; random at first, from a seeded
//      generator that is the same on every rank), allreduced (sum), then orthogonalised;
//   4. Q = M^T P, allreduced and divided by the world size; the bucket gets M ~ P Q^T;
//   5. the error is what was to be sent minus what was applied.
// Before start_powerSGD_iter the hook is a plain allreduce (PyTorch's default: 1000 iterations).
//
//   auto state = std::make_shared<ddp::PowerSGDState>(pg, PowerSGDOptions().matrix_approximation_rank(2));
//   ddp.register_comm_hook(ddp::powersgd_hook(state));
#pragma once

#include <map>
#include <memory>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/comm_hooks.h"
#include "tinyddp/tensor/random.h"

namespace tinyddp::ddp {

// PyTorch's PowerSGDState arguments and defaults.
struct PowerSGDOptions {
  PowerSGDOptions& matrix_approximation_rank(int v) {
    matrix_approximation_rank_ = v;
    return *this;
  }
  PowerSGDOptions& start_powerSGD_iter(int64_t v) {
    start_powerSGD_iter_ = v;
    return *this;
  }
  PowerSGDOptions& min_compression_rate(double v) {
    min_compression_rate_ = v;
    return *this;
  }
  PowerSGDOptions& use_error_feedback(bool v) {
    use_error_feedback_ = v;
    return *this;
  }
  PowerSGDOptions& warm_start(bool v) {
    warm_start_ = v;
    return *this;
  }
  PowerSGDOptions& orthogonalization_epsilon(double v) {
    orthogonalization_epsilon_ = v;
    return *this;
  }
  PowerSGDOptions& random_seed(uint64_t v) {
    random_seed_ = v;
    return *this;
  }
  int matrix_approximation_rank() const { return matrix_approximation_rank_; }
  int64_t start_powerSGD_iter() const { return start_powerSGD_iter_; }
  double min_compression_rate() const { return min_compression_rate_; }
  bool use_error_feedback() const { return use_error_feedback_; }
  bool warm_start() const { return warm_start_; }
  double orthogonalization_epsilon() const { return orthogonalization_epsilon_; }
  uint64_t random_seed() const { return random_seed_; }

 private:
  int matrix_approximation_rank_ = 1;
  int64_t start_powerSGD_iter_ = 1000;
  double min_compression_rate_ = 2;
  bool use_error_feedback_ = true;
  bool warm_start_ = true;
  double orthogonalization_epsilon_ = 0;
  uint64_t random_seed_ = 0;
};

// The hook's state across iterations: per bucket the error and the P and Q memories, the
// iteration count, the seeded generator, and how many elements would have been sent and were.
struct PowerSGDState {
  PowerSGDState(std::shared_ptr<comm::ProcessGroup> pg, PowerSGDOptions options = {});

  std::shared_ptr<comm::ProcessGroup> pg;
  PowerSGDOptions options;
  int64_t iter = 0;  // synchronised backward passes seen (counted at each last bucket)
  tensor::Generator rng;
  std::map<size_t, Tensor> error, p_memory, q_memory;  // by bucket index
  int64_t numel_before_compression = 0, numel_after_compression = 0;
  // Elements before / after compression so far (PyTorch's compression_stats()[0]).
  double compression_rate() const {
    return numel_after_compression > 0 ? static_cast<double>(numel_before_compression) / numel_after_compression : 0;
  }
};

// Compresses each matrix of the bucket separately (PyTorch's powerSGD_hook).
CommHook powersgd_hook(std::shared_ptr<PowerSGDState> state);
// Treats the whole bucket as one square-ish matrix (its contents padded with zeros to
// side x side, side = ceil(sqrt(numel))), compressed at once (PyTorch's batched_powerSGD_hook).
CommHook batched_powersgd_hook(std::shared_ptr<PowerSGDState> state);

// Gram-Schmidt on the columns of `matrix` [n, r] in place (divided by norm + epsilon).
void orthogonalize(const Tensor& matrix, double epsilon);

}  // namespace tinyddp::ddp
