// Batch normalisation modules, as torch.nn.BatchNorm1d/2d: a learnable per-channel weight
// (ones) and bias (zeros), and three buffers, running_mean (zeros), running_var (ones) and
// num_batches_tracked (int64 0), registered as buffers so that state dicts carry them and
// DDP broadcasts them from rank 0 before each forward. Training normalises with the batch's
// statistics and updates the running ones; eval() switches to the running statistics.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

// What batch and instance normalisation share (PyTorch's _NormBase): the per-channel weight
// (ones) and bias (zeros) when affine, the running statistics when tracked, and the repr.
class NormBase : public Module {
 public:
  NormBase(std::string type_name, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
           bool track_running_stats);
  std::string extra_repr() const override;

  Tensor weight, bias;                                    // [C], undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;  // undefined unless track_running_stats
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
};

class BatchNorm : public NormBase {
 public:
  // momentum: the running statistics' update weight; std::nullopt makes them a cumulative
  // average over all batches seen (weight 1 / num_batches_tracked), as momentum=None does.
  BatchNorm(std::string type_name, int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
            bool affine = true, bool track_running_stats = true)
      : NormBase(std::move(type_name), num_features, eps, momentum, affine, track_running_stats) {}
  Tensor forward(const Tensor& input) override;

  // Deferred running statistics (DDP's deterministic option runs a step's chunks on several
  // ranks and must update the running statistics in chunk order): while deferring, a training
  // forward normalises with the batch's statistics as usual but leaves running_mean,
  // running_var and num_batches_tracked alone, keeping the batch's mean and unbiased variance
  // in deferred_statistics(); apply_running_stats(mean, var) later moves the running
  // statistics as that forward would have (momentum, or the cumulative average), one batch
  // per call. Without track_running_stats nothing is kept.
  struct BatchStatistics {
    Tensor mean, unbiased_var;  // [C], in the running statistics' dtype
  };
  void defer_running_stats(bool on);
  bool deferring_running_stats() const { return deferring_; }
  std::vector<BatchStatistics>& deferred_statistics() { return deferred_; }
  void apply_running_stats(const Tensor& mean, const Tensor& unbiased_var);

 protected:
  // Throws unless `input` has a dimensionality this module accepts (names the module and shape).
  virtual void check_input_dim(const Tensor& input) const = 0;
  // Counts the batch (training with running statistics) and returns the weight that the
  // running statistics give this batch.
  double advance_running_stats();
  // Whether forward normalises with the batch's statistics: in training, or with no running ones.
  bool uses_batch_stats() const { return is_training() || !running_mean.defined(); }
  void check_channels(const Tensor& input) const;

 private:
  // Counts one batch in num_batches_tracked and returns its weight in the running statistics.
  double count_batch();

  bool deferring_ = false;
  std::vector<BatchStatistics> deferred_;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}
  explicit BatchNorm1d(const BatchNormOptions& o)
      : BatchNorm1d(o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}
  explicit BatchNorm2d(const BatchNormOptions& o)
      : BatchNorm2d(o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

}  // namespace tinyddp::nn
