// ProcessGroup::reduce_scatter_widened: each rank's float32 values, widened on the way (here to
// int64, round(4 x)), summed into each rank's block of the sums: against its definition on 2,
// 3 and 4 ranks, a block larger than the ring's receive slices (widened as the bytes arrive),
// on the Gloo ring behind the desync check and in the general form (comm::stage_through);
// ranks that call it against a plain reduce_scatter are told so by the desync check; sizes
// that do not match are refused by name.
#include <cmath>

#include "tests/comm/comm_test_util.h"
#include "tests/test_util.h"
#include "tinyddp/comm/desync_check.h"
#include "tinyddp/comm/host_staging.h"

using namespace tinyddp;
using tinyddp::testing::borrow;
using tinyddp::testing::Expectations;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;
namespace t = tinyddp::tensor;

namespace {

constexpr int64_t kBlock = 70001;  // elements per rank: odd, and several receive slices

// Rank r's value at element i: halves and quarters of both signs, so that round(4 x) is exact.
float value_at(int rank, int64_t i) { return static_cast<float>(((i * 7 + rank * 13) % 2001) - 1000) * 0.25f; }

void widen_to_int64(void* out, const void* in, size_t n, bool add) {
  auto* sums = static_cast<int64_t*>(out);
  const auto* values = static_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) {
    const auto q = static_cast<int64_t>(std::nearbyint(4.0 * values[i]));
    sums[i] = add ? sums[i] + q : q;
  }
}

void check_sums(comm::ProcessGroup& pg, Expectations& e, const std::string& how) {
  const int world = pg.size(), rank = pg.rank();
  std::vector<float> mine(static_cast<size_t>(world * kBlock));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = value_at(rank, static_cast<int64_t>(i));
  const t::Tensor values = t::from_vector(mine);
  // Garbage to start from: every element of this rank's block is written, none added to.
  const t::Tensor sums = t::full({world * kBlock}, 12345.0, t::TensorOptions().dtype(t::kInt64));
  pg.reduce_scatter_widened(sums, values, widen_to_int64)->wait();
  const std::vector<int64_t> got = sums.narrow(0, rank * kBlock, kBlock).to_vector<int64_t>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kBlock; ++i) {
    int64_t want = 0;
    for (int q = 0; q < world; ++q) want += static_cast<int64_t>(4 * value_at(q, rank * kBlock + i));
    wrong += got[static_cast<size_t>(i)] != want ? 1 : 0;
  }
  e.expect_eq(wrong, int64_t{0}, how + ": elements of this rank's block off their definition");
}

}  // namespace

TEST_CASE("reduce_scatter_widened sums each rank's widened values into its block, on the ring and in general",
          "[comm]") {
  for (int world : {2, 3, 4}) {
    INFO(world << " ranks");
    require_no_failures(run_threads(world, [](comm::ProcessGroup& pg, Expectations& e) {
      check_sums(pg, e, "the ring");
      const auto staged = comm::stage_through(borrow(pg), t::Device(t::kCPU));
      check_sums(*staged, e, "the general form");
    }));
  }
}

TEST_CASE("reduce_scatter_widened against a plain reduce_scatter is a desync the check names", "[comm][desync]") {
  require_no_failures(run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const t::Tensor sums = t::zeros({2 * kBlock}, t::TensorOptions().dtype(t::kInt64));
    const t::Tensor values = t::zeros({2 * kBlock});
    e.expect_throws(
        [&] {
          if (pg.rank() == 0) {
            pg.reduce_scatter_widened(sums, values, widen_to_int64)->wait();
          } else {
            const std::vector<t::Tensor> blocks = {sums.narrow(0, 0, kBlock), sums.narrow(0, kBlock, kBlock)};
            pg.reduce_scatter(blocks[1], blocks)->wait();
          }
        },
        "reduce_scatter_widened (call 0");
  }));
}

TEST_CASE("reduce_scatter_widened refuses sums and values that do not match", "[comm][errors]") {
  require_no_failures(run_threads(2, [](comm::ProcessGroup& pg, Expectations& e) {
    const t::Tensor sums = t::zeros({10}, t::TensorOptions().dtype(t::kInt64));
    e.expect_throws([&] { pg.reduce_scatter_widened(sums, t::zeros({8}), widen_to_int64); },
                    "expected flat contiguous CPU sums and values of one size, 2 blocks of it; got 10 and 8 elements");
    e.expect_throws(
        [&] {
          pg.reduce_scatter_widened(t::zeros({9}, t::TensorOptions().dtype(t::kInt64)), t::zeros({9}), widen_to_int64);
        },
        "got 9 and 9 elements");
  }));
}
