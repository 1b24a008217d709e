// The elementwise kernels' op codes and the plain structs the backend interface takes
// (internal/backend.h), shared by every backend, the per-ISA kernels and tensor/native/.
#pragma once

#include <cstdint>

namespace tinyddp::tensor {

// kAdd computes a + alpha * b; kReluBackward computes b > 0 ? a : 0 (a: gradient, b: relu output);
// kMaskedFill computes b != 0 ? alpha : a (b: the mask in a's dtype).
enum class BinaryOp { kAdd, kMul, kDiv, kMaximum, kMinimum, kReluBackward, kMaskedFill };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };
// kGelu / kGeluTanh: GELU exact (erf) and its tanh approximation; kGeluGrad / kGeluTanhGrad:
// their derivatives d gelu / dx (elementwise_math.h holds the formulas all backends share).
enum class UnaryOp {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRelu,
  kTanh,
  kSigmoid,
  kGelu,
  kGeluTanh,
  kGeluGrad,
  kGeluTanhGrad
};

// A kernel window sliding over an [N, C, H, W] input (convolution, pooling): the input's
// size, the kernel, stride, padding on each side and dilation, and the OH x OW output
// positions they give. im2col gathers, for every (n, c, kernel tap i, j, output position),
// the input element the tap reads there: col [N, C, kh, kw, OH, OW].
struct Window2d {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t kh = 1, kw = 1;              // kernel
  int64_t sh = 1, sw = 1;              // stride
  int64_t ph = 0, pw = 0;              // padding
  int64_t dh = 1, dw = 1;              // dilation
  int64_t oh = 0, ow = 0;              // output positions

  int64_t padded_h() const { return h + 2 * ph; }
  int64_t padded_w() const { return w + 2 * pw; }
};

// torch.optim.SGD's options for one parameter's update (fused_sgd_step_, Backend::sgd_step).
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

}  // namespace tinyddp::tensor
