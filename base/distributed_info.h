// The default process group's rank and world size, for the layers beneath comm that ask for
// them as PyTorch code asks torch.distributed (nn's DistributedSampler(dataset)): comm's
// init_process_group publishes them and destroy_process_group withdraws them.
#pragma once

#include <optional>

namespace tinyddp::base {

struct DistributedInfo {
  int rank = 0;
  int world_size = 1;
};

void set_distributed_info(std::optional<DistributedInfo> info);
// The published values; nothing without a default process group.
std::optional<DistributedInfo> distributed_info();

}  // namespace tinyddp::base
