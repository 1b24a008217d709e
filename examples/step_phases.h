// Where a training step's wall time goes, phase by phase (train_gpt --profile_phases): at each
// boundary the device is synchronised and the time since the last boundary is charged to the
// phase that just ended, so a phase's kernels count in it and not in a later one. The syncs
// remove the overlap of host and device, so the phases add up to a little more than an
// unprofiled step; what they show is which phase holds the time. The medians over the steps
// after the first `skip` (warm-up: allocations, library handles, cuDNN's and cuBLAS's choices).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tinyddp/tensor/device.h"

namespace tinyddp::examples {

class StepPhases {
 public:
  StepPhases(bool on, tensor::Device device) : on_(on), device_(device) {}

  // At the start of a step (synchronises first, so the step starts with an idle device).
  void begin_step();
  // The phase that just ended: the time since the last boundary, the device synchronised.
  void end_phase(const char* phase);
  // "phase  median ms  share" lines, then the median step; empty when off or too few steps.
  std::string table(int64_t skip) const;

 private:
  void sync() const;

  bool on_;
  tensor::Device device_;
  std::chrono::steady_clock::time_point last_;
  std::vector<std::string> names_;       // in the order first seen
  std::vector<std::vector<double>> ms_;  // [phase][step]
};

}  // namespace tinyddp::examples
