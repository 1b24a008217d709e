// The thread-local grad-mode flag.
#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::tensor {

namespace {
thread_local bool grad_mode_enabled = true;
}

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

}  // namespace tinyddp::tensor
