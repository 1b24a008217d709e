// Every collective on groups of 1-4 ranks, as threads (HashStore) and as processes (TCPStore
// on loopback), for every dtype and for 0, 1, 7 and (float32) 25 MiB elements, each result
// checked against values computed here independently; async work in flight; subgroups;
// point to point; argument errors (faults: faults_test.cc). With a GPU: the same collectives on CUDA tensors through
// Gloo's host staging (1-2 ranks) and through NCCL (a world of one; NCCL refuses two ranks on
// one device), NCCL's argument errors, abort, and a rank that never joins.
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "tests/comm/collective_values.h"
#include "tests/comm/comm_test_util.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/tensor/cuda.h"

#if TINYDDP_WITH_CUDA
#include "tests/cuda_test_util.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#endif

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;
using tensor::DType;
using tinyddp::testing::expect_values;
using tinyddp::testing::Expectations;
using tinyddp::testing::factor;
using tinyddp::testing::k25MiB;
using tinyddp::testing::kDTypes;
using tinyddp::testing::make;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_processes;
using tinyddp::testing::run_threads;
using tinyddp::testing::tensor_device;
using tinyddp::testing::value;
using tinyddp::testing::zeros_on_device;

namespace {

// The sum over a group's ranks of value(rank, i).
std::function<double(int64_t)> sum_over_ranks(int p) {
  return [p](int64_t i) {
    double s = 0;
    for (int q = 0; q < p; ++q) s += value(q, i);
    return s;
  };
}

// Allreduce with every op, and coalesced (`strided`: one of the tensors non-contiguous, which
// NCCL refuses), for one dtype and element count.
void exercise_allreduce(ProcessGroup& pg, Expectations& e, DType dtype, int64_t n, bool strided,
                        const std::string& tag) {
  const int r = pg.rank(), p = pg.size();
  const auto sum_of = sum_over_ranks(p);
  Tensor t = make(n, dtype, [&](int64_t i) { return value(r, i); });
  pg.allreduce(t)->wait();
  expect_values(e, t, sum_of, "allreduce sum " + tag);
  t = make(n, dtype, [&](int64_t i) { return value(r, i); });
  pg.allreduce(t, ReduceOp::kMax)->wait();
  expect_values(
      e, t,
      [&](int64_t i) {
        double m = 0;
        for (int q = 0; q < p; ++q) m = std::max(m, value(q, i));
        return m;
      },
      "allreduce max " + tag);
  t = make(n, dtype, [&](int64_t i) { return value(r, i); });
  pg.allreduce(t, ReduceOp::kMin)->wait();
  expect_values(
      e, t,
      [&](int64_t i) {
        double m = 1e9;
        for (int q = 0; q < p; ++q) m = std::min(m, value(q, i));
        return m;
      },
      "allreduce min " + tag);
  t = make(n, dtype, [&](int64_t i) { return factor(r, i); });
  pg.allreduce(t, ReduceOp::kProduct)->wait();
  expect_values(
      e, t,
      [&](int64_t i) {
        double m = 1;
        for (int q = 0; q < p; ++q) m *= factor(q, i);
        return m;
      },
      "allreduce product " + tag);
  if (tensor::is_floating_point(dtype)) {
    t = make(n, dtype, [&](int64_t i) { return value(r, i); });
    pg.allreduce(t, ReduceOp::kAvg)->wait();
    expect_values(
        e, t, [&](int64_t i) { return sum_of(i) / p; }, "allreduce avg " + tag);
  }
  // Coalesced: two tensors reduced as one buffer, including a non-contiguous one.
  Tensor a = make(n, dtype, [&](int64_t i) { return value(r, i); });
  Tensor b = make(2 * 3, dtype, [&](int64_t i) { return value(r, i + 100); }).view({2, 3}).t();
  if (!strided) b = b.contiguous();
  pg.allreduce(std::vector<Tensor>{a, b})->wait();
  expect_values(e, a, sum_of, "coalesced allreduce (first) " + tag);
  expect_values(
      e, b.contiguous(), [&](int64_t i) { return sum_of((i % 2) * 3 + i / 2 + 100); },
      "coalesced allreduce (strided second) " + tag);
}

// Broadcast, allgather, gather, scatter, reduce, reduce_scatter and barrier, for one dtype and
// element count.
void exercise_others(ProcessGroup& pg, Expectations& e, DType dtype, int64_t n, const std::string& tag) {
  const int r = pg.rank(), p = pg.size();
  const auto sum_of = sum_over_ranks(p);
  Tensor t;
  // broadcast from the last rank.
  t = make(n, dtype, [&](int64_t i) { return value(r, i); });
  pg.broadcast(t, p - 1)->wait();
  expect_values(
      e, t, [&](int64_t i) { return value(p - 1, i); }, "broadcast " + tag);
  // allgather.
  std::vector<Tensor> outputs;
  for (int q = 0; q < p; ++q) outputs.push_back(zeros_on_device(n, dtype));
  pg.allgather(outputs, make(n, dtype, [&](int64_t i) { return value(r, i); }))->wait();
  for (int q = 0; q < p; ++q)
    expect_values(
        e, outputs[q], [&](int64_t i) { return value(q, i); }, fmt::format("allgather[{}] {}", q, tag));
  // gather to rank min(1, p - 1).
  const int gather_root = std::min(1, p - 1);
  std::vector<Tensor> gathered;
  if (r == gather_root) {
    for (int q = 0; q < p; ++q) gathered.push_back(zeros_on_device(n, dtype));
  }
  pg.gather(gathered, make(n, dtype, [&](int64_t i) { return value(r, i); }), gather_root)->wait();
  for (size_t q = 0; q < gathered.size(); ++q) {
    expect_values(
        e, gathered[q], [&](int64_t i) { return value(static_cast<int>(q), i); }, fmt::format("gather[{}] {}", q, tag));
  }
  // scatter from rank 0: rank q receives values of "rank q + 10".
  std::vector<Tensor> pieces;
  if (r == 0) {
    for (int q = 0; q < p; ++q) pieces.push_back(make(n, dtype, [&](int64_t i) { return value(q + 10, i); }));
  }
  t = zeros_on_device(n, dtype);
  pg.scatter(t, pieces, 0)->wait();
  expect_values(
      e, t, [&](int64_t i) { return value(r + 10, i); }, "scatter " + tag);
  // reduce to the last rank: only it changes.
  t = make(n, dtype, [&](int64_t i) { return value(r, i); });
  pg.reduce(t, p - 1)->wait();
  expect_values(
      e, t, r == p - 1 ? std::function<double(int64_t)>(sum_of) : [&](int64_t i) { return value(r, i); },
      "reduce " + tag);
  // reduce_scatter: rank q gets the sum over ranks of inputs[q].
  std::vector<Tensor> inputs;
  for (int q = 0; q < p; ++q) inputs.push_back(make(n, dtype, [&](int64_t i) { return value(r, i + q); }));
  t = zeros_on_device(n, dtype);
  pg.reduce_scatter(t, inputs)->wait();
  expect_values(
      e, t, [&](int64_t i) { return sum_of(i + r); }, "reduce_scatter " + tag);
  pg.barrier()->wait();
}

// Every collective once for one dtype and element count (`strided`: include a non-contiguous
// tensor, which NCCL refuses).
void exercise(ProcessGroup& pg, Expectations& e, DType dtype, int64_t n, bool strided = true) {
  const std::string tag = fmt::format("{} x {} on {} ranks", n, tensor::dtype_name(dtype), pg.size());
  exercise_allreduce(pg, e, dtype, n, strided, tag);
  exercise_others(pg, e, dtype, n, tag);
}

// Every dtype at 0, 1 and 7 elements; float32 at 25 MiB.
void exercise_every_size(ProcessGroup& pg, Expectations& e, bool strided) {
  for (DType dtype : kDTypes) {
    for (int64_t n : {0, 1, 7}) exercise(pg, e, dtype, n, strided);
  }
  exercise(pg, e, tensor::kFloat32, k25MiB, strided);
}
void exercise_all(ProcessGroup& pg, Expectations& e) { exercise_every_size(pg, e, true); }

}  // namespace

TEST_CASE("collectives on 1-4 ranks as threads", "[comm][gloo][threads]") {
  for (int size : {1, 2, 3, 4}) {
    INFO("world size " << size);
    require_no_failures(run_threads(size, exercise_all));
  }
}

TEST_CASE("collectives on 2-4 ranks as processes over TCPStore", "[comm][gloo][processes]") {
  for (int size : {2, 3, 4}) {
    INFO("world size " << size);
    require_no_failures(run_processes(size, exercise_all));
  }
}

TEST_CASE("several allreduces in flight complete in issue order", "[comm][gloo][async]") {
  require_no_failures(run_threads(3, [](ProcessGroup& pg, Expectations& e) {
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 8; ++k) {
      tensors.push_back(tensor::full({1000 * (k + 1)}, pg.rank() + k));
      works.push_back(pg.allreduce(tensors.back()));  // none waited yet
    }
    for (int k = 7; k >= 0; --k) works[k]->wait();  // wait in any order
    for (int k = 0; k < 8; ++k) {
      const double expected = 0 + 1 + 2 + 3 * k;  // sum over ranks of (rank + k)
      e.expect(tensors[k].to_vector<float>().back() == expected,
               fmt::format("allreduce {} gave {}", k, tensors[k].to_vector<float>().back()));
      e.expect(works[k]->is_completed() && works[k]->is_success(), "work " + std::to_string(k) + " not successful");
    }
  }));
}

TEST_CASE("point to point, subgroups, and a group of one", "[comm][gloo]") {
  require_no_failures(run_threads(4, [](ProcessGroup& pg, Expectations& e) {
    const int r = pg.rank(), p = pg.size();
    // A ring: send to the next rank, receive from the previous, two tags at once.
    const Tensor out = tensor::full({5}, r);
    const Tensor in = tensor::zeros({5});
    const Tensor in2 = tensor::zeros({2});
    auto s1 = pg.send(out, (r + 1) % p, 7);
    auto s2 = pg.send(tensor::full({2}, 100 + r), (r + 1) % p, 8);
    auto r2 = pg.recv(in2, (r + p - 1) % p, 8);
    auto r1 = pg.recv(in, (r + p - 1) % p, 7);
    s1->wait();
    s2->wait();
    r1->wait();
    r2->wait();
    e.expect(in.to_vector<float>() == std::vector<float>(5, static_cast<float>((r + p - 1) % p)), "recv tag 7");
    e.expect(in2.to_vector<float>() == std::vector<float>(2, static_cast<float>(100 + (r + p - 1) % p)), "recv tag 8");
    // Subgroups of the even and the odd ranks.
    auto evens = pg.new_group({0, 2});
    auto odds = pg.new_group({1, 3});
    auto mine = r % 2 == 0 ? evens : odds;
    e.expect((r % 2 == 0) == (evens != nullptr) && (r % 2 == 1) == (odds != nullptr), "membership");
    e.expect(mine->size() == 2 && mine->rank() == r / 2, "subgroup rank/size");
    const Tensor t = tensor::full({3}, r);
    mine->allreduce(t)->wait();
    e.expect(t.to_vector<float>()[0] == (r % 2 == 0 ? 0 + 2 : 1 + 3), "subgroup allreduce");
  }));
  require_no_failures(run_threads(1, [](ProcessGroup& pg, Expectations& e) {
    const Tensor t = tensor::full({4}, 3);
    pg.allreduce(t, ReduceOp::kAvg)->wait();
    e.expect(t.to_vector<float>()[0] == 3, "allreduce on one rank is the identity");
    pg.barrier()->wait();
  }));
}

TEST_CASE("argument errors are raised when the operation is issued", "[comm][gloo][errors]") {
  require_no_failures(run_threads(2, [](ProcessGroup& pg, Expectations& e) {
    const auto throws = [&](const std::function<void()>& f, const std::string& text) {
      try {
        f();
        e.failures.push_back("no error for: " + text);
      } catch (const std::exception& ex) {
        e.expect(std::string(ex.what()).find(text) != std::string::npos,
                 std::string("message '") + ex.what() + "' lacks '" + text + "'");
      }
    };
    throws([&] { pg.broadcast(tensor::zeros({2}), 5); }, "broadcast: root 5 is not a rank of this group of 2");
    throws([&] { pg.allgather({tensor::zeros({2})}, tensor::zeros({2})); },
           "allgather: 1 outputs given for a group of 2");
    throws(
        [&] {
          pg.allgather({tensor::zeros({2}), tensor::zeros({3})}, tensor::zeros({2}));
        },
        "output 1 is float32 [3] but must be float32 [2]");
    throws([&] { pg.allreduce(tensor::gt(tensor::zeros({2}), 0.0)); }, "dtype bool is not supported");
    throws([&] { pg.allreduce(tensor::arange(3), ReduceOp::kAvg); }, "avg needs floating-point tensors, got int64");
    throws([&] { pg.allreduce(std::vector<Tensor>{}); }, "allreduce: no tensors given");
    throws([&] { pg.send(tensor::zeros({1}), pg.rank()); }, "send: destination");
    throws([&] { pg.new_group({1, 0}); }, "ranks must be sorted and unique");
    pg.barrier()->wait();
  }));
  CHECK_THROWS_WITH(ProcessGroupGloo(std::make_shared<HashStore>(), 2, 2), Contains("rank 2 is not in [0, 2)"));
}

TEST_CASE("gloo: every collective on CUDA tensors, staged through host memory, on 1-2 ranks", "[comm][gloo][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  for (int size : {1, 2}) {
    require_no_failures(run_threads(size, [](ProcessGroup& pg, Expectations& e) {
      tensor_device = tensor::Device::cuda(0);
      exercise_all(pg, e);
      // A CUDA tensor's result is visible to kernels queued after wait(), without a host sync.
      const Tensor t = tensor::ones({1000}, tensor::TensorOptions().device(tensor::Device::cuda(0)));
      pg.allreduce(t)->wait();
      e.expect(tensor::sum(t).item<double>() == 1000.0 * pg.size(), "allreduce result seen by the next kernel");
    }));
  }
}

TEST_CASE("nccl: every collective with a world of one", "[comm][nccl][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  ProcessGroupNccl pg(std::make_shared<HashStore>(), 0, 1);
  CHECK(pg.backend() == "nccl");
  Expectations e;
  tensor_device = tensor::Device::cuda(0);
  exercise_every_size(pg, e, /*strided=*/false);
  tensor_device = tensor::kCPU;
  require_no_failures(e.failures);
  // wait() does not block the host: the compute stream waits, and a later read sees the result.
  const Tensor t = tensor::full({1 << 20}, 2.0, tensor::TensorOptions().device(tensor::Device::cuda(0)));
  auto work = pg.allreduce(t, ReduceOp::kAvg);
  work->wait();
  CHECK(tensor::max(t).item<double>() == 2.0);
  work->wait(comm::Millis(10000));  // timed: observed on the host
  CHECK(work->is_completed());
  CHECK(work->is_success());
  CHECK_THROWS_WITH(pg.allreduce(tensor::ones({3})), Contains("the NCCL backend takes CUDA tensors"));
  CHECK_THROWS_WITH(pg.allreduce(tensor::ones({3, 2}, tensor::TensorOptions().device(tensor::Device::cuda(0))).t()),
                    Contains("is not contiguous"));
  CHECK_THROWS_WITH(
      pg.allreduce(tensor::ones({3}, tensor::TensorOptions(tensor::kBool).device(tensor::Device::cuda(0)))),
      Contains("cannot reduce bool tensors"));
  // After abort, every call fails with the reason.
  pg.abort("stopped by the test");
  CHECK_THROWS_WITH(pg.allreduce(t), Contains("stopped by the test"));
}

TEST_CASE("gloo: a CUDA tensor is staged once the work before the collective ran, not what was queued after",
          "[comm][gloo][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
#if TINYDDP_WITH_CUDA
  ProcessGroupGloo pg(std::make_shared<HashStore>(), 0, 1);
  const tensor::Device gpu = tensor::Device::cuda(0);
  const Tensor t = tensor::ones({1 << 16}, tensor::TensorOptions().device(gpu));
  const Tensor strided = tensor::ones({1 << 10, 2}, tensor::TensorOptions().device(gpu)).select(1, 1);
  const Tensor other = tensor::ones({8}, tensor::TensorOptions().device(gpu));
  t.mul_(3.0);  // queued before the collective: the staging copy must see it
  strided.mul_(5.0);
  auto work = pg.allreduce(t, ReduceOp::kSum);
  auto strided_work = pg.broadcast(strided, 0);
  {
    // Kernels queued after the collective are held: the worker must not wait for them.
    testing::StreamGate gate(tensor::cuda::compute_stream(0));
    other.add_(100.0);
    CHECK_NOTHROW(work->wait(comm::Millis(5000)));
    CHECK_NOTHROW(strided_work->wait(comm::Millis(5000)));
  }
  CHECK(tensor::sum(t).item<double>() == 3.0 * (1 << 16));
  CHECK(tensor::sum(other).item<double>() == 101.0 * 8);
  CHECK(tensor::sum(strided).item<double>() == 5.0 * (1 << 10));
#endif
}

TEST_CASE("nccl: an abort while a collective is being launched fails that collective's work",
          "[comm][nccl][cuda][faults]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  ProcessGroupNccl pg(std::make_shared<HashStore>(), 0, 1);
  const Tensor t = tensor::ones({1 << 10}, tensor::TensorOptions().device(tensor::Device::cuda(0)));
  pg.allreduce(t)->wait(comm::Millis(10000));  // the communicator exists
  std::thread aborter;
  pg.set_after_queued_for_testing([&] {
    // The collective is queued; its Work not yet registered. An abort now must still fail it.
    aborter = std::thread([&] { pg.abort("aborted during the launch"); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  auto work = pg.allreduce(t);
  aborter.join();
  pg.set_after_queued_for_testing(nullptr);
  CHECK_THROWS_WITH(work->wait(comm::Millis(5000)), Contains("aborted during the launch"));
  CHECK_FALSE(work->is_success());
}

TEST_CASE("nccl: a tensor a collective used can be freed after the group is destroyed", "[comm][nccl][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const tensor::Device gpu = tensor::Device::cuda(0);
  for (int round = 0; round < 3; ++round) {
    Tensor t = tensor::ones({1 << 18}, tensor::TensorOptions().device(gpu));
    {
      ProcessGroupNccl pg(std::make_shared<HashStore>(), 0, 1);
      pg.allreduce(t)->wait(comm::Millis(10000));
    }              // the group (and its use of the stream) ends first
    t = Tensor();  // the block was recorded on the group's stream: an event is recorded there now
    for (int i = 0; i < 4; ++i)
      CHECK_NOTHROW(tensor::sum(tensor::ones({1 << 18}, tensor::TensorOptions().device(gpu))));
  }
  tensor::cuda::synchronize();
}

TEST_CASE("nccl: a rank that never joins makes the communicator's creation fail within the timeout",
          "[comm][nccl][cuda][faults]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  ProcessGroupOptions options;
  options.timeout(comm::Millis(1500));
  ProcessGroupNccl pg(std::make_shared<HashStore>(), 0, 2, options);
  const auto before = std::chrono::steady_clock::now();
  const Tensor t = tensor::ones({4}, tensor::TensorOptions().device(tensor::Device::cuda(0)));
  CHECK_THROWS_WITH(pg.allreduce(t), Contains("ranks [1] never joined") && Contains("tinyddp/nccl/1/rank1"));
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(10));
}

TEST_CASE("without a GPU, the nccl backend says why", "[comm][nccl][errors]") {
  if (tensor::cuda::is_available()) TINYDDP_SKIP("a CUDA device is present");
  CHECK_THROWS_WITH(ProcessGroupNccl(std::make_shared<HashStore>(), 0, 1),
                    Contains("ProcessGroupNccl") && Contains(tensor::cuda::unavailable_reason()));
  comm::InitOptions options;
  options.rank(0);
  options.world_size(1);
  CHECK_THROWS_WITH(comm::init_process_group("nccl", options), Contains("the 'nccl' backend needs a GPU"));
  CHECK_THROWS_WITH(comm::init_process_group("mpi", options), Contains("unknown backend 'mpi'"));
}
