// im2col and col2im on a GPU (CudaBackend) from the copy, fill and accumulate kernels: the
// input is copied into a padded buffer (filled with the pad value), whose kernel windows are one
// strided view [N, C, kh, kw, OH, OW]; im2col copies that view into col, and col2im adds col
// into the view of a zeroed buffer (accumulate's atomic adds sum the overlapping windows), then
// takes the unpadded part.
#include "tinyddp/tensor/backends/cuda/backend.h"

#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cuda {

namespace {

// A contiguous [N, C, H + 2 ph, W + 2 pw] buffer on x's device, filled with `value`.
Tensor padded_buffer(const Tensor& like, const Window2d& w, double value) {
  const Tensor padded =
      empty({w.n, w.c, w.padded_h(), w.padded_w()}, TensorOptions(like.dtype()).device(like.device()));
  backend().fill(padded, value);
  return padded;
}

Tensor interior(const Tensor& padded, const Window2d& w) { return padded.narrow(2, w.ph, w.h).narrow(3, w.pw, w.w); }

// The windows of `padded` as a view [N, C, kh, kw, OH, OW].
Tensor windows_of(const Tensor& padded, const Window2d& w) {
  const int64_t row = w.padded_w(), plane = w.padded_h() * row;
  return padded.as_strided({w.n, w.c, w.kh, w.kw, w.oh, w.ow}, {w.c * plane, plane, w.dh * row, w.dw, w.sh * row, w.sw},
                           padded.storage_offset());
}

}  // namespace

void CudaBackend::im2col(const Tensor& col, const Tensor& x, const Window2d& w, double pad_value) {
  const Tensor padded = padded_buffer(x, w, pad_value);
  copy(interior(padded, w), x, false);
  copy(col, windows_of(padded, w), false);
}

void CudaBackend::col2im(const Tensor& grad_x, const Tensor& col, const Window2d& w) {
  const Tensor padded = padded_buffer(col, w, 0.0);
  accumulate(windows_of(padded, w), col);
  copy(grad_x, interior(padded, w), false);
}

}  // namespace tinyddp::tensor::cuda
