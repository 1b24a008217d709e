// ExactGradientSum (exact_sum.h): chunks' gradients rounded onto a fixed-point grid, summed as
// integers over the chunks and the ranks, and turned back into one mean per parameter.
#include "tinyddp/ddp/exact_sum.h"

#include "tinyddp/autograd/accumulate_grad.h"
#include "tinyddp/autograd/engine.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/host_staging.h"
#include "tinyddp/ddp/exact_fold.h"
#include "tinyddp/ddp/exact_values.h"
#include "tinyddp/ddp/reducer.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::ddp {

namespace {

namespace t = tinyddp::tensor;
using exact_detail::add_chunk_values;
using exact_detail::bound_of;
using exact_detail::kGrain;

// From this many elements a parameter's int64 sums are reduce-scattered and its means
// allgathered (each rank converts 1/W of them; (W - 1) / W of 8 + 4 bytes an element on the
// wire, not 2 x 8); below, its sums share an allreduce with the small parameters beside it
// (a run of up to this many elements), whose small messages cost less.
constexpr int64_t kScatterElements = 1 << 16;

// Products of more rows than this are declined by take(): there the product's multiply-adds
// outweigh the float32 gradient's one write and read, and the GEMM's kernels run them faster
// than the register fold does (bench/README.md, "Deep products").
constexpr int64_t kFoldRows = 128;

// Bits a sum of `count` integers needs beyond one of them.
int guard_bits(int64_t count) {
  int bits = 0;
  while ((int64_t{1} << bits) < count) ++bits;
  return bits;
}

}  // namespace

ExactGradientSum::ExactGradientSum(std::vector<Tensor> params, std::vector<std::string> names,
                                   std::shared_ptr<comm::ProcessGroup> pg, int64_t total_chunks, int headroom_bits)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)), total_chunks_(total_chunks),
      headroom_(headroom_bits) {
  lay_out();
}

ExactGradientSum::ExactGradientSum(std::vector<Tensor> params, std::vector<std::string> names,
                                   std::shared_ptr<comm::ProcessGroup> pg, int64_t total_chunks,
                                   ShardedGradients sharded, int headroom_bits)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)), total_chunks_(total_chunks),
      headroom_(headroom_bits), sharded_(std::move(sharded)) {
  TDDP_CHECK(sharded_.shards.size() == params_.size() && sharded_.full_shapes.size() == params_.size() &&
                 sharded_.block_rows.size() == params_.size(),
             "ExactGradientSum: {} shards, {} shapes and {} block sizes for {} parameters", sharded_.shards.size(),
             sharded_.full_shapes.size(), sharded_.block_rows.size(), params_.size());
  lay_out();
}

void ExactGradientSum::lay_out() {
  TDDP_CHECK(names_.size() == params_.size(), "ExactGradientSum: {} names for {} parameters", names_.size(),
             params_.size());
  TDDP_CHECK(total_chunks_ >= 1, "ExactGradientSum: total_chunks must be at least 1, got {}", total_chunks_);
  TDDP_CHECK(headroom_ >= 0 && headroom_ <= 16, "ExactGradientSum: headroom_bits must be in [0, 16], got {}",
             headroom_);
  bits_ = 62 - guard_bits(total_chunks_);
  TDDP_CHECK(bits_ - headroom_ >= 30,
             "ExactGradientSum: {} chunks per step leave {} bits of the int64 sums below the gradients' bound, fewer "
             "than 30: use fewer, larger chunks",
             total_chunks_, bits_ - headroom_);
  const int64_t world = pg_ ? pg_->size() : 1;
  for (size_t p = 0; p < params_.size(); ++p) {
    const t::DType dtype = target(p).dtype();
    TDDP_CHECK(dtype == t::kFloat32 || dtype == t::kFloat64,
               "ExactGradientSum: parameter '{}' is {}; the exact sum takes float32 or float64", names_[p],
               t::dtype_name(dtype));
    if (!sharded()) {
      // A large parameter's sums in W blocks of ceil(n / W) (the last padded with zeros), for
      // the reduce-scatter; a small one's whole, for its run's allreduce (lay_out_runs).
      const int64_t n = params_[p].numel();
      scattered_.push_back(world > 1 && n >= kScatterElements);
      block_.push_back(scattered_.back() ? (n + world - 1) / world : n);
      lengths_.push_back(scattered_.back() ? world * block_.back() : n);
      continue;
    }
    // W blocks of block_rows rows, the last ones padded: the reduce-scatter's inputs.
    const t::Shape& shape = sharded_.full_shapes[p];
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t block = sharded_.block_rows[p] * (rows == 0 ? 0 : t::shape_numel(shape) / rows);
    TDDP_CHECK(sharded_.block_rows[p] * world >= rows && sharded_.shards[p].numel() == block,
               "ExactGradientSum: the shard of '{}' holds {} elements, not a block of {} rows of its {} over {} ranks",
               names_[p], sharded_.shards[p].numel(), sharded_.block_rows[p], t::format_shape(shape), world);
    scattered_.push_back(true);
    block_.push_back(block);
    lengths_.push_back(world * block);
  }
  // The scattered parameters' sums first, in parameter order, then the small ones'.
  int64_t offset = 0;
  offsets_.assign(params_.size(), 0);
  for (int small = 0; small < 2; ++small) {
    for (size_t p = 0; p < params_.size(); ++p) {
      if (scattered_[p] == (small == 1)) continue;
      offsets_[p] = offset;
      offset += lengths_[p];
    }
  }
  lay_out_runs();
  // The sums live on the CPU; a group that takes device tensors only (NCCL) adds them on the
  // device, each collective's tensors copied there and back (comm/host_staging.h).
  if (pg_) pg_ = comm::host_staged(pg_, control_device(*pg_, params_));
  sums_ = t::zeros({offset}, t::TensorOptions().dtype(t::kInt64));
  bound_.assign(params_.size(), kUnknown);
  step_bound_.assign(params_.size(), kUnknown);
  added_.assign(params_.size(), false);
  holds_.assign(params_.size(), false);
  launched_.assign(params_.size(), nullptr);
  widened_.assign(params_.size(), false);
  several_.assign(params_.size(), false);
  contributions_.assign(params_.size(), 0);
  values_.assign(params_.size(), Tensor());
  buffers_.assign(params_.size(), Tensor());
  pending_.assign(params_.size(), {});
  taken_.assign(params_.size(), {});
  taken_now_.assign(params_.size(), 0);
  got_grad_.assign(params_.size(), false);
  solo_.assign(params_.size(), false);
  mixed_.assign(params_.size(), false);
  for (size_t p = 0; p < params_.size(); ++p) by_impl_[params_[p].impl_ptr().get()] = p;
}

void ExactGradientSum::lay_out_runs() {
  // Runs of small parameters with no scattered one between them, in launch order (the last
  // parameter first), each up to kScatterElements: side by side in the sums, so one allreduce.
  run_of_.assign(params_.size(), -1);
  bool open = false;
  for (size_t p = params_.size(); p-- > 0;) {
    if (scattered_[p]) {
      open = false;
      continue;
    }
    if (!open || runs_.back().length + lengths_[p] > kScatterElements) runs_.push_back({});
    open = true;
    SmallRun& run = runs_.back();
    run.members.push_back(p);
    run.offset = offsets_[p];  // the lowest so far: the members are laid out in parameter order
    run.length += lengths_[p];
    run_of_[p] = static_cast<int>(runs_.size()) - 1;
  }
}

ExactGradientSum::~ExactGradientSum() {
  for (auto& hook : hooks_) hook.remove();
}

Tensor ExactGradientSum::means(size_t p, int scale, std::shared_ptr<comm::Work>& gather) {
  // sum x 2^-scale / total_chunks, rounded to double, then once more to float32 parameters.
  // (step_sums: the sums the collective added up, or zeros where no chunk folded into them.)
  const int64_t world = pg_ ? pg_->size() : 1, rank = pg_ ? pg_->rank() : 0;
  const int64_t first = scattered_[p] ? rank * block_[p] : 0;
  const int64_t* sum = step_sums(p).data_ptr<int64_t>() + first;
  const t::TensorOptions options = t::TensorOptions().dtype(target(p).dtype());
  const bool gathered = scattered_[p] && !sharded();
  Tensor out = gathered ? t::empty({world * block_[p]}, options) : t::empty(target(p).sizes(), options);
  const Tensor own = gathered ? out.narrow(0, first, block_[p]) : out;
  const auto convert = [&](auto* values) {
    t::parallel_for(0, own.numel(), kGrain, [&](int64_t begin, int64_t end) {
      exact::unfold(sum + begin, end - begin, scale, static_cast<double>(total_chunks_), values + begin);
    });
  };
  if (out.dtype() == t::kFloat32) {
    convert(own.data_ptr<float>());
  } else {
    convert(own.data_ptr<double>());
  }
  if (!gathered) return out;
  gather = pg_->allgather(comm::flat_views(out, std::vector<t::Shape>(world, {block_[p]})),
                          own);  // in place: own is blocks[rank]
  return out.narrow(0, 0, params_[p].numel()).view(params_[p].sizes());
}

void ExactGradientSum::clear_gradients() {
  for (size_t p = 0; p < params_.size(); ++p) {
    params_[p].mutable_grad() = Tensor();
    if (sharded()) sharded_.shards[p].mutable_grad() = Tensor();
    taken_[p].clear();  // (a step that threw left them)
    values_[p] = Tensor();
    contributions_[p] = 0;
  }
}

void ExactGradientSum::add_gradient(size_t p) {
  t::NoGradGuard no_grad;
  added_[p] = true;
  const Tensor grad = params_[p].grad();
  if (!grad.defined()) return;  // no gradient: zeros
  got_grad_[p] = true;
  ++contributions_[p];
  // (A float16 or bfloat16 gradient, fully_shard's mixed precision, is exact in float32.)
  const bool half = grad.dtype() == t::kFloat16 || grad.dtype() == t::kBFloat16;
  pending_[p].push_back(half ? grad.to(t::Device(t::kCPU)).to(t::kFloat32) : grad.to(t::Device(t::kCPU)).contiguous());
  // Kept: the next chunk's backward gives the parameter a .grad of its own (no pass to zero
  // this one, none to add into it).
  params_[p].mutable_grad() = Tensor();
  if (pending_[p].size() >= max_pending_) fold_pending(p);
}

void ExactGradientSum::keep_chunks(size_t count) {
  TDDP_CHECK(count >= 1, "ExactGradientSum::keep_chunks: keeps at least 1 chunk, got {}", count);
  max_pending_ = count;
}

void ExactGradientSum::fold_pending(size_t p) {
  std::vector<Tensor>& kept = pending_[p];
  if (kept.empty() && taken_[p].empty()) return;
  if (widened_[p] && take_values(p)) return;  // its values leave as they are (exact_widened.cc)
  // Added on the grid agreed before the step, unless nothing is agreed yet or a chunk already
  // outgrew its grid (the step will be refused: only the bounds matter then), or the sums come
  // from the ranks' values.
  const bool adding = bound_[p] != kUnknown && !outgrown_ && !widened_[p];
  const int scale = adding ? bits_ - (bound_[p] + headroom_) : 0;  // |x| < 2^(bound + H): |x 2^scale| < 2^B
  int64_t* sums = adding ? sums_.data_ptr<int64_t>() + offsets_[p] : nullptr;
  // The step's first fold into p's sums writes over what the last step left (no pass zeroes them).
  const auto into = [&] { return holds_[p] ? exact::Into::kAdd : exact::Into::kStore; };
  bool finite = true;
  int bound = kUnknown;
  if (!kept.empty()) {
    const auto fold_all = [&](auto type) {
      using T = decltype(type);
      std::vector<const T*> chunks;
      for (const Tensor& g : kept) chunks.push_back(g.data_ptr<T>());
      return add_chunk_values(chunks, kept.front().numel(), kUnknown, finite, sums, scale, into());
    };
    bound = kept.front().dtype() == t::kFloat32 ? fold_all(float{}) : fold_all(double{});
    kept.clear();
    if (sums != nullptr) holds_[p] = true;
  }
  if (!taken_[p].empty()) {
    bool products_finite = true;
    bound = std::max(bound, fold_products(p, sums, scale, into(), products_finite));
    finite = finite && products_finite;
    if (sums != nullptr) holds_[p] = true;
  }
  TDDP_CHECK(finite,
             "deterministic mode: the gradient of '{}' holds a NaN or an infinity; the fixed-point sum cannot hold it "
             "(lower the learning rate, or clip the gradients)",
             names_[p]);
  step_bound_[p] = std::max(step_bound_[p], bound);
  if (bound != kUnknown && (bound_[p] == kUnknown || bound > bound_[p] + headroom_)) outgrown_ = true;
}

bool ExactGradientSum::take(const t::TensorImpl* weight, const Tensor& grad_out, const Tensor& input) {
  const auto it = by_impl_.find(weight);
  if (it == by_impl_.end() || sharded() || t::GradMode::is_enabled() || autograd::Engine::pass_depth() != 1) {
    return false;
  }
  const size_t p = it->second;
  const Tensor& param = params_[p];
  const auto plain = [](const Tensor& v) { return v.dtype() == t::kFloat32 && v.device().type == t::kCPU; };
  if (!plain(param) || !plain(grad_out) || !plain(input) || param.dim() != 2 || grad_out.dim() != 2 ||
      input.dim() != 2 || grad_out.size(0) != input.size(0) || grad_out.size(1) != param.size(0) ||
      input.size(1) != param.size(1) || param.grad_accumulator()->has_pre_hooks() || grad_out.size(0) > kFoldRows) {
    return false;
  }
  if (overlapping_ && launched_[p]) {  // its sums already left: more of its gradient, too late
    late_ = true;
    mixed_[p] = true;
    ++contributions_[p];
    return true;
  }
  const Tensor x = input.stride(1) == 1 ? input : input.contiguous();
  taken_[p].push_back({grad_out, x, grad_out.storage().version(), x.storage().version()});
  ++taken_now_[p];
  ++contributions_[p];
  if (overlapping_ && solo_[p]) {  // its accumulator will not run: its sums may leave
    added_[p] = true;
    fold_pending(p);
    ready(p);
  } else if (taken_[p].size() >= max_pending_) {
    fold_pending(p);  // as many as keep_chunks keeps
  }
  return true;
}

int ExactGradientSum::fold_products(size_t p, int64_t* sums, int scale, exact::Into into, bool& finite, float* values) {
  std::vector<exact::Product> products;
  for (const Taken& k : taken_[p]) {
    TDDP_CHECK(k.g.storage().version() == k.g_version && k.x.storage().version() == k.x_version,
               "deterministic mode: the input or output gradient of the linear layer of '{}' was modified in place "
               "after its chunk's backward, before its product was summed",
               names_[p]);
    products.push_back(
        {k.g.data_ptr<float>(), k.g.stride(0), k.g.stride(1), k.x.data_ptr<float>(), k.x.stride(0), k.g.size(0)});
  }
  const int64_t rows = params_[p].size(0), m = params_[p].size(1);
  std::mutex mutex;
  float largest = 0;
  finite = true;
  // Rows of the sums per task: about kGrain outputs each (any split gives the same integers).
  t::parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(m, 1)), [&](int64_t begin, int64_t end) {
    float mine = 0;
    bool ok = true;
    if (values != nullptr) {
      exact::product_values(products.front(), m, begin, end, values, mine, ok);
    } else {
      exact::fold_products(products.data(), static_cast<int>(products.size()), m, begin, end, sums, scale, mine, ok,
                           into);
    }
    std::lock_guard<std::mutex> lock(mutex);
    largest = std::max(largest, mine);
    finite = finite && ok;
  });
  taken_[p].clear();
  return bound_of(largest, finite, kUnknown);
}

void ExactGradientSum::add_chunk() {
  for (size_t p = 0; p < params_.size(); ++p) {
    if (!added_[p]) add_gradient(p);  // what no hook added (every parameter, without overlap)
    solo_[p] = taken_now_[p] == 1 && !got_grad_[p] && !mixed_[p];
  }
  std::fill(added_.begin(), added_.end(), false);
  std::fill(taken_now_.begin(), taken_now_.end(), 0);
  std::fill(got_grad_.begin(), got_grad_.end(), false);
  overlapping_ = false;
  ++chunks_;
}

bool ExactGradientSum::finish(std::vector<int64_t>* maxed) {
  t::NoGradGuard no_grad;
  for (size_t p = 0; p < params_.size(); ++p) fold_pending(p);
  // Every sum not on its way yet leaves now, in the order the overlap launches them (the last
  // parameter first): whatever each rank launched early, the ranks issue the same collectives
  // in the same order (a refused step's sums are dropped).
  if (pg_) {
    for (size_t p = params_.size(); p-- > 0;) {
      if (!launched_[p]) launch(p);
    }
  }
  // One max-allreduce: whether any rank's chunk outgrew its grid (or had gradient after its
  // sums left), this rank's count of chunks (and its negative: the least count), and the bound
  // of each parameter's gradients over every chunk of the step.
  std::vector<int64_t> control{outgrown_ || late_ ? 1 : 0, chunks_, -chunks_};
  for (int b : step_bound_) control.push_back(b);
  for (int c : contributions_) control.push_back(c > 1 ? 1 : 0);  // (widened_: next step's)
  const size_t own = control.size();
  if (maxed != nullptr) control.insert(control.end(), maxed->begin(), maxed->end());
  Tensor agreed = t::from_vector(control);
  if (pg_) pg_->allreduce(agreed, comm::ReduceOp::kMax)->wait();
  const std::vector<int64_t> got = agreed.to_vector<int64_t>();
  if (maxed != nullptr) std::copy(got.begin() + static_cast<std::ptrdiff_t>(own), got.end(), maxed->begin());
  const bool refused = got[0] != 0;
  for (auto& work : launched_) {
    if (work) work->wait();
    work = nullptr;
  }
  const std::vector<int> previous = bound_;
  // A parameter no chunk of the step gave a gradient (an unused layer) keeps its grid: its next
  // gradients are added on it, not refused as on a first step.
  for (size_t p = 0; p < params_.size(); ++p) {
    if (got[p + 3] != kUnknown) bound_[p] = static_cast<int>(got[p + 3]);
  }
  choose_widened(got);
  std::fill(step_bound_.begin(), step_bound_.end(), kUnknown);
  outgrown_ = late_ = false;
  const int64_t chunks_here = chunks_, world = pg_ ? pg_->size() : 1;
  chunks_ = 0;
  TDDP_CHECK(got[1] == -got[2] && got[1] * world == total_chunks_,
             "deterministic mode: the ranks added {} to {} chunks this step ({} on this rank), but a step has {} "
             "chunks, {} per rank",
             -got[2], got[1], chunks_here, total_chunks_, total_chunks_ / world);
  if (refused) {  // on every rank alike
    std::fill(holds_.begin(), holds_.end(), false);
    ++reruns_;
    return false;
  }
  // Back to floats on the grid this step's chunks were added on (the bound agreed before it):
  // each rank its blocks of the scattered sums, whose means an allgather then shares.
  std::vector<Tensor> means_of(params_.size());
  std::vector<std::shared_ptr<comm::Work>> gathers(params_.size());
  for (size_t p = 0; p < params_.size(); ++p) {
    means_of[p] = means(p, previous[p] == kUnknown ? 0 : bits_ - (previous[p] + headroom_), gathers[p]);
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    if (gathers[p]) gathers[p]->wait();
    target(p).mutable_grad() = means_of[p].to(target(p).device());
  }
  std::fill(holds_.begin(), holds_.end(), false);
  return true;
}

int ExactGradientSum::precision_bits_for(int64_t total_chunks, int headroom_bits) {
  return 62 - guard_bits(total_chunks) - headroom_bits;
}

std::vector<int64_t> ExactGradientSum::grid_state() const { return {bound_.begin(), bound_.end()}; }

void ExactGradientSum::load_grid_state(const std::vector<int64_t>& bounds) {
  TDDP_CHECK(bounds.size() == params_.size(),
             "ExactGradientSum::load_grid_state: {} bounds for {} parameters (a state saved for another model?)",
             bounds.size(), params_.size());
  for (size_t p = 0; p < bounds.size(); ++p) {
    // A float64 gradient's exponent lies within [-1073, 1024]; nothing outside can be a bound.
    TDDP_CHECK(bounds[p] == kUnknownBound || (bounds[p] >= -1100 && bounds[p] <= 1100),
               "ExactGradientSum::load_grid_state: the bound {} of '{}' is not an exponent (a corrupt state?)",
               bounds[p], names_[p]);
    bound_[p] = static_cast<int>(bounds[p]);
  }
}

}  // namespace tinyddp::ddp
