// PowerSGD communication hooks: see powersgd.h.
#include "tinyddp/ddp/powersgd.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/flatten.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace t = tinyddp::tensor;

PowerSGDState::PowerSGDState(std::shared_ptr<comm::ProcessGroup> group, PowerSGDOptions o)
    : pg(std::move(group)), options(o), rng(o.random_seed_) {
  TDDP_CHECK(pg != nullptr, "PowerSGDState: no process group");
  TDDP_CHECK(options.matrix_approximation_rank_ >= 1, "PowerSGDState: matrix_approximation_rank must be at least 1, got {}",
             options.matrix_approximation_rank_);
  TDDP_CHECK(options.start_powerSGD_iter_ >= 0, "PowerSGDState: start_powerSGD_iter must be >= 0, got {}",
             options.start_powerSGD_iter_);
  TDDP_CHECK(!(options.use_error_feedback_ || options.warm_start_) || options.start_powerSGD_iter_ > 1,
             "PowerSGDState: start_powerSGD_iter must be > 1 with error feedback or warm start (got {}), so that DDP "
             "rebuilds its buckets before compression starts (as PyTorch requires)",
             options.start_powerSGD_iter_);
}

void orthogonalize(const Tensor& matrix, double epsilon) {
  t::NoGradGuard no_grad;
  const int64_t columns = matrix.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    const Tensor col = matrix.narrow(1, i, 1);
    const Tensor norm = t::sqrt(t::sum(t::mul(col, col)));
    if (epsilon != 0) norm.add_(epsilon);
    col.div_(norm);
    if (i + 1 < columns) {
      const Tensor rest = matrix.narrow(1, i + 1, columns - i - 1);
      rest.sub_(t::mul(t::sum(t::mul(col, rest), {0}, /*keepdim=*/true), col));
    }
  }
}

namespace {

// Counts the iteration at the end of each backward (the last bucket), as PyTorch does.
void count_iteration(PowerSGDState& s, const GradBucket& bucket) {
  if (bucket.is_last) ++s.iter;
}

// Plain allreduce of the bucket, divided by the world size (before start_powerSGD_iter).
std::shared_ptr<Future> vanilla(PowerSGDState& s, GradBucket& bucket) {
  count_iteration(s, bucket);
  const Tensor buffer = bucket.buffer;
  {
    t::NoGradGuard no_grad;
    buffer.div_(static_cast<double>(s.pg->size()));
  }
  return std::make_shared<WorkFuture>(s.pg->allreduce(buffer), [buffer] { return buffer; });
}

// A random [rows, rank] matrix from a seed drawn from the state's generator (the same on
// every rank, as every rank draws in the same order).
Tensor random_q(PowerSGDState& s, int64_t rows, int64_t rank, const Tensor& like) {
  t::Generator seeded(s.rng.random64() % 1000000000ULL);
  return t::randn({rows, rank}, t::TensorOptions(like.dtype()), &seeded).to(like.device());
}

// Adds the bucket's previous error (creating a zero one the first time) and returns a copy of
// what is to be sent, or nothing without error feedback.
Tensor add_error(PowerSGDState& s, size_t bucket, const Tensor& input) {
  if (!s.options.use_error_feedback_) return Tensor();
  auto it = s.error.find(bucket);
  if (it == s.error.end() || it->second.numel() != input.numel()) {
    s.error[bucket] = t::zeros_like(input);
  } else {
    input.add_(it->second);
  }
  return input.clone();
}

// The end of a compressed step: the error is what was to be sent minus what is applied; the P
// and Q memories go unless warm start keeps them; the iteration is counted.
void finish_step(PowerSGDState& s, const GradBucket& bucket, const Tensor& sent, const Tensor& applied) {
  if (sent.defined()) s.error[bucket.index] = t::sub(sent, applied);
  if (!s.options.warm_start_) {
    s.p_memory.clear();
    s.q_memory.clear();
  }
  count_iteration(s, bucket);
}

}  // namespace

CommHook powersgd_hook(std::shared_ptr<PowerSGDState> state) {
  TDDP_CHECK(state != nullptr, "powersgd_hook: no state");
  return [state](GradBucket& bucket) -> std::shared_ptr<Future> {
    PowerSGDState& s = *state;
    if (s.iter < s.options.start_powerSGD_iter_) return vanilla(s, bucket);
    t::NoGradGuard no_grad;
    const Tensor input = bucket.buffer;
    const size_t index = bucket.index;
    const Tensor sent = add_error(s, index, input);
    // Which gradients to compress: those that shrink by min_compression_rate at this rank.
    std::vector<Tensor> matrices, uncompressed;
    std::vector<int64_t> ranks;
    int64_t p_size = 0, q_size = 0;
    for (const Tensor& g : bucket.gradients()) {
      const int64_t n = g.dim() == 0 ? 1 : g.size(0);
      const int64_t m = n == 0 ? 0 : g.numel() / n;
      const int64_t r = std::min<int64_t>({n, m, s.options.matrix_approximation_rank_});
      const int64_t before = n * m, after = (n + m) * r;
      s.numel_before_compression += before;
      if (static_cast<double>(after) * s.options.min_compression_rate_ < static_cast<double>(before)) {
        matrices.push_back(g.view({n, m}));
        ranks.push_back(r);
        p_size += n * r;
        q_size += m * r;
        s.numel_after_compression += after;
      } else {
        uncompressed.push_back(g);
        s.numel_after_compression += before;
      }
    }
    const Tensor uncompressed_memory = uncompressed.empty()
                                           ? t::zeros({0}, t::TensorOptions(input.dtype()).device(input.device()))
                                           : comm::flatten(uncompressed);
    const bool randomize = !s.options.warm_start_ || !s.p_memory.count(index) || s.p_memory[index].numel() != p_size;
    if (randomize) {
      s.p_memory[index] = t::zeros({p_size}, t::TensorOptions(input.dtype()).device(input.device()));
      s.q_memory[index] = t::zeros({q_size}, t::TensorOptions(input.dtype()).device(input.device()));
    }
    std::vector<Tensor> ps, qs;
    int64_t p_offset = 0, q_offset = 0;
    for (size_t k = 0; k < matrices.size(); ++k) {
      const int64_t n = matrices[k].size(0), m = matrices[k].size(1), r = ranks[k];
      ps.push_back(s.p_memory[index].narrow(0, p_offset, n * r).view({n, r}));
      qs.push_back(s.q_memory[index].narrow(0, q_offset, m * r).view({m, r}));
      p_offset += n * r;
      q_offset += m * r;
      if (randomize) qs.back().copy_(random_q(s, m, r, input));
      orthogonalize(qs.back(), s.options.orthogonalization_epsilon_);
      ps.back().copy_(t::matmul(matrices[k], qs.back()));  // P = M Q
    }
    auto work = s.pg->allreduce(uncompressed_memory);
    return std::make_shared<WorkFuture>(std::move(work), [state, bucket, input, sent, index, matrices, uncompressed,
                                                           uncompressed_memory, ps, qs] {
      PowerSGDState& s = *state;
      t::NoGradGuard no_grad;
      const double world = static_cast<double>(s.pg->size());
      uncompressed_memory.div_(world);
      if (!uncompressed.empty()) comm::unflatten_into(uncompressed_memory, uncompressed);
      s.pg->allreduce(s.p_memory[index])->wait();  // the sum of the ranks' P
      for (size_t k = 0; k < matrices.size(); ++k) {
        orthogonalize(ps[k], s.options.orthogonalization_epsilon_);
        qs[k].copy_(t::matmul(matrices[k].t(), ps[k]));  // Q = M^T P
      }
      s.pg->allreduce(s.q_memory[index])->wait();
      s.q_memory[index].div_(world);
      for (size_t k = 0; k < matrices.size(); ++k) matrices[k].copy_(t::matmul(ps[k], qs[k].t()));  // M ~ P Q^T
      finish_step(s, bucket, sent, input);
      return input;
    });
  };
}

CommHook batched_powersgd_hook(std::shared_ptr<PowerSGDState> state) {
  TDDP_CHECK(state != nullptr, "batched_powersgd_hook: no state");
  return [state](GradBucket& bucket) -> std::shared_ptr<Future> {
    PowerSGDState& s = *state;
    if (s.iter < s.options.start_powerSGD_iter_) return vanilla(s, bucket);
    t::NoGradGuard no_grad;
    const Tensor input = bucket.buffer;
    const size_t index = bucket.index;
    const int64_t total = input.numel();
    const auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
    const int64_t rank = s.options.matrix_approximation_rank_;
    s.numel_before_compression += total;
    s.numel_after_compression += side * rank * 2;
    // The bucket padded with zeros to side x side.
    const Tensor padded = t::zeros({side * side}, t::TensorOptions(input.dtype()).device(input.device()));
    padded.narrow(0, 0, total).copy_(input);
    const Tensor sent = add_error(s, index, padded);
    const Tensor matrix = padded.view({side, side});
    if (!s.options.warm_start_ || !s.p_memory.count(index) || s.p_memory[index].size(0) != side) {
      s.p_memory[index] = t::zeros({side, rank}, t::TensorOptions(input.dtype()).device(input.device()));
      s.q_memory[index] = random_q(s, side, rank, input);
    }
    orthogonalize(s.q_memory[index], s.options.orthogonalization_epsilon_);
    s.p_memory[index].copy_(t::matmul(matrix, s.q_memory[index]));
    auto work = s.pg->allreduce(s.p_memory[index]);
    return std::make_shared<WorkFuture>(std::move(work), [state, bucket, input, padded, matrix, sent, index, total] {
      PowerSGDState& s = *state;
      t::NoGradGuard no_grad;
      const Tensor& p = s.p_memory[index];
      const Tensor& q = s.q_memory[index];
      orthogonalize(p, s.options.orthogonalization_epsilon_);
      q.copy_(t::matmul(matrix.t(), p));
      s.pg->allreduce(q)->wait();
      q.div_(static_cast<double>(s.pg->size()));
      matrix.copy_(t::matmul(p, q.t()));
      finish_step(s, bucket, sent, padded);
      input.copy_(padded.narrow(0, 0, total));
      return input;
    });
  };
}

}  // namespace tinyddp::ddp
