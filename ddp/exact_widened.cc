// ExactGradientSum at one chunk per rank (exact_sum.h, widened()): a rank's sums of one chunk
// are that chunk's gradient rounded onto the grid, so the rank may as well send the float32
// gradient and let the rank that sums each block round it: the same integers (the rounding of
// a value does not depend on where it runs), 4 bytes an element on the wire instead of 8.
#include <algorithm>

#include "tinyddp/base/error.h"
#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/ddp/exact_values.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::ddp {

namespace t = tinyddp::tensor;

bool ExactGradientSum::take_values(size_t p) {
  std::vector<Tensor>& kept = pending_[p];
  const int64_t n = params_[p].numel(), padded = pg_->size() * block_[p];
  if (values_[p].defined() || kept.size() + taken_[p].size() > 1) {
    // Two gradients of p in one chunk are rounded apart: no one float32 value holds them. The
    // step is refused (the caller's fold then only bounds them) and run again with int64 sums.
    late_ = true;
    return false;
  }
  if (!buffers_[p].defined()) buffers_[p] = t::zeros({padded}, t::TensorOptions().dtype(t::kFloat32));
  bool finite = true;
  int bound = kUnknown;
  if (!taken_[p].empty()) {  // a product from linear()'s backward: computed here, as the fold would
    bound = fold_products(p, nullptr, 0, exact::Into::kStore, finite, buffers_[p].data_ptr<float>());
    values_[p] = buffers_[p];
  } else {  // a .grad, as it is where it fills the blocks, else copied into the padded buffer
    const Tensor& grad = kept.front();
    const std::vector<const float*> chunk{grad.data_ptr<float>()};
    bound = exact_detail::add_chunk_values(chunk, n, kUnknown, finite, nullptr, 0, exact::Into::kStore);
    if (n == padded) {
      values_[p] = grad.view({n});
    } else {
      buffers_[p].narrow(0, 0, n).copy_(grad.view({n}));
      values_[p] = buffers_[p];
    }
    kept.clear();
  }
  TDDP_CHECK(finite,
             "deterministic mode: the gradient of '{}' holds a NaN or an infinity; the fixed-point sum cannot hold it "
             "(lower the learning rate, or clip the gradients)",
             names_[p]);
  step_bound_[p] = std::max(step_bound_[p], bound);
  if (bound != kUnknown && bound > bound_[p] + headroom_) outgrown_ = true;
  return true;
}

void ExactGradientSum::launch_widened(size_t p) {
  const int64_t padded = pg_->size() * block_[p];
  if (!values_[p].defined()) {  // no gradient of p in this rank's chunk: zeros
    if (!buffers_[p].defined()) buffers_[p] = t::zeros({padded}, t::TensorOptions().dtype(t::kFloat32));
    buffers_[p].zero_();
    values_[p] = buffers_[p];
  }
  holds_[p] = true;  // the reduce-scatter writes this rank's block; no pass zeroes the sums
  const int scale = bits_ - (bound_[p] + headroom_);  // the grid agreed before the step, as fold_pending's
  launched_[p] = pg_->reduce_scatter_widened(
      sums_.narrow(0, offsets_[p], padded), values_[p], [scale](void* out, const void* in, size_t n, bool add) {
        const float* values = static_cast<const float*>(in);
        float largest = 0;
        bool finite = true;  // (the sender bounded and checked its values)
        exact::fold(&values, 1, static_cast<int64_t>(n), static_cast<int64_t*>(out), scale, largest, finite,
                    add ? exact::Into::kAdd : exact::Into::kStore);
      });
}

void ExactGradientSum::choose_widened(const std::vector<int64_t>& agreed) {
  const int64_t world = pg_ ? pg_->size() : 1;
  const size_t count = params_.size();
  for (size_t p = 0; p < count; ++p) {
    // Once some rank's chunk gave p two gradients, p keeps int64 sums: a graph that does so now
    // and then would otherwise cost a rerun each time.
    if (agreed[3 + count + p] != 0) several_[p] = true;
    widened_[p] = world > 1 && total_chunks_ == world && scattered_[p] && !sharded() &&
                  params_[p].dtype() == t::kFloat32 && bound_[p] != kUnknown && !several_[p];
  }
  std::fill(contributions_.begin(), contributions_.end(), 0);
  std::fill(values_.begin(), values_.end(), Tensor());
}

}  // namespace tinyddp::ddp
