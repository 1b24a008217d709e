// PowerSGD (powersgd.h): the hooks that send low-rank factors P and Q of each bucket's
// matrices instead of the gradients, with error feedback, warm-started Q, and the plain
// allreduce before start_powerSGD_iter; written as a chain of Future::then.
#include "tinyddp/ddp/powersgd.h"

#include <algorithm>
#include <cmath>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/flatten.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

namespace t = tinyddp::tensor;

PowerSGDState::PowerSGDState(std::shared_ptr<comm::ProcessGroup> group, PowerSGDOptions o)
    : pg(std::move(group)), options(o), rng(o.random_seed()) {
  TDDP_CHECK(pg != nullptr, "PowerSGDState: no process group");
  TDDP_CHECK(options.matrix_approximation_rank() >= 1,
             "PowerSGDState: matrix_approximation_rank must be at least 1, got {}",
             options.matrix_approximation_rank());
  TDDP_CHECK(options.start_powerSGD_iter() >= 0, "PowerSGDState: start_powerSGD_iter must be >= 0, got {}",
             options.start_powerSGD_iter());
  TDDP_CHECK(!(options.use_error_feedback() || options.warm_start()) || options.start_powerSGD_iter() > 1,
             "PowerSGDState: start_powerSGD_iter must be > 1 with error feedback or warm start (got {}), so that DDP "
             "rebuilds its buckets before compression starts (as PyTorch requires)",
             options.start_powerSGD_iter());
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

// Counts the iteration at the end of each backward (the last bucket), as PyTorch does. The
// compressed hooks count in their last callback: the next backward's hooks, which read the
// count, start only after finalize_backward waited for that callback's future.
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
  return s.pg->allreduce(buffer)->get_future();
}

// A random [rows, rank] matrix from a seed drawn from the state's generator (the same on
// every rank, as every rank draws in the same order).
Tensor random_q(PowerSGDState& s, int64_t rows, int64_t rank, const Tensor& like) {
  t::Generator seeded(s.rng.random64() % 1000000000ULL);
  return t::randn({rows, rank}, t::TensorOptions(like.dtype()), &seeded).to(like.device());
}

// Adds the bucket's previous error (creating a zero one the first time) to `input`. Returns
// the bucket's error tensor, which the step's last callback overwrites, or nothing without
// error feedback.
Tensor add_error(PowerSGDState& s, size_t bucket, const Tensor& input) {
  if (!s.options.use_error_feedback()) return Tensor();
  auto it = s.error.find(bucket);
  if (it == s.error.end() || it->second.numel() != input.numel()) {
    it = s.error.insert_or_assign(bucket, t::zeros_like(input)).first;
  } else {
    input.add_(it->second);
  }
  return it->second;
}

// A bucket's P and Q memories ([p_numel] and [q_numel], or the shapes given): the kept ones
// with warm start, else new. Returns whether they are new (Q must be drawn at random).
// Without warm start nothing is kept (PyTorch clears them after every step).
bool memories(PowerSGDState& s, size_t bucket, const t::Shape& p_shape, const t::Shape& q_shape, const Tensor& like,
              Tensor& p, Tensor& q) {
  auto kept = s.p_memory.find(bucket);
  if (s.options.warm_start() && kept != s.p_memory.end() && kept->second.sizes() == p_shape) {
    p = kept->second;
    q = s.q_memory.at(bucket);
    return false;
  }
  const auto options = t::TensorOptions(like.dtype()).device(like.device());
  p = t::zeros(p_shape, options);
  q = t::zeros(q_shape, options);
  if (s.options.warm_start()) {
    s.p_memory[bucket] = p;
    s.q_memory[bucket] = q;
  }
  return true;
}

// The callbacks below run when the previous collective finished (on Gloo, on its worker
// thread), so they touch only the tensors handed to them, never the state's maps, which the
// hooks of later buckets change meanwhile.

// The end of a compressed step: the error is what was to be sent minus what is applied.
void keep_error(const Tensor& error, const Tensor& sent, const Tensor& applied) {
  if (error.defined()) error.copy_(t::sub(sent, applied));
}

}  // namespace

CommHook powersgd_hook(std::shared_ptr<PowerSGDState> state) {
  TDDP_CHECK(state != nullptr, "powersgd_hook: no state");
  return [state](GradBucket& bucket) -> std::shared_ptr<Future> {
    PowerSGDState& s = *state;
    if (s.iter < s.options.start_powerSGD_iter()) return vanilla(s, bucket);
    t::NoGradGuard no_grad;
    const Tensor input = bucket.buffer;
    const Tensor error = add_error(s, bucket.index, input);
    const Tensor sent = error.defined() ? input.clone() : Tensor();
    // Which gradients to compress: those that shrink by min_compression_rate at this rank.
    std::vector<Tensor> matrices, uncompressed;
    std::vector<t::Shape> p_shapes, q_shapes;  // per compressed matrix: P [n, r] and Q [m, r]
    int64_t p_size = 0, q_size = 0;
    for (const Tensor& g : bucket.gradients()) {
      const int64_t n = g.dim() == 0 ? 1 : g.size(0);
      const int64_t m = n == 0 ? 0 : g.numel() / n;
      const int64_t r = std::min<int64_t>({n, m, s.options.matrix_approximation_rank()});
      const int64_t before = n * m, after = (n + m) * r;
      s.numel_before_compression += before;
      if (static_cast<double>(after) * s.options.min_compression_rate() < static_cast<double>(before)) {
        matrices.push_back(g.view({n, m}));
        p_shapes.push_back({n, r});
        q_shapes.push_back({m, r});
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
    Tensor p_memory, q_memory;
    const bool randomize = memories(s, bucket.index, {p_size}, {q_size}, input, p_memory, q_memory);
    // Each matrix's P and Q are slots of the bucket's two memories (one allreduce each).
    const std::vector<Tensor> ps = comm::flat_views(p_memory, p_shapes), qs = comm::flat_views(q_memory, q_shapes);
    for (size_t k = 0; k < matrices.size(); ++k) {
      if (randomize) qs[k].copy_(random_q(s, q_shapes[k][0], q_shapes[k][1], input));
      orthogonalize(qs[k], s.options.orthogonalization_epsilon());
      ps[k].copy_(t::matmul(matrices[k], qs[k]));  // P = M Q
    }
    const auto pg = s.pg;
    const double world = static_cast<double>(pg->size());
    const double epsilon = s.options.orthogonalization_epsilon();
    // 1. The uncompressed tensors, averaged; then the sum of the ranks' P.
    return pg->allreduce(uncompressed_memory)
        ->get_future()
        ->then([pg, world, uncompressed, p_memory](Future& done) {
          const Tensor flat = done.value();
          flat.div_(world);
          if (!uncompressed.empty()) comm::unflatten_into(flat, uncompressed);
          return pg->allreduce(p_memory)->get_future();
        })
        // 2. P orthogonalised, Q = M^T P, and the sum of the ranks' Q.
        ->then([pg, epsilon, matrices, ps, qs, q_memory](Future& done) {
          done.value();
          for (size_t k = 0; k < matrices.size(); ++k) {
            orthogonalize(ps[k], epsilon);
            qs[k].copy_(t::matmul(matrices[k].t(), ps[k]));  // Q = M^T P
          }
          return pg->allreduce(q_memory)->get_future();
        })
        // 3. The bucket becomes P Q^T / world; the error and the iteration count are kept.
        ->then([state, bucket, world, input, matrices, ps, qs, error, sent](Future& done) {
          done.value().div_(world);
          for (size_t k = 0; k < matrices.size(); ++k) matrices[k].copy_(t::matmul(ps[k], qs[k].t()));  // M ~ P Q^T
          keep_error(error, sent, input);
          count_iteration(*state, bucket);
          return input;
        });
  };
}

CommHook batched_powersgd_hook(std::shared_ptr<PowerSGDState> state) {
  TDDP_CHECK(state != nullptr, "batched_powersgd_hook: no state");
  return [state](GradBucket& bucket) -> std::shared_ptr<Future> {
    PowerSGDState& s = *state;
    if (s.iter < s.options.start_powerSGD_iter()) return vanilla(s, bucket);
    t::NoGradGuard no_grad;
    const Tensor input = bucket.buffer;
    const int64_t total = input.numel();
    const auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
    const int64_t rank = s.options.matrix_approximation_rank();
    s.numel_before_compression += total;
    s.numel_after_compression += side * rank * 2;
    // The bucket padded with zeros to side x side.
    const Tensor padded = t::zeros({side * side}, t::TensorOptions(input.dtype()).device(input.device()));
    padded.narrow(0, 0, total).copy_(input);
    const Tensor error = add_error(s, bucket.index, padded);
    const Tensor sent = error.defined() ? padded.clone() : Tensor();
    const Tensor matrix = padded.view({side, side});
    Tensor p, q;
    if (memories(s, bucket.index, {side, rank}, {side, rank}, input, p, q)) q.copy_(random_q(s, side, rank, input));
    orthogonalize(q, s.options.orthogonalization_epsilon());
    p.copy_(t::matmul(matrix, q));
    const auto pg = s.pg;
    const double world = static_cast<double>(pg->size());
    const double epsilon = s.options.orthogonalization_epsilon();
    // 1. The sum of the ranks' P, orthogonalised; Q = M^T P, and the sum of the ranks' Q.
    return pg->allreduce(p)
        ->get_future()
        ->then([pg, epsilon, matrix, p, q](Future& done) {
          orthogonalize(done.value(), epsilon);
          q.copy_(t::matmul(matrix.t(), p));
          return pg->allreduce(q)->get_future();
        })
        // 2. The bucket becomes P Q^T / world (unpadded); the error and the count are kept.
        ->then([state, bucket, world, input, padded, matrix, p, error, sent, total](Future& done) {
          const Tensor q_sum = done.value();
          q_sum.div_(world);
          matrix.copy_(t::matmul(p, q_sum.t()));
          keep_error(error, sent, padded);
          count_iteration(*state, bucket);
          input.copy_(padded.narrow(0, 0, total));
          return input;
        });
  };
}

}  // namespace tinyddp::ddp
