// train_gpt --profile_ops K (and --profile_trace PATH): the op profiler (tensor/profiler.h) over
// K steps after the first (which sets up the libraries' handles and the optimizer's state);
// rank 0 prints the table of kernels per op and per kind, each rank writes its Chrome trace.
// Each profiled step is also a range ("step N") in the trace.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "tinyddp/tensor/profiler.h"

namespace tinyddp::examples {

class OpProfileWindow {
 public:
  // Steps [first_step, steps) are the run's; `profiled` of them are profiled (0: none).
  OpProfileWindow(int64_t first_step, int64_t steps, int64_t profiled, std::string trace, int rank);

  void begin_step(int64_t step);
  // After the step's last work; ends the window after its last step, printing to `out`.
  void end_step(int64_t step, std::ostream& out);

  // Rank r > 0 writes PATH.json as PATH.rank<r>.json (its own file; pid r in it).
  static std::string trace_path(const std::string& path, int rank);

 private:
  int64_t begin_ = 0, end_ = 0;  // the profiled steps [begin_, end_)
  std::string trace_;
  int rank_;
  std::optional<tensor::profiler::Profile> profile_;
  std::optional<tensor::profiler::RecordFunction> step_range_;
};

// `steps` calls of `step` under the op profiler (bench/train_step --profile_trace): when `print`,
// its table goes to `out` and, with a `trace` path, its Chrome trace there.
void profile_steps(const std::function<void()>& step, int steps, bool print, const std::string& trace,
                   std::ostream& out);

}  // namespace tinyddp::examples
