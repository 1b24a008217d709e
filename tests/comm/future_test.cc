// comm::Future (comm/future.h) with torch.futures.Future's meaning: a `then` callback runs
// exactly once, when the work completes (on the worker that completed it, or at once on a
// completed future); wait() can be called again and re-runs nothing; errors travel along the
// chain; a callback that returns a Future is adopted; and chains of collectives run depth
// first, in the same order on every rank, however the callbacks met their works; and
// Work::get_future, as torch's.
#include "tinyddp/comm/future.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/tensor/ops.h"

using namespace tinyddp;
using comm::Future;
using comm::ProcessGroup;
using tensor::Tensor;
using testing::Expectations;
using testing::require_no_failures;
using testing::run_threads;

TEST_CASE("Future: then runs once, when the work completes, on the worker; wait() is idempotent", "[comm][future]") {
  std::atomic<int> runs{0};
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    // Rank 1 joins late, so rank 0's callback is attached before its allreduce completes.
    if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const Tensor t = tensor::ones({1 << 16});
    const std::thread::id caller = std::this_thread::get_id();
    std::thread::id ran_on;
    std::shared_ptr<Future> doubled = Future::from_work(pg.allreduce(t), t)->then([&](Future& done) {
      ++runs;
      ran_on = std::this_thread::get_id();
      return tensor::mul(done.value(), 2.0);
    });
    const Tensor first = doubled->wait();
    const Tensor second = doubled->wait();
    e.expect(first.is_same(second), "wait() returned another tensor the second time");
    e.expect(first.to_vector<float>().front() == 4.0f, fmt::format("value {}", first.to_vector<float>().front()));
    e.expect(doubled->value().is_same(first), "value() differs from wait()");
    if (pg.rank() == 0) e.expect(ran_on != caller, "the callback ran on the caller's thread, not on completion");
  }));
  CHECK(runs == 2);  // once per rank
}

TEST_CASE("Future: then on a completed future runs at once, on this thread", "[comm][future]") {
  auto done = Future::completed(tensor::ones({3}));
  std::thread::id ran_on;
  auto next = done->then([&](Future& f) {
    ran_on = std::this_thread::get_id();
    return tensor::add(f.value(), 1.0);
  });
  CHECK(next->done());
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(next->wait().to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("Future: errors travel along the chain; misuse is refused", "[comm][future][errors]") {
  SECTION("a failed future: value() rethrows inside the callback, and the next future fails with it") {
    auto first = std::make_shared<Future>();
    int runs = 0;
    auto next = first->then([&](Future& f) {
      ++runs;
      return f.value();
    });
    first->set_exception(std::make_exception_ptr(std::runtime_error("link down")));
    CHECK(runs == 1);
    CHECK_THROWS_WITH(next->wait(), "link down");
    CHECK_THROWS_WITH(next->wait(), "link down");  // again, re-running nothing
    CHECK(runs == 1);
  }
  SECTION("a callback that throws fails the next future") {
    auto next = Future::completed(tensor::ones({1}))->then([](Future&) -> Tensor { throw Error("bad bucket"); });
    CHECK_THROWS_WITH(next->wait(), "bad bucket");
  }
  SECTION("completing twice, value() while pending, a null future from a callback") {
    Future pending;
    CHECK_THROWS_WITH(pending.value(), Catch::Contains("not complete yet"));
    pending.set_result(tensor::ones({1}));
    CHECK_THROWS_WITH(pending.set_result(tensor::ones({1})), Catch::Contains("completed twice"));
    auto null = Future::completed(tensor::ones({1}))->then([](Future&) { return std::shared_ptr<Future>(); });
    CHECK_THROWS_WITH(null->wait(), Catch::Contains("returned a null future"));
  }
}

TEST_CASE("Future: a callback's future is adopted, and chains run depth first on every rank", "[comm][future]") {
  // Each rank: allreduce a, then (callbacks) b and c, then the caller's own d, each a different
  // size so that the desync check would catch ranks running them in different orders. Rank 0
  // attaches the chain before a completes (its callbacks run on Gloo's worker); rank 1 only
  // after (its first callback runs at once, on the caller's thread). Both run a, b, c, d.
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const Tensor a = tensor::ones({1}), b = tensor::ones({2}), c = tensor::ones({3}), d = tensor::ones({4});
    auto first = pg.allreduce(a);
    if (pg.rank() == 1) first->wait();
    std::shared_ptr<Future> chain = Future::from_work(first, a)
                                        ->then([&pg, b](Future& done) {
                                          done.value();
                                          return Future::from_work(pg.allreduce(b), b);
                                        })
                                        ->then([&pg, c](Future& done) {
                                          done.value();
                                          return Future::from_work(pg.allreduce(c), c);
                                        });
    auto last = pg.allreduce(d);
    try {
      e.expect(chain->wait().is_same(c), "the chain's value is not the last collective's tensor");
      last->wait();
    } catch (const std::exception& ex) {
      e.expect(false, ex.what());
      return;
    }
    for (const Tensor& t : {a, b, c, d}) {
      e.expect(tensor::equal(t, tensor::full(t.sizes(), 2.0)), fmt::format("a tensor of {} elements", t.numel()));
    }
    e.expect(chain->completed_at().has_value(), "no completion time");
  }));
}

TEST_CASE("Work::get_future: the tensor the collective wrote, one Future while held, the error", "[comm][future]") {
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    const Tensor t = tensor::full({4}, static_cast<double>(pg.rank() + 1));
    const std::shared_ptr<comm::Work> work = pg.allreduce(t);
    const std::shared_ptr<Future> future = work->get_future();
    e.expect(work->get_future() == future, "a second get_future() made another Future while the first is held");
    const Tensor value = future->wait();
    e.expect(value.is_same(t), "the allreduce's Future holds another tensor than the one it reduced");
    e.expect(value.to_vector<float>().front() == 3.0f, fmt::format("value {}", value.to_vector<float>().front()));
    // A broadcast's is its tensor; an allgather's (a list) is undefined.
    const Tensor b = tensor::full({2}, static_cast<double>(pg.rank()));
    e.expect(pg.broadcast(b, 1)->get_future()->wait().is_same(b), "broadcast's Future holds another tensor");
    std::vector<Tensor> outputs{tensor::zeros({2}), tensor::zeros({2})};
    e.expect(!pg.allgather(outputs, b)->get_future()->wait().defined(), "allgather's Future holds a tensor");
  }));
  // A failed operation's Future fails with its error.
  const auto failed = std::make_shared<comm::Work>("allreduce (test)");
  failed->finish(std::make_exception_ptr(Error("the link went down")));
  CHECK_THROWS_WITH(failed->get_future()->wait(), "the link went down");
}
