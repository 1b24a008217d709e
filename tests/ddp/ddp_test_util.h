// Helpers for DDP tests whose ranks are threads of one process.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tinyddp/nn/nn.h"

namespace tinyddp::testing {

// An MLP with the initial weights of manual_seed(seed). Ranks that are threads share the
// default generator, so seeding and drawing happen under one lock.
inline std::shared_ptr<nn::Module> seeded_mlp(uint64_t seed, std::vector<int64_t> widths) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  tensor::manual_seed(seed);
  return nn::mlp(std::move(widths));
}

}  // namespace tinyddp::testing
