// Desync detection (comm/desync_check.h): ranks that call different collectives (one skips a
// broadcast, allreduces another size, dtype or op, or names another root) all get a
// CollectiveMismatchError naming the ranks and both calls, quickly and before any data moves,
// instead of a hang, an abort inside Gloo or wrong numbers; the group stays usable after it;
// the switch turns it off and every rank must agree on it. With a GPU: the same over NCCL, two
// ranks on the one device (the check comes before NCCL, which would refuse them).
#include <chrono>
#include <functional>
#include <thread>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using namespace tinyddp::comm;
using Catch::Contains;
using tinyddp::testing::Expectations;
using tinyddp::testing::require_no_failures;
using tinyddp::testing::run_threads;

namespace {

using Call = std::function<void(ProcessGroup&)>;

// Each rank runs calls[rank] (a collective that must fail with a mismatch), then an allreduce
// that all ranks agree on; checks each error against `expected` and the allreduce's sum.
std::vector<std::string> mismatch_then_agree(const std::vector<Call>& calls, const std::vector<std::string>& expected,
                                             std::vector<std::string>* messages = nullptr) {
  const int size = static_cast<int>(calls.size());
  std::mutex mutex;
  return run_threads(size, [&](ProcessGroup& pg, Expectations& e) {
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      calls[static_cast<size_t>(pg.rank())](pg);
      e.expect(false, "the mismatched call did not fail");
    } catch (const CollectiveMismatchError& error) {
      message = error.what();
    } catch (const std::exception& error) {
      e.expect(false, std::string("not a CollectiveMismatchError: ") + error.what());
    }
    // Well inside the group's timeout (20 s): the check does not wait for a timeout.
    e.expect(std::chrono::steady_clock::now() - start < std::chrono::seconds(5),
             "the mismatch took 5 s or more to report");
    for (const std::string& part : expected)
      e.expect(message.find(part) != std::string::npos, "'" + part + "' not in: " + message);
    if (messages != nullptr) {
      std::lock_guard<std::mutex> lock(mutex);
      messages->push_back(message.substr(message.find("failed: ")));
    }
    // No data moved, so the group goes on: a matching allreduce after it is exact.
    Tensor t = tensor::full({3}, static_cast<double>(pg.rank() + 1));
    pg.allreduce(t)->wait();
    const double sum = size * (size + 1) / 2.0;
    e.expect(tensor::allclose(t, tensor::full({3}, sum)), "the allreduce after the mismatch is wrong");
  });
}

Call allreduce_of(int64_t numel, tensor::DType dtype = tensor::kFloat32, ReduceOp op = ReduceOp::kSum) {
  return [=](ProcessGroup& pg) { pg.allreduce(tensor::ones({numel}, dtype), op)->wait(); };
}

Call broadcast_of(int64_t numel, int root) {
  return [=](ProcessGroup& pg) { pg.broadcast(tensor::ones({numel}), root)->wait(); };
}

}  // namespace

TEST_CASE("desync: a rank that skips a broadcast is named with both calls, on every rank", "[comm][desync]") {
  // Ranks 0 and 2 broadcast, rank 1 skipped it and allreduces: call 0 differs.
  std::vector<std::string> messages;
  require_no_failures(mismatch_then_agree({broadcast_of(8, 0), allreduce_of(8), broadcast_of(8, 0)},
                                          {"ranks 0, 2 called broadcast (call 0, 8 x float32, root 0)",
                                           "rank 1 called allreduce (call 0, 8 x float32, sum)", "no data was sent"},
                                          &messages));
  REQUIRE(messages.size() == 3);
  CHECK(messages[0] == messages[1]);  // every rank reports the same thing
  CHECK(messages[1] == messages[2]);
}

TEST_CASE("desync: allreduces of different sizes, dtypes or ops fail on every rank", "[comm][desync]") {
  SECTION("size, small path (would abort inside Gloo)") {
    require_no_failures(mismatch_then_agree(
        {allreduce_of(4), allreduce_of(5)},
        {"rank 0 called allreduce (call 0, 4 x float32, sum)", "rank 1 called allreduce (call 0, 5 x float32, sum)"}));
  }
  SECTION("size, ring path") {
    require_no_failures(mismatch_then_agree({allreduce_of(1 << 18), allreduce_of((1 << 18) + 1)},
                                            {"262144 x float32", "262145 x float32"}));
  }
  SECTION("dtype") {
    require_no_failures(mismatch_then_agree({allreduce_of(4, tensor::kFloat32), allreduce_of(4, tensor::kFloat64)},
                                            {"4 x float32", "4 x float64"}));
  }
  SECTION("reduce op (would silently give wrong numbers)") {
    require_no_failures(mismatch_then_agree(
        {allreduce_of(4, tensor::kFloat32, ReduceOp::kSum), allreduce_of(4, tensor::kFloat32, ReduceOp::kMax)},
        {"4 x float32, sum)", "4 x float32, max)"}));
  }
  SECTION("broadcast root") {
    require_no_failures(mismatch_then_agree({broadcast_of(4, 0), broadcast_of(4, 1)}, {"root 0)", "root 1)"}));
  }
  SECTION("a barrier against an allgather") {
    require_no_failures(
        mismatch_then_agree({[](ProcessGroup& pg) { pg.barrier()->wait(); },
                             [](ProcessGroup& pg) {
                               std::vector<Tensor> out = {tensor::zeros({2}), tensor::zeros({2})};
                               pg.allgather(out, tensor::ones({2}))->wait();
                             }},
                            {"rank 0 called barrier (call 0)", "rank 1 called allgather (call 0, 2 x float32)"}));
  }
}

TEST_CASE("desync: a later call is counted (the error names the call number)", "[comm][desync]") {
  require_no_failures(
      mismatch_then_agree({[](ProcessGroup& pg) {
                             pg.barrier()->wait();
                             pg.allreduce(tensor::ones({2}), ReduceOp::kMin)->wait();
                           },
                           [](ProcessGroup& pg) {
                             pg.barrier()->wait();
                             pg.allreduce(tensor::ones({2}), ReduceOp::kProduct)->wait();
                           }},
                          {"allreduce (call 1, 2 x float32, min)", "allreduce (call 1, 2 x float32, product)"}));
}

TEST_CASE("desync: with the check off, a mismatched op goes unnoticed (what the check prevents)", "[comm][desync]") {
  auto store = std::make_shared<HashStore>();
  ProcessGroupOptions options;
  options.timeout(std::chrono::milliseconds(10000));
  options.check_calls(false);
  std::vector<Tensor> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        ProcessGroupGloo pg(store, rank, 2, options);
        Tensor t = tensor::full({4}, rank + 1.0);
        pg.allreduce(t, rank == 0 ? ReduceOp::kSum : ReduceOp::kMax)->wait();
        results[static_cast<size_t>(rank)] = t;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  INFO(errors[0] << " | " << errors[1]);
  REQUIRE(errors == std::vector<std::string>{"", ""});
  // No error, and the ranks now hold different "results": rank 0 summed (3), rank 1 took the max (2).
  REQUIRE(results[0].defined());
  REQUIRE(results[1].defined());
  CHECK_FALSE(tensor::allclose(results[0], results[1]));
}

TEST_CASE("desync: ranks that disagree on the switch are told so when the group is made", "[comm][desync]") {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(std::chrono::milliseconds(10000));
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      ProcessGroupOptions options;
      options.timeout(std::chrono::milliseconds(10000));
      options.check_calls(rank == 0);
      try {
        new_process_group("gloo", store, rank, 2, options);
      } catch (const Error& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const std::string& error : errors) {
    CHECK_THAT(error, Contains("ranks disagree on the desync check: on for ranks [0], off for ranks [1]"));
  }
}

TEST_CASE("desync: call records render what they hold", "[comm][desync]") {
  const CallSignature reduce{Collective::kReduce, tensor::kBFloat16, 12, 3, ReduceOp::kAvg};
  CHECK(CallSignature::describe_row(reduce.encode(7)) == "reduce (call 7, 12 x bfloat16, root 3, avg)");
  CHECK(CallSignature::describe_row(CallSignature::Row{}) == "an unreadable call record [0, 0, 0, 0, 0, 0]");
  const auto same = reduce.encode(7);
  CHECK_FALSE(find_mismatch({same, same, same}, "G").has_value());
  const CallSignature other{Collective::kReduce, tensor::kBFloat16, 12, 2, ReduceOp::kAvg};
  const auto message = find_mismatch({same, other.encode(7), same}, "G");
  REQUIRE(message.has_value());
  CHECK_THAT(*message, Contains("G: the ranks called different collectives: ranks 0, 2 called reduce (call 7, 12 x "
                                "bfloat16, root 3, avg); rank 1 called reduce (call 7, 12 x bfloat16, root 2, avg)"));
}

TEST_CASE("desync: on two ranks a small allreduce met by another call changes no tensor, and the group goes on",
          "[comm][desync]") {
  // Rank 0's record travels with its allreduce's data (one message each way); rank 1's with
  // nothing. Both read the whole of the other's message, so the connection stays in step.
  std::vector<std::string> messages;
  require_no_failures(run_threads(2, [&](ProcessGroup& pg, Expectations& e) {
    const Tensor mine = tensor::full({6}, pg.rank() + 1.0);
    try {
      if (pg.rank() == 0) {
        pg.allreduce(mine)->wait();
      } else {
        pg.broadcast(mine, 0)->wait();
      }
      e.expect(false, "the mismatched call did not fail");
    } catch (const CollectiveMismatchError& error) {
      const std::string message = error.what();
      e.expect(message.find("rank 0 called allreduce (call 0, 6 x float32, sum); rank 1 called broadcast (call 0, 6 x "
                            "float32, root 0)") != std::string::npos,
               message);
      e.expect(message.find("no tensor was changed") != std::string::npos, message);
    }
    e.expect(tensor::equal(mine, tensor::full({6}, pg.rank() + 1.0)), "the refused call changed the tensor");
    for (const int64_t numel : {6, 1 << 18}) {  // the small path and the ring after it
      Tensor t = tensor::full({numel}, static_cast<double>(pg.rank() + 1));
      pg.allreduce(t)->wait();
      e.expect(tensor::equal(t, tensor::full({numel}, 3.0)), "an allreduce after the mismatch is wrong");
    }
  }));
}

TEST_CASE("desync: a backend that checks at issue over a side group (as NCCL does) reports the same errors",
          "[comm][desync]") {
  // The check is ProcessGroupWrapper's, not Gloo's: here it wraps a forwarding backend (whose
  // inner Gloo group checks nothing) and swaps the rows over a second Gloo group before each
  // call.
  auto store = std::make_shared<HashStore>();
  store->set_timeout(std::chrono::milliseconds(10000));
  std::vector<std::string> messages(2), failures;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      Expectations e;
      try {
        ProcessGroupOptions off;
        off.timeout(std::chrono::milliseconds(10000));
        off.check_calls(false);
        auto inner = std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>("inner", store), rank, 2, off);
        auto side = std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>("side", store), rank, 2, off);
        auto recording = std::make_shared<testing::RecordingGroup>(inner);
        ProcessGroupWrapper pg(recording, side);
        const ReduceOp op = rank == 0 ? ReduceOp::kSum : ReduceOp::kMax;  // unchecked, this would give wrong numbers
        const Tensor mine = tensor::full({4}, rank + 1.0);
        try {
          pg.allreduce(mine, op)->wait();
          e.expect(false, "the mismatched call did not fail");
        } catch (const CollectiveMismatchError& error) {
          messages[static_cast<size_t>(rank)] = error.what();
        }
        e.expect(recording->count("allreduce") == 0, "the refused call reached the backend");
        e.expect(tensor::equal(mine, tensor::full({4}, rank + 1.0)), "the refused call changed the tensor");
        Tensor t = tensor::full({4}, rank + 1.0);
        pg.allreduce(t)->wait();
        e.expect(tensor::equal(t, tensor::full({4}, 3.0)), "the allreduce after the mismatch is wrong");
      } catch (const std::exception& ex) {
        e.failures.push_back(std::string("exception: ") + ex.what());
      }
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& f : e.failures) failures.push_back("rank " + std::to_string(rank) + ": " + f);
    });
  }
  for (std::thread& t : ranks) t.join();
  require_no_failures(failures);
  for (const std::string& message : messages) {
    CHECK_THAT(message,
               Contains("RecordingGroup: the ranks called different collectives: rank 0 called allreduce (call 0, "
                        "4 x float32, sum); rank 1 called allreduce (call 0, 4 x float32, max)"));
    CHECK_THAT(message, Contains("no data was sent"));
  }
  CHECK(messages[0].substr(messages[0].find("failed: ")) == messages[1].substr(messages[1].find("failed: ")));
}

TEST_CASE("desync: new_process_group wraps the backend, and a subgroup is checked on its own", "[comm][desync]") {
  // Three ranks; ranks 0 and 2 form a subgroup whose calls then differ. The subgroup's wrapper
  // numbers its own calls (call 0, whatever the parent group did before).
  require_no_failures(run_threads(3, [](ProcessGroup& pg, Expectations& e) {
    auto* wrapper = dynamic_cast<ProcessGroupWrapper*>(&pg);
    e.expect(wrapper != nullptr, "new_process_group did not wrap the backend");
    if (wrapper == nullptr) return;
    e.expect(dynamic_cast<ProcessGroupGloo*>(wrapper->wrapped().get()) != nullptr, "the wrapped group is not Gloo's");
    e.expect(wrapper->checking(), "the check is off by default");
    pg.barrier()->wait();
    const auto pair = pg.new_group({0, 2});
    const auto first = pg.new_group({0});  // a group of one: nothing to compare
    e.expect(pg.rank() != 0 || (first != nullptr && dynamic_cast<ProcessGroupWrapper*>(first.get()) == nullptr),
             "a group of one rank was wrapped");
    if (pg.rank() == 1) {
      e.expect(pair == nullptr, "rank 1 got a group it is not in");
      return;
    }
    e.expect(dynamic_cast<ProcessGroupWrapper*>(pair.get()) != nullptr, "the subgroup is not checked");
    const Tensor t = tensor::ones({pg.rank() == 0 ? 5 : 7});
    try {
      pair->allreduce(t)->wait();
      e.expect(false, "the mismatched call did not fail");
    } catch (const CollectiveMismatchError& error) {
      const std::string message = error.what();
      e.expect(message.find("rank 0 called allreduce (call 0, 5 x float32, sum); rank 1 called allreduce (call 0, 7 "
                            "x float32, sum)") != std::string::npos,
               message);
    }
    Tensor agreed = tensor::full({2}, pg.rank() + 1.0);
    pair->allreduce(agreed)->wait();
    e.expect(tensor::equal(agreed, tensor::full({2}, 4.0)), "the subgroup's allreduce after the mismatch is wrong");
  }));
}

TEST_CASE("desync: a wrapper's side group must hold the wrapped group's ranks", "[comm][desync]") {
  auto store = std::make_shared<HashStore>();
  auto one = std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>("one", store), 0, 1);
  auto other = std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>("other", store), 0, 1);
  CHECK_NOTHROW(ProcessGroupWrapper(one, other));
  CHECK_THROWS_WITH(ProcessGroupWrapper(one, nullptr),
                    Contains("the side group must hold the same ranks as ProcessGroupGloo (rank 0 of 1)"));
}

// Two NCCL ranks on the one GPU: NCCL itself refuses them, but the rendezvous and the desync
// check come first (at the first collective), so both can be seen on one device.
namespace {
// Runs `body` as ranks 0 and 1 of one NCCL group on cuda:0, on two threads; returns what each
// threw (empty when nothing).
std::vector<std::string> two_nccl_ranks(const std::function<void(ProcessGroup&, int)>& body,
                                        const std::function<void(ProcessGroupOptions&, int)>& options_for = nullptr) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      ProcessGroupOptions options;
      options.timeout(comm::Millis(10000));
      if (options_for) options_for(options, rank);
      try {
        const auto pg = new_process_group("nccl", store, rank, 2, options);
        body(*pg, rank);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  return errors;
}
}  // namespace

TEST_CASE("nccl: the desync check finds ranks calling different collectives before NCCL runs",
          "[comm][nccl][cuda][desync]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  const auto errors = two_nccl_ranks([](ProcessGroup& pg, int rank) {
    const Tensor t = tensor::ones({rank == 0 ? 4 : 6}, tensor::TensorOptions().device(tensor::Device::cuda(0)));
    pg.allreduce(t)->wait(comm::Millis(10000));
  });
  for (const std::string& error : errors) {
    CHECK_THAT(error, Contains("ProcessGroupNccl: the ranks called different collectives") &&
                          Contains("rank 0 called allreduce (call 0, 4 x float32") &&
                          Contains("rank 1 called allreduce (call 0, 6 x float32"));
  }
}

TEST_CASE("nccl: ranks that disagree on the desync check are told so at the first collective",
          "[comm][nccl][cuda][desync]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP(tensor::cuda::unavailable_reason());
  // The constructor waits for no other rank (rank 1 is made after rank 0's returned).
  { ProcessGroupNccl alone(std::make_shared<HashStore>(), 0, 2); }
  const auto errors = two_nccl_ranks(
      [](ProcessGroup& pg, int) {
        pg.allreduce(tensor::ones({4}, tensor::TensorOptions().device(tensor::Device::cuda(0))));
      },
      [](ProcessGroupOptions& options, int rank) { options.check_calls(rank == 0); });
  for (const std::string& error : errors) {
    CHECK_THAT(error, Contains("ranks disagree on the desync check: on for ranks [0], off for ranks [1]"));
  }
}
