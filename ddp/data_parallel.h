// DataParallel: PyTorch's single-process data parallelism (torch.nn.DataParallel), built from
// its four public steps. Each forward scatters the batch into one chunk per device, replicates
// the module onto each device, runs the replicas in parallel threads and gathers their outputs:
//
//   input [N, ...] --scatter--> chunk 0 .. chunk k-1 (devices[0] .. devices[k-1])
//   module --replicate--> replica 0 .. replica k-1 (parameters: autograd copies of the module's)
//   parallel_apply: replica i(chunk i) on its own thread
//   outputs --gather--> one output on output_device
//
// Backward runs back through all of it: gather's gradient is split among the replicas, and
// each replica's parameter gradient flows through its copy into the original parameter's
// .grad, which receives the sum. DDP replaced it (docs/ddp.md, "DataParallel, step by step"):
// the module is copied every iteration, and one device does the scatter, the gather and the
// optimizer. On a machine without GPUs the devices may name the CPU several times (each
// replica then runs on its own thread), which PyTorch does not allow: tinyddp does, so that
// the whole path runs, and is tested, anywhere.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::ddp {

using tensor::Device;
using tensor::Tensor;

// Splits each input along `dim` into at most devices.size() chunks as torch.chunk does (the
// last may be smaller; a batch of n < devices.size() gives n chunks) and moves chunk i to
// devices[i]: result[i] holds replica i's inputs. Differentiable.
std::vector<std::vector<Tensor>> scatter(const std::vector<Tensor>& inputs, const std::vector<Device>& devices,
                                         int64_t dim = 0);

// One copy of `module` per device: the same structure (Module::clone_structure), each
// parameter an autograd copy of the module's on that device (a view on the module's own
// device), so gradients reach the module's parameters; buffers copied, except replica 0's
// when it is on the module's device: those are the module's own, so its in-place updates
// (BatchNorm's running statistics) land in the module, as in PyTorch. Train/eval mode copied.
// Draws nothing from the default generator (the copies are built under nn::SkipInitGuard).
std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices);

// replicas[i]->forward_many(inputs[i]) for every i, each on a thread of its own (with the
// caller's grad mode); the outputs in replica order. An exception in any replica is rethrown
// naming the replica, after every thread has finished.
std::vector<std::vector<Tensor>> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                                const std::vector<std::vector<Tensor>>& inputs);

// outputs[i][j] for every i, moved to `target` and joined along `dim` (one-element outputs of
// 0 dims, such as a loss, are joined into a vector, as PyTorch does): one tensor per j.
// Differentiable.
std::vector<Tensor> gather(const std::vector<std::vector<Tensor>>& outputs, Device target, int64_t dim = 0);

class DataParallel : public nn::Module {
 public:
  // device_ids: the devices, replica 0 on the first, which must hold the module's parameters
  // and buffers; unset, every GPU (none: forward just calls the module, as PyTorch on a
  // machine without GPUs). output_device: where the outputs are gathered (default the first).
  DataParallel(std::shared_ptr<nn::Module> module, std::optional<std::vector<Device>> device_ids = std::nullopt,
               std::optional<Device> output_device = std::nullopt, int64_t dim = 0);

  Tensor forward(const Tensor& input) override;
  std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs) override;

  const std::vector<Device>& device_ids() const { return device_ids_; }
  std::shared_ptr<nn::Module> module;  // registered as "module": parameters are "module.<name>"

 private:
  void check_module_device() const;  // parameters and buffers on device_ids[0], or throws naming one
  std::vector<Device> device_ids_;
  Device output_device_;
  int64_t dim_;
};

}  // namespace tinyddp::ddp
