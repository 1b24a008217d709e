// LayerCollectives: the role of a layer that issues collectives of its own inside the model
// (SyncBatchNorm's allgather and allreduce), so that DDP can draw them on its timeline. DDP
// finds every module of the model in this role and sets `on_collective` while its timeline
// is on (and clears it when it goes); the layer calls it after each of its collectives. A new
// layer of this kind needs nothing in DDP: it takes the role.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace tinyddp::ddp {

class LayerCollectives {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~LayerCollectives() = default;

  // Called after each of the layer's collectives with its name and when it started and ended.
  std::function<void(const std::string& name, Clock::time_point start, Clock::time_point end)> on_collective;
};

}  // namespace tinyddp::ddp
