// Ops composed from other ops (internal to tensor/), for a backend that declines them (its
// entry point returns false: internal/backend.h): today the CUDA backend's batch normalisation
// (its four steps), max pooling and layer normalisation's weight and bias gradients. native/ calls
// these when the backend declined, so a backend never calls back up into the ops. They keep
// the interface's contracts and run on any device's tensors, which lets
// tests/tensor/composite_test.cc hold them to the CPU's kernels. No graph is recorded: callers
// hold a NoGradGuard.
#pragma once

#include <tuple>

#include "tinyddp/tensor/internal/kernel_ops.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::tensor::composite {

// Batch normalisation's four steps over x [N, C, ...] (per channel, the other dims reduced).
std::tuple<Tensor, Tensor> batch_norm_mean_var(const Tensor& x);
void batch_norm_elemt(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                      const Tensor& invstd);
std::tuple<Tensor, Tensor> batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean);
void batch_norm_backward_elemt(const Tensor& grad_x, const Tensor& dy, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                               const Tensor& sum_dy_xmu, double count);

// Max pooling from im2col, the max over each window and, backward, a one-hot mask of the taps
// and col2im (indices: the tap of the window, i * kw + j).
void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& window);
void max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices, const Window2d& window);

// Layer normalisation's parameter gradients over rows x [M, N]: grad_weight = the column sums
// of dy * xhat (xhat from the saved mean and rstd, in their dtype) and grad_bias = those of dy;
// either may be undefined.
void layer_norm_param_grads(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& dy, const Tensor& x,
                            const Tensor& mean, const Tensor& rstd);

}  // namespace tinyddp::tensor::composite
