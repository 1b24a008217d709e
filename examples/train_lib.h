// The single-process training loop behind //examples:train, as a library so that tests can
// run it with fixture weights and data: model and data setup, the step loop, progress lines,
// metrics CSV and the final checkpoint.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tinyddp::examples {

struct TrainConfig {
  std::string model = "toy";                  // toy | mlp
  std::vector<int64_t> widths = {784, 256, 10};  // mlp only
  std::string loss;                           // mse | ce; empty: mse for toy, ce for mlp
  std::string optimizer = "sgd";              // sgd | adam
  double lr = 0.1;
  double momentum = 0;
  int64_t steps = 100;
  uint64_t seed = 0;
  int64_t batch = 0;      // synthetic data only; 0: 20 for toy, 64 for mlp
  std::string init;       // safetensors state dict to start from
  std::string data;       // safetensors with "inputs" [steps, batch, in] and "targets"
  std::string save;       // where to write the final state dict
  std::string metrics;    // CSV "step,loss" (loss before that step's update)
  int64_t log_every = 0;  // 0: about ten progress lines
};

struct TrainResult {
  std::vector<double> losses;  // one per step, before the update
  double accuracy = -1;        // cross-entropy only: last batch, before the last update
  double seconds = 0;
  int64_t samples = 0;
};

// Runs the training described by `config`, printing progress to `log`. Throws
// tinyddp::Error with a clear message for bad configurations, files or data.
TrainResult train(const TrainConfig& config, std::ostream& log);

}  // namespace tinyddp::examples
