// DDP's buckets: how parameters are assigned to buckets (caps, reverse order, dtypes, the
// first bucket, oversized parameters); each parameter's view of its bucket, which
// gradient_as_bucket_view makes its .grad; buckets launched during backward in bucket order
// even when gradients arrive out of order (a process group that records the allreduces); the
// one-time rebuild in rank 0's arrival order, the same on every rank; a bucket whose
// parameters are all unused launched at the first gradient.
#include <condition_variable>
#include <mutex>

#include <fmt/ranges.h>

#include "tests/comm/comm_test_util.h"
#include "tests/ddp/ddp_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using Catch::Contains;
using comm::ProcessGroup;
using testing::borrow;
using testing::events_of;
using testing::Expectations;
using testing::pointer_event;
using testing::RecordingGroup;
using testing::require_no_failures;
using testing::run_threads;
using testing::TwoHeads;

TEST_CASE("bucket assignment: caps, reverse order, dtypes, first bucket, oversized parameters", "[ddp][buckets]") {
  // 4-byte floats: sizes in bytes 400, 400, 4000, 400, 40 (float64: 800).
  const std::vector<Tensor> params = {tensor::zeros({100}),  tensor::zeros({100}),
                                      tensor::zeros({1000}), tensor::zeros({100}),
                                      tensor::zeros({10}),   tensor::zeros({100}, tensor::kFloat64)};
  const BucketAssignment a = assign_buckets(params, reverse_order(params.size()), 500, 1000);
  // Reverse order 5, 4, 3, 2, 1, 0; the float64 parameter travels alone.
  REQUIRE(a.buckets.size() == 3);
  CHECK(a.buckets[0] == std::vector<size_t>{5});        // float64: its own bucket (800 >= first cap 500)
  CHECK(a.buckets[1] == std::vector<size_t>{4, 3, 2});  // 40 + 400 + 4000: first float32 bucket closes past 500
  CHECK(a.bytes[1] == 4440);
  CHECK(a.buckets[2] == std::vector<size_t>{1, 0});  // 800 < 1000: left open, closed at the end
  CHECK(a.bytes[2] == 800);
  // A parameter larger than the cap is a bucket of its own.
  const BucketAssignment big =
      assign_buckets({tensor::zeros({10}), tensor::zeros({10}), tensor::zeros({10000})}, reverse_order(3), 100, 1000);
  REQUIRE(big.buckets.size() == 2);
  CHECK(big.buckets[0] == std::vector<size_t>{2});
  CHECK(big.bytes[0] == 40000);
  CHECK(big.buckets[1] == std::vector<size_t>{1, 0});
  // A given order is followed.
  const BucketAssignment ordered = assign_buckets({tensor::zeros({10}), tensor::zeros({10})}, {0, 1}, 1 << 20, 1 << 20);
  CHECK(ordered.buckets[0] == std::vector<size_t>{0, 1});
  CHECK_THROWS_WITH(assign_buckets(params, {0}, 1, 1), Contains("order has 1 entries for 6 parameters"));
}

TEST_CASE("bucket views alias the contents; gradient_as_bucket_view makes .grad those views", "[ddp][views]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    for (bool as_view : {false, true}) {
      tensor::manual_seed(0);
      auto model = nn::mlp({4, 6, 3});
      DistributedDataParallel ddp(model, borrow(pg), DDPOptions().gradient_as_bucket_view(as_view));
      const Reducer& reducer = ddp.reducer();
      // The first iteration records the order gradients arrive in; the next forward rebuilds
      // the buckets (as in PyTorch). Look at the rebuilt ones.
      nn::mse_loss(ddp(tensor::ones({2, 4})), tensor::zeros({2, 3})).backward();
      e.expect(!reducer.buckets_rebuilt(), "rebuilt before the next forward");
      const Tensor loss = nn::mse_loss(ddp(tensor::ones({2, 4})), tensor::zeros({2, 3}));
      e.expect(reducer.buckets_rebuilt(), "not rebuilt");
      const auto contents = reducer.snapshot().bucket_contents;
      const auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor view = reducer.snapshot().bucket_views[i];
        bool inside = false;
        for (const Tensor& c : contents) inside |= view.shares_storage(c);
        e.expect(inside, fmt::format("view {} lies in no bucket's contents", i));
        e.expect_eq(view.sizes(), params[i].sizes(), fmt::format("view {}'s sizes", i));
      }
      loss.backward();
      for (size_t i = 0; i < params.size(); ++i) {
        const bool aliases = params[i].grad().shares_storage(reducer.snapshot().bucket_views[i]) &&
                             params[i].grad().storage_offset() == reducer.snapshot().bucket_views[i].storage_offset();
        e.expect(aliases == as_view,
                 fmt::format("param {}: .grad aliases its bucket view: {} (gradient_as_bucket_view {})", i, aliases,
                             as_view));
        e.expect_close(params[i].grad(), reducer.snapshot().bucket_views[i],
                       fmt::format("param {}: .grad against its view", i));
      }
      // Writing into the contents shows through the view.
      contents[0].fill_(3);
      e.expect_eq(reducer.snapshot().bucket_views[reducer.snapshot().assignment.buckets[0][0]].to_vector<float>()[0],
                  3.0f, "the first view's first element after filling the contents with 3");
    }
  }));
}

TEST_CASE("buckets launch during backward, in bucket order, even when gradients arrive out of order",
          "[ddp][overlap]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    RecordingGroup recording(borrow(pg));
    // Three layers applied in the order 2, 0, 1, so gradients arrive 1, 0, 2 (not the assumed 2, 1, 0).
    tensor::manual_seed(1);
    auto l0 = std::make_shared<nn::Linear>(8, 8), l1 = std::make_shared<nn::Linear>(8, 8),
         l2 = std::make_shared<nn::Linear>(8, 8);
    struct Shuffled : nn::Module {
      std::shared_ptr<nn::Linear> a, b, c;
      Shuffled(std::shared_ptr<nn::Linear> x, std::shared_ptr<nn::Linear> y, std::shared_ptr<nn::Linear> z)
          : Module("Shuffled") {
        a = register_module("l0", x);
        b = register_module("l1", y);
        c = register_module("l2", z);
      }
      Tensor forward(const Tensor& x) override {
        return b->forward(tensor::relu(a->forward(tensor::relu(c->forward(x)))));
      }
    };
    auto model = std::make_shared<Shuffled>(l0, l1, l2);
    // Tiny caps: every parameter its own bucket (6 buckets, index = reverse registration order).
    DistributedDataParallel ddp(model, borrow(recording), DDPOptions().first_bucket_cap_mb(1e-6).bucket_cap_mb(1e-6));
    const Reducer& reducer = ddp.reducer();
    e.expect_eq(reducer.snapshot().assignment.buckets, std::vector<std::vector<size_t>>{{5}, {4}, {3}, {2}, {1}, {0}},
                "buckets");
    // Mark the moment backward reaches the first-applied layer (l2's weight gradient).
    l2->weight.register_hook([&](const Tensor&) {
      recording.note("backward reaches l2.weight");
      return Tensor();
    });
    // Scans the events of one backward: allreduce calls in order, and when l2 was reached.
    std::vector<std::string> expected;  // the current buckets' allreduce events, in index order
    std::vector<std::string> events;    // everything one backward recorded
    const auto one_backward = [&](std::vector<std::string>& launches, size_t& reached_at) {
      recording.clear();
      const Tensor loss = nn::mse_loss(ddp(tensor::ones({4, 8})), tensor::zeros({4, 8}));
      expected.clear();  // after the forward, which may have rebuilt the buckets
      for (const Tensor& c : reducer.snapshot().bucket_contents) expected.push_back(pointer_event(c));
      loss.backward();
      launches.clear();
      events = events_of(recording);
      for (size_t k = 0; k < events.size(); ++k) {
        if (events[k].rfind("allreduce", 0) == 0) launches.push_back(events[k]);
        if (events[k] == "backward reaches l2.weight") reached_at = k;
      }
    };
    const auto expect_bucket_order = [&](const std::vector<std::string>& launches, const std::string& when) {
      e.expect(
          launches.size() >= expected.size() && std::equal(expected.begin(), expected.end(), launches.begin()),
          fmt::format("allreduce calls are not in bucket index order {}: {}, buckets {}", when, launches, expected));
    };
    std::vector<std::string> launches;
    size_t reached_at = 0;
    // Iteration 1: bucket 0 (l2.bias, assumed first) is completed last, so every bucket waits
    // for it: strict index order, and nothing before backward reaches l2.
    one_backward(launches, reached_at);
    expect_bucket_order(launches, "(iteration 1)");
    e.expect(!reducer.buckets_rebuilt(), "buckets were rebuilt before the next forward");
    // Iteration 2: its forward rebuilt the buckets in the order gradients arrived, so the
    // first ones are reduced while backward is still working towards l2.
    one_backward(launches, reached_at);
    e.expect(reducer.buckets_rebuilt(), "the second forward did not rebuild the buckets");
    expect_bucket_order(launches, "(iteration 2)");
    e.expect(
        reached_at > 0 && events[0].rfind("allreduce", 0) == 0,
        fmt::format("no allreduce was launched before backward reached the first layer (iteration 2): {}", events));
    e.expect_eq(reducer.snapshot().launch_order.size(), size_t{6}, "launches");
  }));
}

TEST_CASE("the rebuilt buckets are the same on every rank", "[ddp][rebuild]") {
  std::mutex mutex;
  std::vector<std::vector<std::vector<size_t>>> seen;
  require_no_failures(run_threads(3, [&](ProcessGroup& pg, Expectations& e) {
    tensor::manual_seed(5);
    auto model = nn::mlp({6, 8, 8, 3});
    DistributedDataParallel ddp(model, borrow(pg), DDPOptions().first_bucket_cap_mb(1e-4).bucket_cap_mb(2e-4));
    e.expect(!ddp.reducer().buckets_rebuilt(), "rebuilt before any iteration");
    nn::mse_loss(ddp(tensor::ones({2, 6})), tensor::zeros({2, 3})).backward();
    e.expect(!ddp.reducer().buckets_rebuilt(), "rebuilt before the next forward");
    const Tensor out = ddp(tensor::ones({2, 6}));
    e.expect(ddp.reducer().buckets_rebuilt(), "not rebuilt by the forward after the first iteration");
    nn::mse_loss(out, tensor::zeros({2, 3})).backward();  // the rebuilt buckets work
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(ddp.reducer().snapshot().assignment.buckets);
  }));
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == seen[1]);
  CHECK(seen[1] == seen[2]);
}

TEST_CASE("rebuilt buckets follow rank 0's arrival order when the ranks' orders differ", "[ddp][rebuild]") {
  // Three layers applied in a rank-dependent order, so the gradients arrive in a different
  // order on each rank; every rank must adopt the buckets built from rank 0's order.
  struct Permuted : nn::Module {
    std::vector<std::shared_ptr<nn::Linear>> layers;
    std::vector<int> order;
    explicit Permuted(std::vector<int> o) : Module("Permuted"), order(std::move(o)) {
      for (int k = 0; k < 3; ++k)
        layers.push_back(register_module("l" + std::to_string(k), std::make_shared<nn::Linear>(8, 8)));
    }
    Tensor forward(const Tensor& x) override {
      Tensor h = x;
      for (int k : order) h = tensor::relu(layers[k]->forward(h));
      return h;
    }
  };
  for (const auto& [first_cap, cap] : {std::pair<double, double>{1e-6, 1e-6}, {300.0 / (1 << 20), 300.0 / (1 << 20)}}) {
    INFO("bucket caps " << first_cap << " / " << cap << " MiB");
    std::mutex mutex;
    std::vector<std::vector<size_t>> arrival(2);
    std::condition_variable arrived;
    require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
      auto model = std::make_shared<Permuted>(pg.rank() == 0 ? std::vector<int>{2, 0, 1} : std::vector<int>{0, 1, 2});
      DistributedDataParallel ddp(model, borrow(pg), DDPOptions().first_bucket_cap_mb(first_cap).bucket_cap_mb(cap));
      nn::mse_loss(ddp(tensor::ones({2, 8})), tensor::zeros({2, 8})).backward();
      {
        std::unique_lock<std::mutex> lock(mutex);
        arrival[pg.rank()] = ddp.reducer().snapshot().grad_ready_order;
        arrived.notify_all();
        arrived.wait_for(lock, std::chrono::seconds(10), [&] { return !arrival[0].empty() && !arrival[1].empty(); });
      }
      e.expect(arrival[0] != arrival[1], "the ranks' arrival orders do not differ: the test could not fail");
      const Tensor out = ddp(tensor::ones({2, 8}));  // rebuilds
      e.expect(ddp.reducer().buckets_rebuilt(), "not rebuilt");
      const BucketAssignment expected =
          assign_buckets(model->parameters(), arrival[0], static_cast<size_t>(first_cap * (1 << 20)),
                         static_cast<size_t>(cap * (1 << 20)), false);
      e.expect(ddp.reducer().snapshot().assignment.buckets == expected.buckets,
               fmt::format("rank {}: rebuilt buckets {} are not those of rank 0's arrival order {}", pg.rank(),
                           ddp.reducer().snapshot().assignment.buckets, expected.buckets));
      nn::mse_loss(out, tensor::zeros({2, 8})).backward();  // and they reduce correctly
    }));
  }
}

TEST_CASE("a bucket whose parameters are all unused is launched at the first gradient", "[ddp][unused][overlap]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    RecordingGroup recording(borrow(pg));
    tensor::manual_seed(3);
    auto model = std::make_shared<TwoHeads>();
    model->use_b = false;
    // Reverse registration order: bucket 0 = never.bias, never.weight, b.bias, b.weight (80
    // bytes, all unused), bucket 1 = a.bias, a.weight (40 bytes), bucket 2 = the trunk.
    DistributedDataParallel ddp(model, borrow(recording),
                                DDPOptions()
                                    .find_unused_parameters(true)
                                    .first_bucket_cap_mb(80.0 / (1 << 20))
                                    .bucket_cap_mb(40.0 / (1 << 20)));
    const auto buckets = ddp.reducer().snapshot().assignment.buckets;
    e.expect_eq(buckets, std::vector<std::vector<size_t>>{{7, 6, 5, 4}, {3, 2}, {1, 0}}, "buckets");
    for (Tensor* p : {&model->a->weight, &model->a->bias}) {
      p->register_hook([&recording](const Tensor&) {
        recording.note("a gradient of head a");
        return Tensor();
      });
    }
    const Tensor out = ddp(tensor::ones({3, 4}));
    const std::string unused_bucket = pointer_event(ddp.reducer().snapshot().bucket_contents[0]);
    recording.clear();
    nn::mse_loss(out, tensor::zeros({3, 2})).backward();
    // Head a's two gradients arrive first; the unused bucket must go out at the first of them,
    // not wait for the second (which completes bucket 1).
    const std::vector<std::string> ev = events_of(recording);
    const auto launch = std::find(ev.begin(), ev.end(), unused_bucket);
    const auto second_a =
        std::find(std::find(ev.begin(), ev.end(), "a gradient of head a") + 1, ev.end(), "a gradient of head a");
    e.expect(launch != ev.end() && second_a != ev.end() && launch < second_a,
             fmt::format("the all-unused bucket was not launched before head a's second gradient: {}", ev));
  }));
}
