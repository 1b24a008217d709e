// train_gpt --profile_phases (step_phases.h).
#include "examples/step_phases.h"

#include <fmt/format.h>

#include <algorithm>

#include "tinyddp/tensor/cuda.h"

namespace tinyddp::examples {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace

void StepPhases::sync() const {
  if (device_.is_cuda()) tensor::cuda::synchronize(device_.index);
}

void StepPhases::begin_step() {
  if (!on_) return;
  sync();
  last_ = std::chrono::steady_clock::now();
}

void StepPhases::end_phase(const char* phase) {
  if (!on_) return;
  sync();
  const auto now = std::chrono::steady_clock::now();
  const auto at = std::find(names_.begin(), names_.end(), phase);
  const size_t i = static_cast<size_t>(at - names_.begin());
  if (at == names_.end()) {
    names_.emplace_back(phase);
    ms_.emplace_back();
  }
  ms_[i].push_back(std::chrono::duration<double, std::milli>(now - last_).count());
  last_ = now;
}

std::string StepPhases::table(int64_t skip) const {
  if (!on_ || ms_.empty() || static_cast<int64_t>(ms_[0].size()) <= skip) return "";
  std::vector<double> medians, steps(ms_[0].size() - static_cast<size_t>(skip), 0.0);
  for (const std::vector<double>& phase : ms_) {
    const std::vector<double> kept(phase.begin() + std::min<int64_t>(skip, static_cast<int64_t>(phase.size())),
                                   phase.end());
    medians.push_back(median(kept));
    for (size_t s = 0; s < kept.size() && s < steps.size(); ++s) steps[s] += kept[s];
  }
  const double step = median(steps);
  std::string out = fmt::format("step phases (device synchronised at each boundary; medians of {} steps after {}):\n",
                                steps.size(), skip);
  for (size_t i = 0; i < names_.size(); ++i) {
    out += fmt::format("  {:<12} {:8.3f} ms  {:5.1f}%\n", names_[i], medians[i],
                       step > 0 ? 100.0 * medians[i] / step : 0.0);
  }
  out += fmt::format("  {:<12} {:8.3f} ms\n", "step", step);
  return out;
}

}  // namespace tinyddp::examples
