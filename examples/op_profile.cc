// train_gpt --profile_ops (op_profile.h).
#include "examples/op_profile.h"

#include <fmt/format.h>

#include <algorithm>

namespace tinyddp::examples {

OpProfileWindow::OpProfileWindow(int64_t first_step, int64_t steps, int64_t profiled, std::string trace, int rank)
    : trace_(std::move(trace)), rank_(rank) {
  if (profiled <= 0) return;
  begin_ = first_step + 1 < steps ? first_step + 1 : first_step;  // past the warm-up step when there is one more
  end_ = std::min(steps, begin_ + profiled);
}

void OpProfileWindow::begin_step(int64_t step) {
  if (step < begin_ || step >= end_) return;
  if (step == begin_) profile_.emplace();
  step_range_.emplace(fmt::format("step {}", step));
}

void OpProfileWindow::end_step(int64_t step, std::ostream& out) {
  if (!profile_) return;
  step_range_.reset();
  profile_->step();
  if (step + 1 < end_) return;
  profile_->stop();
  out << fmt::format("op profile of steps {} to {} (tensor/profiler.h; per step):\n", begin_, end_ - 1)
      << profile_->table(30);
  if (!trace_.empty()) {
    const std::string path = trace_path(trace_, rank_);
    profile_->export_chrome_trace(path, rank_);
    out << fmt::format("op trace written to {} (ui.perfetto.dev)\n", path);
  }
  profile_.reset();
}

std::string OpProfileWindow::trace_path(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::string suffix = ".json";
  const bool json =
      path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = json ? path.substr(0, path.size() - suffix.size()) : path;
  return fmt::format("{}.rank{}{}", stem, rank, json ? suffix : "");
}

void profile_steps(const std::function<void()>& step, int steps, bool print, const std::string& trace,
                   std::ostream& out) {
  tensor::profiler::Profile profile;
  for (int i = 0; i < steps; ++i) {
    step();
    profile.step();
  }
  profile.stop();
  if (!print) return;
  out << fmt::format("op profile of {} more steps (tensor/profiler.h; per step):\n", steps) << profile.table(30);
  if (!trace.empty()) profile.export_chrome_trace(trace);
}

}  // namespace tinyddp::examples
