// The elementwise kernels' op codes and the plain structs the backend interface takes
// (internal/backend.h), shared by every backend, the per-ISA kernels and tensor/native/.
#pragma once

#include <cstdint>

namespace tinyddp::tensor {

// kAdd computes a + alpha * b; kReluBackward computes b > 0 ? a : 0 (a: gradient, b: relu output);
// kMaskedFill computes b != 0 ? alpha : a (b: the mask in a's dtype); kPow computes a ** b;
// kGeluBackward / kGeluTanhBackward compute a * gelu'(b) (a: gradient, b: gelu's input), in the
// compute type and rounded once.
enum class BinaryOp {
  kAdd,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kReluBackward,
  kMaskedFill,
  kPow,
  kGeluBackward,
  kGeluTanhBackward
};
// kLogicalAnd / kLogicalOr / kLogicalXor: both operands taken as true where nonzero.
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kLogicalAnd, kLogicalOr, kLogicalXor };
// The unary ops, listed once (X(name) per op) for the enum and the switches over it. kGelu /
// kGeluTanh: GELU exact (erf) and its tanh approximation; kGeluGrad / kGeluTanhGrad: their
// derivatives d gelu / dx; kRound rounds half to even, as torch.round; kSign of NaN is 0, as
// PyTorch's CPU kernel (elementwise_math.h holds the formulas all backends share).
#define TINYDDP_UNARY_OPS(X) \
  X(kNeg)                    \
  X(kAbs)                    \
  X(kExp)                    \
  X(kLog)                    \
  X(kSqrt)                   \
  X(kRelu)                   \
  X(kTanh)                   \
  X(kSigmoid)                \
  X(kGelu)                   \
  X(kGeluTanh)               \
  X(kGeluGrad)               \
  X(kGeluTanhGrad)           \
  X(kSin)                    \
  X(kCos)                    \
  X(kErf)                    \
  X(kLog1p)                  \
  X(kExpm1)                  \
  X(kRsqrt)                  \
  X(kReciprocal)             \
  X(kFloor)                  \
  X(kCeil)                   \
  X(kTrunc)                  \
  X(kRound)                  \
  X(kSign)
#define TINYDDP_UNARY_ENUMERATOR(name) name,
enum class UnaryOp { TINYDDP_UNARY_OPS(TINYDDP_UNARY_ENUMERATOR) };
#undef TINYDDP_UNARY_ENUMERATOR

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

// The 64-bit Philox key of a random kernel (dropout's masks, internal/philox.h): a number drawn
// on the host (`value`), or, for a kernel that a CUDA graph captured, `slot`, a word of device
// memory the kernel reads when it runs, which the graph fills with a fresh draw of the
// generator before each replay (tensor/cuda.h's CudaGraph). Only device kernels see a slot.
struct RandomKey {
  uint64_t value = 0;
  const uint64_t* slot = nullptr;
};

// Attention dropout inside flash attention (Backend::flash_attention): weight (head, i, j) of
// the [heads, M, N] attention weights kept where philox::dropout_keep(key, (head * M + i) * N
// + j, 1 - p) (internal/philox.h: dropout's own mask over the contiguous weights, so that the
// fused and the composed routes drop the same weights), the kept ones scaled by 1 / (1 - p).
// p = 0: no dropout.
struct AttentionDropout {
  double p = 0.0;
  RandomKey key;
};

// torch.optim.SGD's options for one parameter's update (fused_sgd_step_, Backend::sgd_step).
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// One Adam (or AdamW, `decoupled`) step of a parameter, torch.optim.Adam's single-tensor step
// without amsgrad and capturable: `step` is the step's count from 1 (its bias corrections).
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;
  bool decoupled = false, maximize = false;
};

}  // namespace tinyddp::tensor
