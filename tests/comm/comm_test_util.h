// Harnesses for collective tests: run a function on every rank of a group, either as threads
// of this process (HashStore) or as forked processes (TCPStore on loopback, rank 0 hosting
// it), and collect the failures (Catch2 assertions are not thread- or fork-safe, so ranks
// report problems as strings).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tests/test_util.h"
#include "tinyddp/comm/gloo/process_group_gloo.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/tcp_store.h"

namespace tinyddp::testing {

// Collects a rank's failed expectations, with the values involved: the ranks' stand-in for
// Catch2's CHECK, which prints "got X, expected Y" where a bare condition would print nothing.
class Expectations {
 public:
  void expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
  // actual == expected; both are printed (fmt: numbers, strings, vectors, pairs).
  template <typename A, typename B>
  void expect_eq(const A& actual, const B& expected, const std::string& what) {
    if (!(actual == expected)) failures.push_back(fmt::format("{}: got {}, expected {}", what, actual, expected));
  }
  // `text` contains `part`; the whole text is printed when it does not.
  void expect_contains(const std::string& text, const std::string& part, const std::string& what = "message");
  // f() throws, and its message contains `part` (both printed when not).
  void expect_throws(const std::function<void()>& f, const std::string& part);
  // Same shape and every element within atol + rtol * |expected| (0, 0: bitwise equal values);
  // a failure names the worst element, both values and the difference.
  void expect_close(const tensor::Tensor& actual, const tensor::Tensor& expected, const std::string& what,
                    double rtol = 0.0, double atol = 0.0);
  std::vector<std::string> failures;
};

using RankFn = std::function<void(comm::ProcessGroup& pg, Expectations& e)>;

// Runs fn on `size` threads; returns every failure ("rank r: ...") and exception.
std::vector<std::string> run_threads(int size, const RankFn& fn, comm::Millis timeout = comm::Millis(20000));

// Runs fn in `size` forked processes; returns failures reported through each child's exit
// status and output. `before_join(rank)` runs in the child before it joins the group and may
// end the process (to simulate a rank that never arrives).
// `finishers` is how many ranks will get to the end (all by default); rank 0 keeps the store
// up until they have.
std::vector<std::string> run_processes(int size, const RankFn& fn, comm::Millis timeout = comm::Millis(20000),
                                       const std::function<void(int rank)>& before_join = nullptr, int finishers = -1);

// A free TCP port on loopback (bound and released: good enough for tests).
uint16_t free_port();

// Every rank's failures as Catch2 messages, and the test stops if there are any.
inline void require_no_failures(const std::vector<std::string>& failures) {
  for (const auto& f : failures) UNSCOPED_INFO(f);
  REQUIRE(failures.empty());
}

// A shared_ptr to a group the harness owns (DDP and ZeRO take shared_ptrs), deleting nothing.
inline std::shared_ptr<comm::ProcessGroup> borrow(comm::ProcessGroup& pg) {
  return std::shared_ptr<comm::ProcessGroup>(&pg, [](comm::ProcessGroup*) {});
}

// A group that passes every call on to `inner` (its public collectives) and records each
// call: its name, the elements and data of its first tensor, when and on which thread it was
// issued. Tests may interleave events of their own (`note`), to see what came before what.
class RecordingGroup final : public comm::ProcessGroup {
 public:
  struct Call {
    std::string op;  // "allreduce", ..., or a noted event
    int64_t numel = 0;
    const void* data = nullptr;  // the first tensor's data (which bucket an allreduce reduces)
    bool noted = false;          // an event of the test's (note), not a collective
    std::chrono::steady_clock::time_point at;
    std::thread::id thread;
  };
  explicit RecordingGroup(std::shared_ptr<comm::ProcessGroup> inner);
  std::vector<Call> calls() const;
  size_t count(const std::string& op) const;
  void note(const std::string& event);
  void clear();

 protected:
  using Work = comm::Work;
  using ReduceOp = comm::ReduceOp;
  using Tensor = tensor::Tensor;
  std::shared_ptr<Work> allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, comm::Call call) override;
  std::shared_ptr<Work> broadcast_impl(const Tensor& tensor, int root, comm::Call call) override;
  std::shared_ptr<Work> allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                       comm::Call call) override;
  std::shared_ptr<Work> gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                    comm::Call call) override;
  std::shared_ptr<Work> scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                     comm::Call call) override;
  std::shared_ptr<Work> reduce_impl(const Tensor& tensor, int root, ReduceOp op, comm::Call call) override;
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                            comm::Call call) override;
  std::shared_ptr<Work> barrier_impl(comm::Call call) override;
  std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, comm::Call call) override;
  std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, comm::Call call) override;
  std::shared_ptr<ProcessGroup> create_subgroup(int id, int rank, int size) override;

 private:
  void record(std::string op, const tensor::Tensor* first, bool noted = false);
  std::shared_ptr<comm::ProcessGroup> inner_;
  mutable std::mutex mutex_;
  std::vector<Call> calls_;
};

}  // namespace tinyddp::testing
