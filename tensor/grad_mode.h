// Grad mode: a thread-local switch saying whether ops record the autograd graph. It lives
// in the tensor layer because ops consult it; autograd/ re-exports it (autograd/grad_mode.h).
#pragma once

namespace tinyddp::tensor {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns recording off for its scope (as torch.no_grad()); restores the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording on for its scope (as torch.enable_grad()).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Sets grad mode for its scope to `enabled` (libtorch's AutoGradMode; Python's
// `with torch.set_grad_enabled(flag):`), restoring the previous mode.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// torch.set_grad_enabled(flag) called as a function: grad mode on this thread from now on.
inline void set_grad_enabled(bool enabled) { GradMode::set_enabled(enabled); }
inline bool is_grad_enabled() { return GradMode::is_enabled(); }

// As torch.inference_mode() / c10::InferenceMode: no recording for its scope (a NoGradGuard
// that also answers is_enabled()). PyTorch's inference tensors also refuse to join a graph
// later; tinyddp keeps no such mark, so a tensor made inside may be used in autograd after.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  // Whether an InferenceMode(true) is the innermost one on this thread.
  static bool is_enabled();

 private:
  AutoGradMode grad_mode_;
  bool previous_;
};

}  // namespace tinyddp::tensor
