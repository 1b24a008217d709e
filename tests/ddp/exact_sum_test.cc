// ddp::ExactGradientSum: the mean of a step's chunk gradients has the same bits on 1, 2, 3, 4
// and 6 ranks (threads of this process over Gloo), is within its grid's resolution of the exact
// mean, moves its grid when the gradients outgrow it (a rerun, the same on every world size),
// and refuses what it cannot hold. Against it, plain float sums of the same chunks grouped by
// rank differ from one world size to another.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/exact_batches.h"
#include "tests/test_util.h"
#include "tinyddp/comm/host_staging.h"
#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/tensor/random.h"

using namespace tinyddp;
using Catch::Contains;
using tinyddp::testing::borrow;
using tinyddp::testing::Expectations;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;
namespace t = tinyddp::tensor;

namespace {

constexpr int64_t kChunks = 12;  // divisible by 1, 2, 3, 4 and 6

// Chunk c's gradient of one parameter at one step: normal values times magnitudes spread over
// about eight decades (e^(3 z)), as gradients of one tensor are, times `scale`.
t::Tensor chunk_gradient(int64_t step, int64_t c, const t::Shape& shape, t::DType dtype, double scale) {
  t::Generator generator(static_cast<uint64_t>(1000 * step + c));
  const t::Tensor values = t::randn(shape, t::TensorOptions().dtype(t::kFloat64), &generator);
  const t::Tensor spread = t::exp(t::mul(t::randn(shape, t::TensorOptions().dtype(t::kFloat64), &generator), 3.0));
  return t::mul(t::mul(values, spread), scale).to(dtype);
}

struct Param {
  t::Shape shape;
  t::DType dtype;
};
// The third is large enough (67,591 elements: no world size here divides it) that its sums are
// reduce-scattered and its means allgathered; the small ones are allreduced.
const std::vector<Param> kParams = {{{5, 7}, t::kFloat32}, {{13}, t::kFloat64}, {{257, 263}, t::kFloat32}};
// Step 1 calibrates, step 2 grows within the headroom, step 3 outgrows the grid, step 4 fits
// it and gives the second parameter no gradient (its mean: zeros, whatever its sums held before),
// step 5 gives it one again, on the grid step 3 agreed (no rerun).
const std::vector<double> kScales = {1.0, 4.0, 1000.0, 2.0, 2.0};
constexpr size_t kNoGradientStep = 3, kNoGradientParam = 1;
bool has_gradient(size_t step, size_t p) { return step != kNoGradientStep || p != kNoGradientParam; }

struct Result {
  std::vector<std::vector<double>> means;  // per step and parameter, flattened in order
  int64_t reruns = 0;
};

// The means of every step on `world` ranks, each rank adding chunks [r C / W, (r + 1) C / W).
// With `keep` > 1, the chunks' gradients are kept and folded together (keep_chunks); `staged`:
// through comm::stage_through (NCCL's path: each collective's tensors copied and back).
Result means_on(int world, size_t keep = 1, bool staged = false) {
  Result result;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    std::vector<t::Tensor> params;
    for (const Param& p : kParams) params.push_back(t::zeros(p.shape, t::TensorOptions().dtype(p.dtype)));
    const auto group = staged ? comm::stage_through(borrow(pg), t::Device(t::kCPU)) : borrow(pg);
    ddp::ExactGradientSum sum(params, {"a", "b", "c"}, group, kChunks);
    sum.keep_chunks(keep);
    const int64_t per_rank = kChunks / world, first = pg.rank() * per_rank;
    std::vector<std::vector<double>> means;
    for (size_t step = 0; step < kScales.size(); ++step) {
      bool done = false;
      for (int attempt = 0; attempt < 2 && !done; ++attempt) {
        for (int64_t c = first; c < first + per_rank; ++c) {
          for (size_t p = 0; p < params.size(); ++p) {
            if (!has_gradient(step, p)) {
              params[p].mutable_grad() = t::Tensor();  // (the last step's mean is not a gradient of this one)
              continue;
            }
            params[p].mutable_grad() = chunk_gradient(step, c, kParams[p].shape, kParams[p].dtype, kScales[step]);
          }
          sum.add_chunk();
          for (const t::Tensor& p : params) e.expect(!p.grad().defined(), "add_chunk sets .grad to None");
        }
        done = sum.finish();
      }
      e.expect(done, "the step's second run fits the grid it agreed");
      std::vector<double> flat;
      for (const t::Tensor& p : params) {
        for (double v : p.grad().to(t::kFloat64).to_vector<double>()) flat.push_back(v);
      }
      means.push_back(flat);
    }
    if (pg.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result.means = means;
      result.reruns = sum.reruns();
    }
  }));
  return result;
}

}  // namespace

TEST_CASE("ExactGradientSum gives the same bits on 1, 2, 3, 4 and 6 ranks, within its grid of the exact mean",
          "[ddp][exact]") {
  const Result one = means_on(1);
  REQUIRE(one.means.size() == kScales.size());
  // The first step calibrates the grid, the second fits in its headroom, the third outgrows it;
  // the fifth adds a gradient the fourth did not give on the grid it kept.
  CHECK(one.reruns == 2);
  for (int world : {2, 3, 4, 6}) {
    INFO(world << " ranks");
    const Result other = means_on(world);
    CHECK(other.reruns == one.reruns);
    CHECK(other.means == one.means);  // bit for bit: doubles compared with ==
  }
  for (int world : {1, 3}) {  // chunks kept and folded 4 at a time: the same integers
    INFO(world << " ranks, 4 chunks folded together");
    CHECK(means_on(world, 4).means == one.means);
    CHECK(means_on(world, 1, true).means == one.means);  // and through a host-staged group
  }
  // Against the exact mean (long double sums of the chunks' values): the grid's resolution,
  // 2^-precision of the bound 2^E, plus the one rounding to the parameter's dtype. The grid is
  // the one an earlier step (or, rerun, this one) agreed: 2^E <= 2 max|g| over steps so far.
  const int precision = ddp::ExactGradientSum({t::zeros({1})}, {"x"}, nullptr, kChunks).precision_bits();
  CHECK(precision == 62 - 4 - 4);                    // 12 chunks: 4 guard bits; 4 bits of headroom
  std::vector<double> largest(kParams.size(), 0.0);  // per parameter, over the steps so far
  for (size_t step = 0; step < kScales.size(); ++step) {
    size_t at = 0;
    for (size_t param = 0; param < kParams.size(); ++param) {
      const Param& p = kParams[param];
      std::vector<long double> exact(static_cast<size_t>(t::shape_numel(p.shape, "test")), 0.0L);
      for (int64_t c = 0; c < kChunks && has_gradient(step, param); ++c) {
        const std::vector<double> g =
            chunk_gradient(step, c, p.shape, p.dtype, kScales[step]).to(t::kFloat64).to_vector<double>();
        for (size_t i = 0; i < g.size(); ++i) {
          exact[i] += g[i];
          largest[param] = std::max(largest[param], std::fabs(g[i]));
        }
      }
      const double epsilon = p.dtype == t::kFloat32 ? 0x1p-24 : 0x1p-53;
      for (size_t i = 0; i < exact.size(); ++i, ++at) {
        const double reference = static_cast<double>(exact[i] / kChunks);
        const double tolerance = std::ldexp(2 * largest[param], -precision) + epsilon * std::fabs(reference);
        INFO("step " << step << ", element " << i << ": " << one.means[step][at] << " against " << reference);
        CHECK(std::fabs(one.means[step][at] - reference) <= tolerance);
      }
    }
  }
}

TEST_CASE("Plain float sums of the same chunks, grouped by rank, differ between world sizes", "[ddp][exact]") {
  // What ExactGradientSum is for: each rank sums its chunks in float32, then the ranks' sums
  // are added. 3 and 4 ranks group the 12 chunks differently, and some element rounds apart.
  const auto grouped = [](int world) {
    std::vector<t::Tensor> partial;
    for (int r = 0; r < world; ++r) {
      t::Tensor s = t::zeros({5, 7});
      for (int64_t c = r * (kChunks / world); c < (r + 1) * (kChunks / world); ++c)
        s = t::add(s, chunk_gradient(0, c, {5, 7}, t::kFloat32, 1.0));
      partial.push_back(s);
    }
    t::Tensor total = partial[0];
    for (int r = 1; r < world; ++r) total = t::add(total, partial[r]);
    return total.to_vector<float>();
  };
  CHECK(grouped(3) != grouped(4));
}

TEST_CASE("ExactGradientSum refuses a NaN, a gradient it cannot hold and a count of chunks that is off",
          "[ddp][exact][errors]") {
  const t::Tensor w = t::zeros({3});
  ddp::ExactGradientSum sum({w}, {"fc.weight"}, nullptr, 2);
  w.mutable_grad() = t::from_vector(std::vector<float>{1.0F, NAN, 2.0F});
  CHECK_THROWS_WITH(sum.add_chunk(), Contains("the gradient of 'fc.weight' holds a NaN or an infinity"));
  for (int chunk = 0; chunk < 2; ++chunk) {
    w.mutable_grad() = t::ones({3});
    sum.add_chunk();
  }
  CHECK_FALSE(sum.finish());  // the first step calibrates
  w.mutable_grad() = t::ones({3});
  sum.add_chunk();  // one chunk of the two
  CHECK_THROWS_WITH(sum.finish(),
                    Contains("the ranks added 1 to 1 chunks this step (1 on this rank), but a step has 2 chunks, 2 per "
                             "rank"));
  CHECK_THROWS_WITH(ddp::ExactGradientSum({t::zeros({1}, t::TensorOptions().dtype(t::kInt64))}, {"steps"}, nullptr, 2),
                    Contains("parameter 'steps' is int64; the exact sum takes float32 or float64"));
  CHECK_THROWS_WITH(ddp::ExactGradientSum({w}, {"w"}, nullptr, int64_t{1} << 40), Contains("use fewer, larger chunks"));
}

namespace {

// A two-layer net's gradients on 8 chunks of 4 rows, through ExactGradientSum on `world`
// ranks; with `overlap`, the last chunk of each rank added by the AccumulateGrad hooks (or,
// with `products`, the weights' products as linear()'s backward hands them over), its sums'
// collectives started during backward. `wide`:
// 1030 -> 520 -> 9, whose first weight (535,600 elements) is reduce-scattered and its means
// allgathered, the others allreduced; else 5 -> 3 -> 2 (everything allreduced).
std::vector<double> two_layer_grads(int world, bool overlap, bool wide, bool products) {
  const int64_t in = wide ? 1030 : 5, hidden = wide ? 520 : 3, out = wide ? 9 : 2;
  std::vector<double> grads;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    t::Generator init(7);
    const t::Tensor w1 = t::randn({hidden, in}, {}, &init).requires_grad_();
    const t::Tensor b1 = t::randn({hidden}, {}, &init).requires_grad_();
    const t::Tensor w2 = t::randn({out, hidden}, {}, &init).requires_grad_();
    const t::Tensor b2 = t::randn({out}, {}, &init).requires_grad_();
    ddp::ExactGradientSum sum({w1, b1, w2, b2}, {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}, borrow(pg), 8);
    const int64_t per_rank = 8 / world;
    bool done = false;
    for (int attempt = 0; attempt < 2 && !done; ++attempt) {
      for (int64_t c = pg.rank() * per_rank; c < (pg.rank() + 1) * per_rank; ++c) {
        t::Generator data(100 + static_cast<uint64_t>(c));
        const t::Tensor x = t::randn({4, in}, {}, &data);
        const t::Tensor h = t::relu(t::linear(x, w1, b1));
        const t::Tensor loss = t::sum(t::pow(t::linear(h, w2, b2), 2));
        tinyddp::testing::chunk_backward(sum, loss, overlap && c + 1 == (pg.rank() + 1) * per_rank, products);
      }
      done = sum.finish();
    }
    e.expect(done, "the second run fits");
    if (pg.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    for (const t::Tensor& p : {w1, b1, w2, b2})
      for (float v : p.grad().to_vector<float>()) grads.push_back(v);
  }));
  return grads;
}

}  // namespace

TEST_CASE("ExactGradientSum's overlapped last chunk gives the bits of the plain one, on 1, 2 and 4 ranks",
          "[ddp][exact]") {
  for (const auto& [wide, products] : {std::pair{false, false}, {true, false}, {true, true}}) {
    INFO((wide ? "1030 -> 520 -> 9" : "5 -> 3 -> 2") << (products ? ", weight products folded" : ""));
    const std::vector<double> plain = two_layer_grads(1, false, wide, products);
    REQUIRE(plain.size() == (wide ? 520 * 1031 + 9 * 521 : 3 * 6 + 2 * 4));
    for (int world : {1, 2, 4}) {
      INFO(world << " ranks");
      CHECK(two_layer_grads(world, true, wide, products) == plain);
      if (wide) CHECK(two_layer_grads(world, false, wide, products) == plain);
    }
  }
}

namespace {
// Elements [first, first + count) of two tensors (float32 and float64, magnitudes over eight
// decades): what one rank of `world` holds of them.
std::vector<t::Tensor> square_sum_share(int rank, int world) {
  const t::Tensor a = chunk_gradient(9, 0, {6000}, t::kFloat32, 1.0);
  const t::Tensor b = chunk_gradient(9, 1, {600}, t::kFloat64, 1e-3);
  std::vector<t::Tensor> mine;
  for (const t::Tensor& v : {a, b}) {
    const int64_t share = v.numel() / world;
    mine.push_back(v.narrow(0, rank * share, share));
  }
  return mine;
}
}  // namespace

TEST_CASE("exact_square_sum gives the same bits however 1, 2, 3, 4 or 6 ranks split the elements", "[ddp][exact]") {
  // The reference: every square in long double, summed from the smallest up (64-bit mantissa:
  // a relative error below 6600 x 2^-64; the float64 squares of float64 values round by 2^-53).
  std::vector<long double> squares;
  for (const t::Tensor& v : square_sum_share(0, 1)) {
    for (double x : v.to(t::kFloat64).to_vector<double>()) squares.push_back(static_cast<long double>(x) * x);
  }
  std::sort(squares.begin(), squares.end());
  long double reference = 0;
  for (long double s : squares) reference += s;
  std::map<int, double> exact, plain;
  for (int world : {1, 2, 3, 4, 6}) {
    std::mutex mutex;
    require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations&) {
      const std::vector<t::Tensor> mine = square_sum_share(pg.rank(), world);
      const double got = ddp::exact_square_sum(mine, &pg);
      // What it replaces: each rank's float64 sum, then the ranks' sums added.
      double local = 0;
      for (const t::Tensor& v : mine) {
        for (double x : v.to(t::kFloat64).to_vector<double>()) local += x * x;
      }
      t::Tensor all = t::from_vector(std::vector<double>{local});
      pg.allreduce(all)->wait();
      std::lock_guard<std::mutex> lock(mutex);
      exact[world] = got;
      plain[world] = all.to_vector<double>()[0];
    }));
    INFO(world << " ranks");
    CHECK(exact[world] == exact[1]);  // bit for bit
    CHECK(std::abs(exact[world] - static_cast<double>(reference)) <= 1e-15 * static_cast<double>(reference));
  }
  CHECK((plain[3] != plain[4] || plain[2] != plain[6]));  // why: float sums move with the split
  // One process; nothing, zeros, an infinity, a NaN.
  CHECK(ddp::exact_square_sum({}, nullptr) == 0.0);
  CHECK(ddp::exact_square_sum({t::zeros({4})}, nullptr) == 0.0);
  CHECK(std::isinf(ddp::exact_square_sum({t::from_vector(std::vector<float>{1.0F, INFINITY})}, nullptr)));
  CHECK(std::isnan(ddp::exact_square_sum({t::from_vector(std::vector<float>{NAN, INFINITY})}, nullptr)));
  CHECK(ddp::exact_square_sum({t::from_vector(std::vector<float>{3.0F, -4.0F}).to(t::kBFloat16)}, nullptr) == 25.0);
}

TEST_CASE("ExactGradientSum's sharded form refuses a layout that does not match", "[ddp][exact][errors]") {
  const t::Tensor w = t::zeros({5, 2});
  CHECK_THROWS_WITH(ddp::ExactGradientSum({w}, {"w"}, nullptr, 2, ddp::ShardedGradients{{t::zeros({3, 2})}, {}, {}}),
                    Contains("1 shards, 0 shapes and 0 block sizes for 1 parameters"));
  CHECK_THROWS_WITH(
      ddp::ExactGradientSum({w}, {"w"}, nullptr, 2, ddp::ShardedGradients{{t::zeros({3, 2})}, {{5, 2}}, {2}}),
      Contains("the shard of 'w' holds 6 elements, not a block of 2 rows of its [5, 2] over 1 ranks"));
}

TEST_CASE("chunk_mean: every chunk's value in chunk order, the same bits on 1, 2, 3, 4 and 6 ranks", "[ddp][exact]") {
  // Negative values, a negative zero and values whose float sum depends on the order: the
  // slots' max-allreduce must hand every rank each chunk's value exactly as its rank had it.
  std::vector<double> values;
  for (int64_t c = 0; c < kChunks; ++c) values.push_back((c % 2 == 0 ? -1.0 : 1.0) * std::ldexp(1.0 + c, 40 - 8 * c));
  values[5] = -0.0;
  double expected = 0;
  for (double v : values) expected += v;  // in chunk order
  expected /= static_cast<double>(kChunks);
  const std::vector<int64_t> slots = ddp::chunk_slots(values, 0, kChunks);
  CHECK(ddp::slots_mean(slots) == expected);
  CHECK(std::signbit(std::bit_cast<double>(slots[5])));
  for (int world : {1, 2, 3, 4, 6}) {
    INFO(world << " ranks");
    std::mutex mutex;
    std::vector<double> got;
    require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations&) {
      const int64_t per_rank = kChunks / world, first = pg.rank() * per_rank;
      const std::vector<double> mine(values.begin() + first, values.begin() + first + per_rank);
      const double mean = ddp::chunk_mean(&pg, mine, first, kChunks);
      std::lock_guard<std::mutex> lock(mutex);
      got.push_back(mean);
    }));
    for (double mean : got) CHECK(mean == expected);  // bit for bit, on every rank
  }
  CHECK_THROWS_WITH(ddp::chunk_slots({1.0, 2.0}, 11, kChunks), Contains("chunks 11..12 are not within the 12 chunks"));
}

TEST_CASE("Runs of small parameters (split by reduce-scattered ones and by size) give one process's bits",
          "[ddp][exact]") {
  // Launch order p7, p6, L5, p4, p3, p2, L1, p0: on more than one rank the small sums leave in
  // four allreduces, [p7, p6], [p4, p3], [p2] (p2 would take the run past 65,536 elements) and
  // [p0], each at its last member's turn, with or without the last chunk overlapped.
  const std::vector<int64_t> sizes{100, 70000, 30000, 20, 40000, 65536, 10, 5};
  const auto grads = [&](int world, bool overlap) {
    std::vector<double> out;
    std::mutex mutex;
    require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
      std::vector<t::Tensor> params;
      std::vector<std::string> names;
      for (size_t i = 0; i < sizes.size(); ++i) {
        params.push_back(t::zeros({sizes[i]}).requires_grad_());
        names.push_back("p" + std::to_string(i));
      }
      ddp::ExactGradientSum sum(params, names, borrow(pg), kChunks);
      const int64_t per_rank = kChunks / world;
      bool done = false;
      for (int attempt = 0; attempt < 2 && !done; ++attempt) {
        for (int64_t c = pg.rank() * per_rank; c < (pg.rank() + 1) * per_rank; ++c) {
          t::Tensor loss = t::zeros({});
          for (size_t i = 0; i < sizes.size(); ++i) {
            const t::Tensor weights = chunk_gradient(1, c * 10 + static_cast<int64_t>(i), {sizes[i]}, t::kFloat32, 1.0);
            loss = t::add(loss, t::sum(t::mul(params[i], weights)));
          }
          tinyddp::testing::chunk_backward(sum, loss, overlap && c + 1 == (pg.rank() + 1) * per_rank, false);
        }
        done = sum.finish();
      }
      e.expect(done, "the second run fits");
      if (pg.rank() != 0) return;
      std::lock_guard<std::mutex> lock(mutex);
      for (const t::Tensor& p : params)
        for (float v : p.grad().to_vector<float>()) out.push_back(v);
    }));
    return out;
  };
  const std::vector<double> one = grads(1, false);
  REQUIRE(one.size() == 205671);
  for (int world : {2, 3, 4}) {
    INFO(world << " ranks");
    CHECK(grads(world, false) == one);
    CHECK(grads(world, true) == one);
  }
}

TEST_CASE("ExactGradientSum takes linear()'s products of up to 128 rows and leaves deeper ones to the GEMM",
          "[ddp][exact]") {
  // A taken product leaves no .grad (the fold computes it later); a declined one is computed
  // by linear()'s backward as usual and added from .grad.
  for (const auto& [rows, taken] : {std::pair<int64_t, bool>{16, true}, {128, true}, {129, false}, {512, false}}) {
    INFO(rows << " rows");
    t::Generator init(5);
    const t::Tensor w = t::randn({7, 5}, {}, &init).requires_grad_();
    ddp::ExactGradientSum sum({w}, {"w"}, nullptr, 1);
    const t::Tensor loss = t::sum(t::linear(t::randn({rows, 5}, {}, &init), w));
    {
      t::WeightGradientSinkScope sink(&sum);
      loss.backward();
    }
    CHECK(w.grad().defined() == !taken);
    sum.add_chunk();
    CHECK_FALSE(sum.finish());  // the first step calibrates
  }
}
