// The vendor libraries behind some CUDA ops (host code, only under --config=cuda): matrix
// products through cuBLAS and softmax through cuDNN. Handles are per device, taken from a
// pool for the duration of one call (so threads never share one at the same time) and bound
// to the device's compute stream, so library work is ordered with our own kernels.
#pragma once

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::cuda {

namespace blas {
// out [n, m] (contiguous) = a [n, k] x b [k, m], a and b in any strides; float32, float64,
// float16 and bfloat16 (the 16-bit ones accumulate in float32). float32 products use TF32
// tensor cores only when allow_tf32() (tensor/cuda.h) is on.
void mm(const Tensor& out, const Tensor& a, const Tensor& b);
}  // namespace blas

namespace dnn {
// (log_)softmax of x along `dim` into out (contiguous, x's shape) through cuDNN when it
// applies (float32, float64, float16); returns false otherwise, leaving out untouched.
bool softmax(const Tensor& out, const Tensor& x, int64_t dim, bool log);
}  // namespace dnn

}  // namespace tinyddp::tensor::cuda
