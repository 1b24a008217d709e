// The elementwise kernels' op codes, shared by both backends (cpu/backend.h, cuda/backend.h)
// and the ops that dispatch to them (tensor/ops/).
#pragma once

namespace tinyddp::tensor {

// kAdd computes a + alpha * b; kReluBackward computes b > 0 ? a : 0 (a: gradient, b: relu output).
enum class BinaryOp { kAdd, kMul, kDiv, kMaximum, kMinimum, kReluBackward };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };
enum class UnaryOp { kNeg, kAbs, kExp, kLog, kSqrt, kRelu, kTanh, kSigmoid };

}  // namespace tinyddp::tensor
