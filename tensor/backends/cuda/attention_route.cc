// CudaBackend::flash_attention and its backward: the route of one call (cuda.h's
// enable_flash_sdp / enable_math_sdp) and its launches. The operands come as backend.h says,
// [B, H, rows, width] with a dense last dim in any layout: the tensor-core kernels read and write
// them where they lie (the heads of a [B, T, H, E] tensor included, so no transposing copies);
// the CUDA-core kernels get contiguous stand-ins, their results copied into place.
#include <cstdint>
#include <string>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/backends/cuda/backend.h"
#include "tinyddp/tensor/backends/cuda/kernels.h"
#include "tinyddp/tensor/backends/cuda/launch.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::tensor::cuda {

namespace {

namespace k = kernels;

// An operand's layout: [B, H, rows, width], its last dim dense (the op's contract).
k::HeadStrides strides_of(const Tensor& t) { return k::HeadStrides{t.stride(0), t.stride(1), t.stride(2)}; }

// The layouts of contiguous [B, H, rows, width] operands: m query rows, n keys, widths e and ev.
k::AttentionLayouts dense_layouts(int64_t per_batch, int64_t m, int64_t n, int64_t e, int64_t ev) {
  const k::HeadStrides queries = k::dense_heads(per_batch, m, e), outputs = k::dense_heads(per_batch, m, ev);
  const k::HeadStrides keys = k::dense_heads(per_batch, n, e), values = k::dense_heads(per_batch, n, ev);
  return k::AttentionLayouts{per_batch, queries, keys, values, outputs, outputs, queries, keys, values};
}

}  // namespace

bool CudaBackend::flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                  const Tensor& v, bool causal, double scale, const AttentionDropout& dropout) {
  const int dtype = static_cast<int>(q.dtype());
  const int64_t per_batch = q.size(1), heads = q.size(0) * per_batch, m = q.size(2), n = k.size(2);
  const int64_t e = q.size(3), ev = v.size(3);
  // The route (cuda.h, enable_flash_sdp): declined, the op composes it from matmuls.
  const bool kernel = flash_sdp_enabled() && k::flash_attention_supported(dtype, e, ev);
  const bool composed = math_sdp_enabled();
  TDDP_CHECK(kernel || composed,
             "flash_attention on CUDA: no route left: the composed one is off (cuda::enable_math_sdp(false)) and "
             "the flash kernel {}",
             flash_sdp_enabled() ? fmt::format("takes head widths up to 128, not {} and {}", e, ev)
                                 : std::string("is off (cuda::enable_flash_sdp(false))"));
  const int64_t weight_bytes = heads * m * n * static_cast<int64_t>(q.element_size());
  // (the backward's strides 0: not this call's)
  k::AttentionLayouts layouts{per_batch, strides_of(q), strides_of(k), strides_of(v), strides_of(out), {}, {}, {}, {}};
  const void* const pointers[] = {q.raw_data_ptr(), k.raw_data_ptr(), v.raw_data_ptr(), out.raw_data_ptr()};
  // The tensor-core kernels beat the composed route at any length (and keep no weights).
  const bool tensor_cores = kernel && k::flash_attention_on_tensor_cores(dtype, e, ev, pointers, 4, layouts);
  if (!kernel || (composed && !tensor_cores && weight_bytes <= kComposedAttentionBytes)) return false;
  const int device = device_of(q);
  DeviceGuard guard(device);
  const Tensor qd = tensor_cores ? q : contiguous(q), kd = tensor_cores ? k : contiguous(k);
  const Tensor vd = tensor_cores ? v : contiguous(v), od = tensor_cores ? out : stand_in(out);
  if (!tensor_cores) layouts = dense_layouts(per_batch, m, n, e, ev);
  check_launch(k::flash_attention(qd.raw_data_ptr(), kd.raw_data_ptr(), vd.raw_data_ptr(), dtype, od.raw_data_ptr(),
                                  lse.raw_data_ptr(), heads, m, n, e, ev, layouts, causal, scale, dropout.p,
                                  dropout.key.value, dropout.key.slot, compute_stream(device)),
               "flash_attention kernel");
  settle(out, od);
  return true;
}

bool CudaBackend::flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                           const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                           const Tensor& lse, bool causal, double scale,
                                           const AttentionDropout& dropout) {
  const int dtype = static_cast<int>(q.dtype());
  const int64_t per_batch = q.size(1), heads = q.size(0) * per_batch, m = q.size(2), n = k.size(2);
  const int64_t e = q.size(3), ev = v.size(3);
  if (!k::flash_attention_supported(dtype, e, ev)) return false;
  const int device = device_of(q);
  DeviceGuard guard(device);
  k::AttentionLayouts layouts{per_batch,        strides_of(q),  strides_of(k),  strides_of(v), strides_of(out),
                              strides_of(dout), strides_of(dq), strides_of(dk), strides_of(dv)};
  const void* const pointers[] = {q.raw_data_ptr(),    k.raw_data_ptr(),  v.raw_data_ptr(),  out.raw_data_ptr(),
                                  dout.raw_data_ptr(), dq.raw_data_ptr(), dk.raw_data_ptr(), dv.raw_data_ptr()};
  const bool tensor_cores = k::flash_attention_on_tensor_cores(dtype, e, ev, pointers, 8, layouts);
  const auto input = [&](const Tensor& t) { return tensor_cores ? t : contiguous(t); };
  const auto output = [&](const Tensor& t) { return tensor_cores ? t : stand_in(t); };
  const Tensor qd = input(q), kd = input(k), vd = input(v), od = input(out), gd = input(dout);
  const Tensor dqd = output(dq), dkd = output(dk), dvd = output(dv);
  if (!tensor_cores) layouts = dense_layouts(per_batch, m, n, e, ev);
  const Tensor delta = zeros(lse.sizes(), lse.dtype(), lse.device());
  check_launch(k::flash_attention_backward(qd.raw_data_ptr(), kd.raw_data_ptr(), vd.raw_data_ptr(), od.raw_data_ptr(),
                                           gd.raw_data_ptr(), lse.raw_data_ptr(), delta.raw_data_ptr(), dtype,
                                           dqd.raw_data_ptr(), dkd.raw_data_ptr(), dvd.raw_data_ptr(), heads, m, n, e,
                                           ev, layouts, causal, scale, dropout.p, dropout.key.value, dropout.key.slot,
                                           compute_stream(device)),
               "flash_attention backward kernels");
  settle(dq, dqd);
  settle(dk, dkd);
  settle(dv, dvd);
  return true;
}

}  // namespace tinyddp::tensor::cuda
