// causal_softmax (ops.h): attention's scale, causal mask and softmax in one op, its backward
// beside it. The kernels see contiguous [B, M, N] (B: every leading dim). flash_attention
// (ops.h): the whole of attention in one op where the backend has a kernel, else composed; 4-D
// operands go to the backend as they lie, and the output and gradients of non-contiguous ones
// come in PyTorch's flash layout (heads_output).
#include "tinyddp/tensor/graph.h"
#include "tinyddp/tensor/internal/backend.h"
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

Tensor causal_softmax(const Tensor& scores, double scale) {
  check_defined(scores, "causal_softmax", "scores");
  TDDP_CHECK(scores.is_floating_point(), "causal_softmax: expected floating-point scores, got dtype {}",
             dtype_name(scores.dtype()));
  TDDP_CHECK(scores.dim() >= 2 && scores.size(-2) <= scores.size(-1),
             "causal_softmax: expected scores [..., M, N] with M <= N (every row keeps a column), got shape {}",
             format_shape(scores.sizes()));
  check_kernel_device(scores, "causal_softmax");
  const int64_t m = scores.size(-2), n = scores.size(-1), batch = m * n > 0 ? scores.numel() / (m * n) : 0;
  const Tensor out = new_output(scores.sizes(), scores.dtype(), scores.device());
  {
    NoGradGuard no_grad;
    if (out.numel() > 0) {
      backend_for(scores.device(), "causal_softmax")
          .causal_softmax(out.view({batch, m, n}), scores.contiguous().view({batch, m, n}), scale);
    }
  }
  if (!needs_grad(scores)) return out;
  // y = softmax(scale * masked x): grad_x = scale * y * (grad_out - sum(grad_out * y, -1)),
  // 0 where masked (y is 0 there).
  record_op("CausalSoftmaxBackward", out, {scores}, [so = SavedTensor(out, true), scale, batch, m, n](const Tensor& g) {
    const Tensor y = so.get("CausalSoftmaxBackward");
    if (GradMode::is_enabled()) {  // create_graph: the same formula from recorded ops
      return std::vector<Tensor>{mul(mul(y, sub(g, sum(mul(g, y), {-1}, true))), scale)};
    }
    const Tensor grad = new_output(y.sizes(), y.dtype(), y.device());
    if (grad.numel() > 0) {
      backend_for(g.device(), "causal_softmax backward")
          .causal_softmax_backward(grad.view({batch, m, n}), g.contiguous().view({batch, m, n}), y.view({batch, m, n}),
                                   scale);
    }
    return std::vector<Tensor>{grad};
  });
  return out;
}

namespace {

// softmax(scale * q k^T), causal or not, from recorded ops.
Tensor attention_weights(const Tensor& q, const Tensor& k, bool causal, double scale) {
  const Tensor scores = matmul(q, k.transpose(-2, -1));
  return causal ? causal_softmax(scores, scale) : softmax(mul(scores, scale), -1);
}

void check_flash_inputs(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  constexpr const char* kOp = "flash_attention";
  check_defined(q, kOp, "query");
  check_defined(k, kOp, "key");
  check_defined(v, kOp, "value");
  TDDP_CHECK(q.is_floating_point(), "flash_attention: expected a floating-point query, got dtype {}",
             dtype_name(q.dtype()));
  check_same_dtype(q, k, kOp, "query", "key");
  check_same_dtype(q, v, kOp, "query", "value");
  check_same_device(q, k, kOp, "query", "key");
  check_same_device(q, v, kOp, "query", "value");
  const auto lead = [](const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); };
  TDDP_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && lead(q) == lead(k) && lead(q) == lead(v) &&
                 q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             "flash_attention: expected query [..., M, E], key [..., N, E] and value [..., N, Ev] with the same "
             "leading dims, got {}, {} and {}",
             format_shape(q.sizes()), format_shape(k.sizes()), format_shape(v.sizes()));
  TDDP_CHECK(!causal || q.size(-2) <= k.size(-2),
             "flash_attention: is_causal needs at most as many queries as keys (every row keeps a key), got {} "
             "queries and {} keys",
             q.size(-2), k.size(-2));
  check_kernel_device(q, kOp);
}

// t as the backends' [B, H, rows, cols] with a dense last dim (internal/backend.h): t itself
// where it is 4-D with one (the heads of a [B, T, H, E] tensor, transposed, included), else a
// contiguous [1, heads, rows, cols] (a view where t already is contiguous).
Tensor as_heads(const Tensor& t, int64_t heads) {
  if (t.dim() == 4 && t.stride(3) == 1) return t;
  return t.contiguous().view({1, heads, t.size(-2), t.size(-1)});
}

// A new output of `sizes` [B, H, rows, cols] beside the operand `like` (as_heads'): contiguous
// where like is, else laid out as [B, rows, H, cols], PyTorch's flash layout, where the heads of
// a [B, T, H, E] tensor lie: its transpose(1, 2) is then a contiguous [B, T, H, E] (the model's
// [B, T, C] with no copy), and the kernels that take any layout write it in place.
Tensor heads_output(const Shape& sizes, const Tensor& like, DType dtype) {
  if (like.is_contiguous()) return new_output(sizes, dtype, like.device());
  const int64_t b = sizes[0], h = sizes[1], rows = sizes[2], cols = sizes[3];
  const Tensor buffer = new_output({b, rows, h, cols}, dtype, like.device());
  return Tensor::make(buffer.storage(), sizes, {rows * h * cols, cols, h * cols, 1}, 0, dtype);
}

// Attention dropout's key: one 64-bit draw from the generator (none at p = 0), or inside a CUDA
// graph's capture a device word that each replay fills anew (device_random_key).
AttentionDropout attention_dropout(const Tensor& q, double p, Generator* generator) {
  TDDP_CHECK(p >= 0.0 && p < 1.0, "flash_attention: dropout_p must be in [0, 1), got {}", p);
  if (p == 0.0) return AttentionDropout{};
  return AttentionDropout{p, device_random_key(q, generator, "flash_attention (attention dropout)")};
}

// The composed route's mask for weights w: the fused kernels' (the backend's dropout_mask over
// the contiguous [heads, M, N] weights, under the same key); undefined without dropout.
Tensor dropout_mask_for(const Tensor& w, const AttentionDropout& dropout) {
  if (dropout.p == 0.0) return Tensor();
  const Tensor mask = new_output(w.sizes(), w.dtype(), w.device());
  if (mask.numel() > 0) {
    TDDP_CHECK(backend_for(w.device(), "flash_attention dropout").dropout_mask(mask, dropout.p, dropout.key),
               "flash_attention: the {} backend draws no dropout masks", w.device().str());
  }
  return mask;
}

// The weights from recorded ops, dropped out.
Tensor dropped_weights(const Tensor& q, const Tensor& k, bool causal, double scale, const AttentionDropout& dropout) {
  const Tensor w = attention_weights(q, k, causal, scale), mask = dropout_mask_for(w, dropout);
  return mask.defined() ? mul(w, mask) : w;
}

}  // namespace

Tensor flash_attention(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal, double scale,
                       double dropout_p, Generator* generator) {
  check_flash_inputs(query, key, value, is_causal);
  const AttentionDropout dropout = attention_dropout(query, dropout_p, generator);
  const int64_t m = query.size(-2), n = key.size(-2), ev = value.size(-1);
  const int64_t heads = shape_numel(Shape(query.sizes().begin(), query.sizes().end() - 2));
  Shape out_sizes = query.sizes();
  out_sizes.back() = ev;
  const DType stats = query.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor q4 = as_heads(query, heads);
  Shape out4 = q4.sizes();
  out4.back() = ev;
  const Tensor out = heads_output(out4, q4, query.dtype());
  const Tensor lse = new_output({heads, m}, stats, query.device());
  bool fused = false;
  if (heads * m * n * query.size(-1) * ev > 0) {
    NoGradGuard no_grad;
    fused = backend_for(query.device(), "flash_attention")
                .flash_attention(out, lse, q4, as_heads(key, heads), as_heads(value, heads), is_causal, scale, dropout);
  }
  if (!fused) return matmul(dropped_weights(query, key, is_causal, scale, dropout), value);
  const Tensor result = out.sizes() == out_sizes ? out : out.view(out_sizes);
  if (!needs_grad({&query, &key, &value})) return result;
  record_op("FlashAttentionBackward", result, {query, key, value},
            [sq = SavedTensor(query), sk = SavedTensor(key), sv = SavedTensor(value), so = SavedTensor(result, true),
             lse, is_causal, scale, heads, dropout](const Tensor& g) {
              constexpr const char* kNode = "FlashAttentionBackward";
              const Tensor &q = sq.get(kNode), &k = sk.get(kNode), &v = sv.get(kNode);
              if (GradMode::is_enabled()) {  // create_graph: the same from recorded ops (the mask a constant)
                const Tensor w = attention_weights(q, k, is_causal, scale), mask = dropout_mask_for(w, dropout);
                const Tensor dropped = mask.defined() ? mul(w, mask) : w;
                Tensor dw = matmul(g, v.transpose(-2, -1));  // of the dropped weights; of w after the mask
                if (mask.defined()) dw = mul(dw, mask);
                const Tensor ds = mul(mul(w, sub(dw, sum(mul(dw, w), {-1}, true))), scale);
                return std::vector<Tensor>{matmul(ds, k), matmul(ds.transpose(-2, -1), q),
                                           matmul(dropped.transpose(-2, -1), g)};
              }
              const Tensor q4 = as_heads(q, heads), k4 = as_heads(k, heads), v4 = as_heads(v, heads);
              const Tensor dq = heads_output(q4.sizes(), q4, q.dtype());
              const Tensor dk = heads_output(k4.sizes(), k4, q.dtype());
              const Tensor dv = heads_output(v4.sizes(), v4, q.dtype());
              const bool done =
                  backend_for(q.device(), "flash_attention backward")
                      .flash_attention_backward(dq, dk, dv, as_heads(g, heads), q4, k4, v4,
                                                as_heads(so.get(kNode), heads), lse, is_causal, scale, dropout);
              TDDP_CHECK(done, "flash_attention: the backend ran the forward but declined the backward");
              const auto shaped = [](const Tensor& grad, const Tensor& input) {
                return grad.sizes() == input.sizes() ? grad : grad.view(input.sizes());
              };
              return std::vector<Tensor>{shaped(dq, q), shaped(dk, k), shaped(dv, v)};
            });
  return result;
}

}  // namespace tinyddp::tensor
