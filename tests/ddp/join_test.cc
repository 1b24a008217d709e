// Join with DDP: ranks with uneven inputs (rank r has 5 + r) end with the same model; a rank
// with no inputs at all still ends with the others' model; throw_on_early_termination fails
// on every rank.

#include <fmt/ranges.h>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_threads;

TEST_CASE("join: rank r has 5 + r inputs; every rank finishes with the same model", "[ddp][join]") {
  for (int size : {2, 3}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      auto model = nn::mlp({6, 8, 3});
      DistributedDataParallel ddp(model, borrow(pg), DDPOptions());
      nn::SGD opt(model->parameters(), nn::SGDOptions(0.05));
      tensor::Generator data(300 + pg.rank());
      int processed = 0;
      ddp.join([&] {
        for (int k = 0; k < 5 + pg.rank(); ++k) {
          opt.zero_grad();
          nn::mse_loss(ddp(tensor::randn({4, 6}, {}, &data)), tensor::randn({4, 3}, {}, &data)).backward();
          opt.step();
          ++processed;
        }
      });
      e.expect_eq(processed, 5 + pg.rank(), "inputs processed");
      // Identical parameters everywhere.
      for (const Tensor& p : model->parameters()) {
        std::vector<Tensor> all;
        for (int r = 0; r < pg.size(); ++r) all.push_back(tensor::zeros_like(p));
        pg.allgather(all, p)->wait();
        for (int r = 1; r < pg.size(); ++r)
          e.expect_close(all[r], all[0], fmt::format("rank {}'s parameter against rank 0's", r));
      }
      // DDP keeps working after a join.
      nn::mse_loss(ddp(tensor::ones({2, 6})), tensor::zeros({2, 3})).backward();
    }));
  }
}

TEST_CASE("join with throw_on_early_termination fails on every rank", "[ddp][join][errors]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    auto model = nn::mlp({6, 8, 3});
    DistributedDataParallel ddp(model, borrow(pg));
    JoinOptions options;
    options.throw_on_early_termination(true);
    try {
      ddp.join(
          [&] {
            for (int k = 0; k < 2 + 3 * pg.rank(); ++k)
              nn::mse_loss(ddp(tensor::ones({2, 6})), tensor::zeros({2, 3})).backward();
          },
          options);
      e.failures.push_back("no error with uneven inputs");
    } catch (const Error& ex) {
      e.expect_contains(ex.what(), "ran out of inputs");
    }
  }));
}

TEST_CASE("join: a rank with no inputs at all (rank 0 or another) still ends with the others' model", "[ddp][join]") {
  for (int empty_rank : {0, 1}) {
    INFO("rank without inputs: " << empty_rank);
    require_no_failures(run_threads(2, [empty_rank](ProcessGroup& pg, Expectations& e) {
      auto model = nn::mlp({6, 8, 3});
      DistributedDataParallel ddp(model, borrow(pg));
      nn::SGD opt(model->parameters(), nn::SGDOptions(0.05));
      tensor::Generator data(400 + pg.rank());
      ddp.join([&] {
        for (int k = 0; k < (pg.rank() == empty_rank ? 0 : 3); ++k) {
          opt.zero_grad();
          nn::mse_loss(ddp(tensor::randn({4, 6}, {}, &data)), tensor::randn({4, 3}, {}, &data)).backward();
          opt.step();
        }
      });
      for (const Tensor& p : model->parameters()) {
        std::vector<Tensor> all{tensor::zeros_like(p), tensor::zeros_like(p)};
        pg.allgather(all, p)->wait();
        e.expect_close(all[1], all[0], "rank 1's parameter against rank 0's");
      }
      e.expect(ddp.reducer().buckets_rebuilt(), "the rank without inputs did not rebuild its buckets");
      nn::mse_loss(ddp(tensor::ones({2, 6})), tensor::zeros({2, 3})).backward();  // and DDP goes on
    }));
  }
}
