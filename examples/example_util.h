// Helpers shared by the DDP examples: run as ranks under the launcher or, started alone,
// fork two local ranks (as torch.multiprocessing.spawn does in PyTorch's DDP tutorial); and a
// checksum of a model's parameters that shows at a glance whether ranks hold the same bits.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "tinyddp/launcher/spawn.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::examples {

// Under a launcher (RANK set) runs rank_main(RANK); otherwise forks `nproc` local ranks.
// Returns the process exit status; errors are printed, not thrown.
inline int run_ranks(const char* name, int nproc, const std::function<int(int rank)>& rank_main) {
  const auto guarded = [&](int rank) {
    try {
      return rank_main(rank);
    } catch (const std::exception& e) {
      std::cerr << name << ": rank " << rank << ": error: " << e.what() << std::endl;
      return 1;
    }
  };
  if (const char* rank = std::getenv("RANK")) return guarded(std::atoi(rank));
  return launcher::spawn_local(nproc, guarded) == 0 ? 0 : 1;
}

// FNV-1a over the bytes of every parameter, in registration order, and their sum.
inline std::string parameter_checksum(const nn::Module& module) {
  uint64_t hash = 1469598103934665603ull;
  double sum = 0;
  for (const auto& [name, p] : module.named_parameters()) {
    const tensor::Tensor c = p.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.raw_data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    sum += tensor::sum(c.to(tensor::kFloat64)).item<double>();
  }
  return fmt::format("{:016x} (sum {:.9g})", hash, sum);
}

}  // namespace tinyddp::examples
