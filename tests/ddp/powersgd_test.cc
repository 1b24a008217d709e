// The PowerSGD hooks (ddp/powersgd.h): exact when the averaged gradient's rank is at most the
// approximation rank; plain allreduce before start_powerSGD_iter; error feedback makes the sum
// of the applied updates track the sum of the true gradients; training with PowerSGD reaches
// the loss of plain allreduce within a margin, with identical parameters on every rank; the
// batched hook; bad options.
#include "tinyddp/ddp/powersgd.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using Catch::Contains;
using comm::ProcessGroup;
using testing::borrow;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_threads;
using testing::seeded_mlp;

namespace {

double l2_norm(const Tensor& t) { return std::sqrt(tensor::sum(tensor::mul(t, t)).item<double>()); }

// The gradients after one backward of `model` wrapped in DDP with `hook` (none: plain).
std::vector<Tensor> gradients_after(DistributedDataParallel& ddp, const Tensor& x, const Tensor& y) {
  ddp.module()->zero_grad();
  nn::mse_loss(ddp(x), y).backward();
  std::vector<Tensor> out;
  for (const Tensor& p : ddp.module()->parameters()) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST_CASE("PowerSGD: exact when the averaged gradient has rank <= the approximation rank", "[ddp][powersgd]") {
  for (bool batched : {false, true}) {
    INFO("batched " << batched);
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
      // One sample per rank through Linear(32, 16): each rank's weight gradient is an outer
      // product, so their average has rank <= 2. The batched hook sees the whole bucket (528
      // elements, padded to 23 x 23) as one matrix of higher rank: rank 23 is exact there.
      auto plain_model = seeded_mlp(3, {32, 16});
      auto compressed_model = seeded_mlp(3, {32, 16});
      DistributedDataParallel plain(plain_model, borrow(pg));
      DistributedDataParallel compressed(compressed_model, borrow(pg));
      auto state = std::make_shared<PowerSGDState>(
          borrow(pg), PowerSGDOptions().matrix_approximation_rank(batched ? 23 : 2).start_powerSGD_iter(2));
      compressed.register_comm_hook(batched ? batched_powersgd_hook(state) : powersgd_hook(state));
      tensor::Generator data(40 + pg.rank());
      for (int it = 0; it < 5; ++it) {
        const Tensor x = tensor::randn({1, 32}, {}, &data), y = tensor::randn({1, 16}, {}, &data);
        const auto want = gradients_after(plain, x, y), got = gradients_after(compressed, x, y);
        for (size_t k = 0; k < want.size(); ++k) {
          const double gap = l2_norm(tensor::sub(want[k], got[k])) / std::max(l2_norm(want[k]), 1e-12);
          e.expect(gap < 1e-3, fmt::format("iteration {} gradient {}: relative difference {}", it, k, gap));
        }
      }
      e.expect(state->iter == 5, fmt::format("iterations counted: {}", state->iter));
      e.expect(state->compression_rate() > 1 || batched, fmt::format("compression rate {}", state->compression_rate()));
    }));
  }
}

TEST_CASE("PowerSGD: with error feedback the applied updates add up to the true gradients", "[ddp][powersgd]") {
  // The same batch every iteration and no optimizer step: the true averaged gradient G (of
  // rank <= 6: 3 samples per rank) is fixed. Rank 2 approximations of G + error are applied; with error feedback the
  // mean of the applied updates tends to G (their sum is off by the bounded error only), without it it stays off.
  for (bool feedback : {true, false}) {
    INFO("error feedback " << feedback);
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
      auto model = seeded_mlp(8, {24, 20});
      auto plain_model = seeded_mlp(8, {24, 20});
      DistributedDataParallel ddp(model, borrow(pg));
      DistributedDataParallel plain(plain_model, borrow(pg));
      auto state = std::make_shared<PowerSGDState>(
          borrow(pg),
          PowerSGDOptions().matrix_approximation_rank(2).start_powerSGD_iter(2).use_error_feedback(feedback).warm_start(
              feedback));
      ddp.register_comm_hook(powersgd_hook(state));
      tensor::Generator data(60 + pg.rank());
      const Tensor x = tensor::randn({3, 24}, {}, &data), y = tensor::randn({3, 20}, {}, &data);
      const Tensor truth = gradients_after(plain, x, y)[0];
      Tensor sum = tensor::zeros_like(truth);
      std::vector<double> relative;
      for (int it = 1; it <= 100; ++it) {
        sum.add_(gradients_after(ddp, x, y)[0]);
        relative.push_back(l2_norm(tensor::sub(tensor::div(sum, static_cast<double>(it)), truth)) / l2_norm(truth));
      }
      if (feedback) {
        e.expect(relative.back() < 0.05,
                 fmt::format("mean of 100 applied updates is off by {} of the gradient", relative.back()));
        e.expect(relative.back() < relative[9] / 3,
                 fmt::format("no convergence: {} then {}", relative[9], relative.back()));
      } else {
        e.expect(relative.back() > 0.2,
                 fmt::format("without error feedback the mean should stay off, got {}", relative.back()));
      }
    }));
  }
}

TEST_CASE("PowerSGD: training matches plain allreduce within a margin, identical parameters on every rank",
          "[ddp][powersgd]") {
  std::vector<double> losses(2);
  std::vector<std::vector<Tensor>> finals(2);
  for (bool compressed : {false, true}) {
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations&) {
      auto model = seeded_mlp(4, {10, 32, 32, 4});
      DistributedDataParallel ddp(model, borrow(pg));
      if (compressed) {
        ddp.register_comm_hook(powersgd_hook(std::make_shared<PowerSGDState>(
            borrow(pg), PowerSGDOptions().matrix_approximation_rank(2).start_powerSGD_iter(10))));
      }
      nn::SGD opt(model->parameters(), nn::SGDOptions(0.05).momentum(0.9));
      // A fixed linear teacher; each rank its own samples.
      tensor::Generator teacher(1), data(200 + pg.rank());
      const Tensor w = tensor::randn({4, 10}, {}, &teacher);
      double last = 0;
      for (int it = 0; it < 300; ++it) {
        const Tensor x = tensor::randn({16, 10}, {}, &data);
        opt.zero_grad();
        const Tensor loss = nn::mse_loss(ddp(x), tensor::matmul(x, w.t()));
        loss.backward();
        opt.step();
        last = it >= 280 ? last + loss.item<double>() / 20 : 0;
      }
      if (pg.rank() == 0) losses[compressed] = last;
      if (compressed) {
        std::vector<Tensor> params;
        for (const Tensor& p : model->parameters()) params.push_back(p.detach().clone());
        finals[pg.rank()] = params;
      }
    }));
  }
  INFO("final loss: allreduce " << losses[0] << ", PowerSGD rank 2 " << losses[1]);
  // The teacher's output variance is about 10: both fit it to a small fraction of that.
  // Rank-2 compression ends where the rounding of its small GEMMs steers it: over data seeds
  // 200-700 and two GEMM engines (Eigen, OpenBLAS) plain allreduce ended at 0.010-0.016 and
  // PowerSGD at 0.054-0.17, so PowerSGD is held to 0.25 (a margin of 3x allreduce, fitted to
  // one engine's result at seed 200, failed for Eigen itself at seeds 500 and 600).
  CHECK(losses[0] < 0.05);
  CHECK(losses[1] < 0.25);
  for (size_t k = 0; k < finals[0].size(); ++k) CHECK(tensor::equal(finals[0][k], finals[1][k]));
}

TEST_CASE("PowerSGD: the hook's future can be waited for twice; it runs each collective once",
          "[ddp][powersgd][future]") {
  for (bool batched : {false, true}) {
    INFO("batched " << batched);
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
      auto recording = std::make_shared<testing::RecordingGroup>(borrow(pg));
      auto state = std::make_shared<PowerSGDState>(recording, PowerSGDOptions().start_powerSGD_iter(2));
      state->iter = 2;  // compress from the first call
      tensor::Generator data(7 + pg.rank());
      const Tensor weight = tensor::zeros({16, 8}), bias = tensor::zeros({8});
      GradBucket bucket{0, tensor::randn({136}, {}, &data), {0, 1}, /*is_last=*/true, {weight, bias}, false, {}};
      CommHook hook = batched ? batched_powersgd_hook(state) : powersgd_hook(state);
      std::shared_ptr<Future> future = hook(bucket);
      const Tensor first = future->wait().clone();
      const Tensor second = future->wait();
      e.expect(tensor::equal(first, second), "the second wait() changed the result");
      const size_t want = batched ? 2 : 3;  // (uncompressed,) P, Q
      e.expect(recording->count("allreduce") == want,
               fmt::format("{} allreduces for one bucket waited twice, want {}", recording->count("allreduce"), want));
      e.expect(state->iter == 3, fmt::format("iterations counted: {}, want 3", state->iter));
    }));
  }
}

TEST_CASE("PowerSGD timeline: the P and Q allreduces are issued while backward still runs", "[ddp][powersgd][future]") {
  // Six buckets (one per parameter). The last gradient of backward waits 200 ms in a hook of
  // its own: by its end, every bucket's chain (uncompressed, P, Q: 18 allreduces) must have
  // been issued, from the Future callbacks on Gloo's worker. Were the later rounds left to
  // finalize_backward, only the six first allreduces would come before backward's end.
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    auto recording = std::make_shared<testing::RecordingGroup>(borrow(pg));
    auto model = seeded_mlp(5, {64, 64, 64, 64});
    DistributedDataParallel ddp(model, recording, DDPOptions().bucket_cap_mb(1e-6).first_bucket_cap_mb(1e-6));
    ddp.register_comm_hook(
        powersgd_hook(std::make_shared<PowerSGDState>(recording, PowerSGDOptions().start_powerSGD_iter(2))));
    const std::vector<Tensor> params = model->parameters();
    size_t arrived = 0;
    std::chrono::steady_clock::time_point backward_end;
    std::vector<autograd::RemovableHandle> handles;
    for (const Tensor& p : params) {
      handles.push_back(p.grad_accumulator()->add_post_hook([&] {
        if (++arrived % params.size() != 0) return;  // not the last gradient of this backward
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        backward_end = std::chrono::steady_clock::now();
      }));
    }
    tensor::Generator data(9 + pg.rank());
    size_t before_step3 = 0;
    for (int it = 1; it <= 3; ++it) {  // compressed from the third
      if (it == 3) before_step3 = recording->calls().size();
      const Tensor x = tensor::randn({4, 64}, {}, &data);
      model->zero_grad();
      nn::mse_loss(ddp(x), tensor::zeros({4, 64})).backward();
    }
    const auto calls = recording->calls();
    size_t allreduces = 0, issued_in_backward = 0;
    for (size_t k = before_step3; k < calls.size(); ++k) {
      if (calls[k].op != "allreduce") continue;
      ++allreduces;
      if (calls[k].at < backward_end) ++issued_in_backward;
    }
    e.expect(allreduces == 3 * params.size(),
             fmt::format("{} allreduces in the step, want {}", allreduces, 3 * params.size()));
    e.expect(issued_in_backward == allreduces,
             fmt::format("only {} of {} allreduces were issued before backward ended", issued_in_backward, allreduces));
    for (auto& h : handles) h.remove();
  }));
}

TEST_CASE("PowerSGD: bad options are refused with the reason", "[ddp][powersgd][errors]") {
  require_no_failures(run_threads(1, [](ProcessGroup& pg, Expectations& e) {
    const auto message = [&](PowerSGDOptions o) -> std::string {
      try {
        PowerSGDState state(borrow(pg), o);
      } catch (const Error& ex) {
        return ex.what();
      }
      return "(no error)";
    };
    e.expect(message(PowerSGDOptions().matrix_approximation_rank(0)).find("at least 1") != std::string::npos, "rank 0");
    e.expect(
        message(PowerSGDOptions().start_powerSGD_iter(1)).find("must be > 1 with error feedback") != std::string::npos,
        "start 1");
    e.expect(
        message(PowerSGDOptions().start_powerSGD_iter(0).use_error_feedback(false).warm_start(false)) == "(no error)",
        "start 0 without state");
  }));
}
