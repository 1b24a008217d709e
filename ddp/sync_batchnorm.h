// SyncBatchNorm, as torch.nn.SyncBatchNorm: batch normalisation whose training statistics are
// those of the global batch, across every rank of a process group. Each rank computes its
// batch's per-channel mean and (biased) variance and its element count; one allgather brings
// every rank's three, which combine into the global mean and variance (ranks may hold
// different batch sizes, an empty one included). The backward needs two per-channel sums
// over the global batch, sum(dy) and sum(dy * (x - mean)): one allreduce. The gradients of
// weight and bias stay local, as every parameter's do: DDP averages them.
//
// Outside training, with one rank, or without a process group it is BatchNorm itself: eval
// uses the running statistics and communicates nothing. Its collectives run on the group in
// the order the graph reaches them, the same on every rank, between DDP's own (see
// docs/ddp.md for one CNN iteration's timeline).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/ddp/layer_collectives.h"
#include "tinyddp/nn/batchnorm.h"

namespace tinyddp::ddp {

using tensor::Tensor;

// Its collectives are reported to DDP's timeline through the LayerCollectives role
// (on_collective, Clock).
class SyncBatchNorm : public nn::BatchNorm, public LayerCollectives {
 public:
  // `process_group`: where the statistics are gathered; nullptr means the default group
  // (comm::init_process_group) at forward time.
  explicit SyncBatchNorm(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                         bool affine = true, bool track_running_stats = true,
                         std::shared_ptr<comm::ProcessGroup> process_group = nullptr);
  // Takes over `bn`'s options, mode and tensors themselves (the same weight, bias and buffer
  // handles, so an optimizer made before the conversion still updates them).
  SyncBatchNorm(const nn::BatchNorm& bn, std::shared_ptr<comm::ProcessGroup> process_group);

  Tensor forward(const Tensor& input) override;

  // torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm1d/2d in `module`'s tree
  // replaced in place by a SyncBatchNorm over `process_group` that keeps its weights and
  // buffers. Returns the module (a new SyncBatchNorm when `module` itself is a BatchNorm).
  static std::shared_ptr<nn::Module> convert_sync_batchnorm(
      const std::shared_ptr<nn::Module>& module, std::shared_ptr<comm::ProcessGroup> process_group = nullptr);

  std::shared_ptr<comm::ProcessGroup> process_group;

 protected:
  void check_input_dim(const Tensor& input) const override;
};

}  // namespace tinyddp::ddp
