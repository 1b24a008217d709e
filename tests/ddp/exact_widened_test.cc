// ExactGradientSum at one chunk per rank: a reduce-scattered float32 weight's chunk leaves as
// its float32 values and the rank that sums each block rounds them (widened()). The same bits
// as one process holding every chunk (int64 sums folded on one rank), whether the weight's
// gradient comes as linear()'s product or as a .grad, on 2, 3 (padded blocks) and 4 ranks, on
// the Gloo ring and in the general form; a
// weight used twice in a chunk goes back to int64 sums when its two products are rounded apart.
#include <cstring>
#include <mutex>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/exact_batches.h"
#include "tests/test_util.h"
#include "tinyddp/comm/host_staging.h"
#include "tinyddp/ddp/exact_sum.h"
#include "tinyddp/tensor/random.h"

using namespace tinyddp;
using tinyddp::testing::borrow;
using tinyddp::testing::Expectations;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;
namespace t = tinyddp::tensor;

namespace {

struct Run {
  std::vector<float> grads;  // rank 0's means after the last step, every parameter in order
  bool widened = false;      // whether the first weight went as values in the last step
  int64_t reruns = 0;
};

enum class Tied { kNever, kAlways, kSometimes };

// Four steps of a 300 -> 260 -> 9 net (its first weight, 78,000 elements, reduce-scattered)
// over `chunks` chunks of 4 rows, each rank adding chunks/world of them, the last overlapped
// with its backward. `products`: the weights' products handed over by linear()'s backward;
// `tied`: the first weight used a second time in each chunk, or in some (two gradients of it).
// `staged`: through comm::stage_through, whose collectives take the general form (every block
// widened on its rank, then int64 sums reduce-scattered).
Run run(int world, int64_t chunks, bool products, Tied tied, bool staged = false) {
  Run result;
  std::mutex mutex;
  require_no_failures(run_threads(world, [&](comm::ProcessGroup& pg, Expectations& e) {
    t::Generator init(7);
    const t::Tensor w1 = t::mul(t::randn({260, 300}, {}, &init), 0.03).requires_grad_();
    const t::Tensor b1 = t::randn({260}, {}, &init).requires_grad_();
    const t::Tensor w2 = t::randn({9, 260}, {}, &init).requires_grad_();
    const t::Tensor b2 = t::randn({9}, {}, &init).requires_grad_();
    const auto group = staged ? comm::stage_through(borrow(pg), t::Device(t::kCPU)) : borrow(pg);
    ddp::ExactGradientSum sum({w1, b1, w2, b2}, {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}, group, chunks);
    const int64_t per_rank = chunks / world;
    for (int step = 0; step < 4; ++step) {
      sum.clear_gradients();  // a step's gradients are its own
      bool done = false;
      for (int attempt = 0; attempt < 3 && !done; ++attempt) {
        for (int64_t c = pg.rank() * per_rank; c < (pg.rank() + 1) * per_rank; ++c) {
          t::Generator data(static_cast<uint64_t>(100 * step + c));
          const t::Tensor x = t::randn({4, 300}, {}, &data);
          t::Tensor h = t::relu(t::linear(x, w1, b1));
          // Tied: every chunk; sometimes: chunks whose first input is positive (by the data).
          const bool second = tied == Tied::kAlways || (tied == Tied::kSometimes && x.to_vector<float>()[0] > 0);
          if (second) h = t::add(h, t::linear(t::mul(x, 0.5), w1));
          const t::Tensor loss = t::sum(t::pow(t::linear(h, w2, b2), 2));
          tinyddp::testing::chunk_backward(sum, loss, c + 1 == (pg.rank() + 1) * per_rank, products);
        }
        done = sum.finish();
      }
      e.expect(done, "a step fits its grid by its second run");
    }
    if (pg.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    result.widened = sum.widened(0);
    result.reruns = sum.reruns();
    for (const t::Tensor& p : {w1, b1, w2, b2})
      for (float v : p.grad().to_vector<float>()) result.grads.push_back(v);
  }));
  return result;
}

// Elements whose bits differ (the vectors' own comparison would print half a million values).
size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return a.size() + b.size();
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  return count;
}

}  // namespace

TEST_CASE("At one chunk per rank the first weight leaves as float32 values, with the bits of one process",
          "[ddp][exact]") {
  for (const bool products : {true, false}) {
    for (const int64_t chunks : {2, 3, 4}) {
      INFO(chunks << " chunks, " << (products ? "weight products taken" : "weights' .grad"));
      const Run one = run(1, chunks, products, Tied::kNever);
      REQUIRE(one.grads.size() == 260 * 301 + 9 * 261);
      CHECK_FALSE(one.widened);  // one process: nothing to send
      const Run spread = run(static_cast<int>(chunks), chunks, products, Tied::kNever);
      CHECK(spread.widened);
      CHECK(differing(spread.grads, one.grads) == 0);  // bit for bit
      if (chunks == 3) {
        const Run staged = run(3, chunks, products, Tied::kNever, true);
        CHECK(staged.widened);
        CHECK(differing(staged.grads, one.grads) == 0);
      }
      if (chunks == 4) {
        const Run two = run(2, chunks, products, Tied::kNever);  // two chunks a rank: int64 sums
        CHECK_FALSE(two.widened);
        CHECK(differing(two.grads, one.grads) == 0);
      }
    }
  }
}

TEST_CASE("A weight given two products in a chunk goes back to int64 sums, with the same bits", "[ddp][exact]") {
  for (const bool products : {true, false}) {
    INFO((products ? "weight products taken" : "weights' .grad"));
    const Run one = run(1, 2, products, Tied::kAlways);
    const Run two = run(2, 2, products, Tied::kAlways);
    // Two products are rounded apart; a .grad holds both uses already (one gradient: widened).
    CHECK(two.widened == !products);
    CHECK(differing(two.grads, one.grads) == 0);
    // Only in some chunks, by their data: the first step where a rank's chunk does it is run
    // again, with int64 sums from then on (one rerun more than one process, not one each time).
    const Run one_sometimes = run(1, 4, products, Tied::kSometimes);
    const Run four = run(4, 4, products, Tied::kSometimes);
    CHECK(four.widened == !products);
    CHECK(differing(four.grads, one_sometimes.grads) == 0);
    CHECK(four.reruns == one_sometimes.reruns + (products ? 1 : 0));
  }
}
