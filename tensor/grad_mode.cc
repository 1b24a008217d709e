// The thread-local grad-mode and inference-mode flags.
#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::tensor {

namespace {
thread_local bool grad_mode_enabled = true;
thread_local bool inference_mode_enabled = false;
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

// As PyTorch's: InferenceMode(true) turns grad mode off, InferenceMode(false) on.
InferenceMode::InferenceMode(bool enabled) : grad_mode_(!enabled), previous_(inference_mode_enabled) {
  inference_mode_enabled = enabled;
}
InferenceMode::~InferenceMode() { inference_mode_enabled = previous_; }
bool InferenceMode::is_enabled() { return inference_mode_enabled; }

}  // namespace tinyddp::tensor
