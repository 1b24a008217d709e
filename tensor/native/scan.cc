// Scans and products along a dim (cumsum, cumprod, prod), composed from matmul, mul and cat,
// so each is differentiable through them and runs on any device without a kernel of its own.
#include "tinyddp/tensor/native/checks.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

using namespace detail;

namespace {

// Running sums along the last dim of x [..., n], n <= kBlock: x @ U, U upper-triangular ones.
constexpr int64_t kBlock = 128;
Tensor cumsum_last_small(const Tensor& x) {
  const int64_t n = x.size(-1);
  const Tensor upper = triu(ones({n, n}, TensorOptions(x.dtype()).device(x.device())));
  return summing_matmul(x, upper);
}

// Running sums along the last dim: blocks of kBlock summed within, each block then shifted by
// the running sum of the blocks before it (the same function on the block totals).
Tensor cumsum_last(const Tensor& x) {
  const int64_t n = x.size(-1);
  if (n <= kBlock) return cumsum_last_small(x);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  Shape pad_shape = x.sizes();
  pad_shape.back() = blocks * kBlock - n;
  const Tensor padded =
      pad_shape.back() > 0 ? cat({x, zeros(pad_shape, TensorOptions(x.dtype()).device(x.device()))}, -1) : x;
  Shape blocked = x.sizes();
  blocked.back() = blocks;
  blocked.push_back(kBlock);
  const Tensor inner = cumsum_last_small(padded.reshape(blocked));    // [..., blocks, kBlock]
  const Tensor totals = inner.narrow(-1, kBlock - 1, 1).squeeze(-1);  // [..., blocks]
  const Tensor before = sub(cumsum_last(totals), totals);             // what precedes each block
  Shape flat = x.sizes();
  flat.back() = blocks * kBlock;
  return add(inner, before.unsqueeze(-1)).reshape(flat).narrow(-1, 0, n);
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_defined(x, "cumsum", "x");
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, src.dim(), "cumsum");
  const Tensor values = src.is_floating_point() ? src : src.to(kInt64);
  const Tensor out = cumsum_last(values.transpose(d, -1)).transpose(d, -1);
  return x.dim() == 0 ? out.reshape({}) : out;
}

namespace {

// Products along the last dim by a halving tree (the first half times the second, an odd
// length padded with a one), down to [..., 1]; an empty dim gives ones.
Tensor prod_last(Tensor t) {
  const TensorOptions options = TensorOptions(t.dtype()).device(t.device());
  if (t.size(-1) == 0) {
    Shape one = t.sizes();
    one.back() = 1;
    return ones(one, options);
  }
  while (t.size(-1) > 1) {
    const int64_t half = (t.size(-1) + 1) / 2;
    if (t.size(-1) % 2 == 1) t = cat({t, ones_like(t.narrow(-1, 0, 1))}, -1);
    t = mul(t.narrow(-1, 0, half), t.narrow(-1, half, half));
  }
  return t;
}

// Running products along the last dim by doubling: step s multiplies each element by the
// running product s places before it (ones before the start).
Tensor cumprod_last(Tensor t) {
  const int64_t n = t.size(-1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Shape lead = t.sizes();
    lead.back() = shift;
    t = mul(t, cat({ones(lead, TensorOptions(t.dtype()).device(t.device())), t.narrow(-1, 0, n - shift)}, -1));
  }
  return t;
}

// x as the products' operand: floating as it is, integers and bool as int64, at least 1-D.
Tensor product_operand(const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  const Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  return src.is_floating_point() ? src : src.to(kInt64);
}

}  // namespace

Tensor prod(const Tensor& x) {
  check_defined(x, "prod", "x");
  return prod(x.reshape({x.numel()}), 0);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  const Tensor src = product_operand(x, "prod");
  const int64_t d = wrap_dim(dim, src.dim(), "prod");
  const Tensor out = prod_last(src.transpose(d, -1)).transpose(d, -1);
  if (x.dim() == 0) return out.reshape({});
  return keepdim ? out : out.squeeze(d);
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  const Tensor src = product_operand(x, "cumprod");
  const int64_t d = wrap_dim(dim, src.dim(), "cumprod");
  const Tensor out = cumprod_last(src.transpose(d, -1)).transpose(d, -1);
  return x.dim() == 0 ? out.reshape({}) : out;
}

}  // namespace tinyddp::tensor
