// Harnesses for collective tests: see comm_test_util.h.
#include "tests/comm/comm_test_util.h"

#include <algorithm>

#include "tinyddp/launcher/spawn.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

namespace tinyddp::testing {

void Expectations::expect_contains(const std::string& text, const std::string& part, const std::string& what) {
  if (text.find(part) == std::string::npos)
    failures.push_back(fmt::format("{} does not contain \"{}\": {}", what, part, text));
}

void Expectations::expect_throws(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const std::exception& ex) {
    expect_contains(ex.what(), part, "the error");
    return;
  }
  failures.push_back(fmt::format("expected an error containing \"{}\", but nothing was thrown", part));
}

void Expectations::expect_close(const tensor::Tensor& actual, const tensor::Tensor& expected, const std::string& what,
                                double rtol, double atol) {
  if (!actual.defined() || !expected.defined()) {
    failures.push_back(
        fmt::format("{}: {} tensor is undefined", what, actual.defined() ? "the expected" : "the actual"));
    return;
  }
  if (actual.sizes() != expected.sizes() || actual.dtype() != expected.dtype()) {
    failures.push_back(fmt::format("{}: {} {}, expected {} {}", what, tensor::dtype_name(actual.dtype()),
                                   actual.sizes(), tensor::dtype_name(expected.dtype()), expected.sizes()));
    return;
  }
  const std::vector<double> a = actual.to(tensor::kCPU).to(tensor::kFloat64).contiguous().to_vector<double>();
  const std::vector<double> b = expected.to(tensor::kCPU).to(tensor::kFloat64).contiguous().to_vector<double>();
  size_t worst = 0;
  double worst_excess = 0.0;  // how far past its tolerance the worst element is
  for (size_t i = 0; i < a.size(); ++i) {
    // A NaN on either side fails, as in tensor::allclose and tensor::equal.
    const double excess =
        std::isnan(a[i]) || std::isnan(b[i]) ? INFINITY : std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
    if (excess > worst_excess) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst_excess > 0.0) {
    failures.push_back(fmt::format("{}: element {} of {} is {}, expected {} (difference {:.3g}; rtol {}, atol {})",
                                   what, worst, a.size(), a[worst], b[worst], a[worst] - b[worst], rtol, atol));
  }
}

std::vector<std::string> run_threads(int size, const RankFn& fn, comm::Millis timeout) {
  auto store = std::make_shared<comm::HashStore>();
  store->set_timeout(timeout);
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      Expectations e;
      try {
        comm::ProcessGroupOptions options;
        options.timeout(timeout);
        const auto pg = comm::new_process_group("gloo", store, rank, size, options);
        fn(*pg, e);
      } catch (const std::exception& ex) {
        e.failures.push_back(std::string("exception: ") + ex.what());
      }
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& f : e.failures) failures.push_back("rank " + std::to_string(rank) + ": " + f);
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

uint16_t free_port() { return static_cast<uint16_t>(launcher::free_loopback_port()); }

namespace {
// A forked rank of run_processes: joins the group, runs fn, writes its failures to `report_fd`
// and exits (0: none, 1: some, 2: the report could not be written).
[[noreturn]] void run_child_rank(int rank, int size, uint16_t port, const RankFn& fn, comm::Millis timeout,
                                 const std::function<void(int rank)>& before_join, int finishers, int report_fd) {
  std::string report;
  int status = 0;
  std::shared_ptr<comm::TCPStore> store;
  try {
    if (before_join) before_join(rank);
    comm::TCPStoreOptions store_options;
    store_options.port(port);
    store_options.is_server(rank == 0);
    store_options.timeout(timeout);
    store = std::make_shared<comm::TCPStore>(store_options);
    comm::ProcessGroupOptions options;
    options.timeout(timeout);
    {
      const auto pg = comm::new_process_group("gloo", store, rank, size, options);
      Expectations e;
      fn(*pg, e);
      for (const auto& f : e.failures) report += f + "\n";
    }
  } catch (const std::exception& ex) {
    report += std::string("exception: ") + ex.what() + "\n";
  }
  // Rank 0 hosts the store: keep it up until every rank is done with it, also when this
  // rank failed (the others may still be asking the store why). Bounded: a rank that died
  // never reports.
  try {
    if (store) {
      store->add("finished", 1);
      if (rank == 0) {
        const auto until = std::chrono::steady_clock::now() + timeout;
        while (store->add("finished", 0) < finishers && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    }
  } catch (const std::exception&) {
    // The store's host is gone: nothing left to wait for.
  }
  status = report.empty() ? 0 : 1;
  if (!report.empty() && ::write(report_fd, report.data(), report.size()) < 0) status = 2;
  ::close(report_fd);
  std::fflush(nullptr);
  ::_exit(status);
}
}  // namespace

std::vector<std::string> run_processes(int size, const RankFn& fn, comm::Millis timeout,
                                       const std::function<void(int rank)>& before_join, int finishers) {
  if (finishers < 0) finishers = size;
  const uint16_t port = free_port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < size; ++rank) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the child: one rank
      ::close(fds[0]);
      run_child_rank(rank, size, port, fn, timeout, before_join, finishers, fds[1]);
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<std::string> failures;
  const auto deadline = std::chrono::steady_clock::now() + timeout + comm::Millis(30000);
  for (int rank = 0; rank < size; ++rank) {
    std::string output;
    char buffer[4096];
    while (true) {
      pollfd p{pipes[rank], POLLIN, 0};
      const auto left = std::chrono::duration_cast<comm::Millis>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
        failures.push_back("rank " + std::to_string(rank) + ": did not finish in time (killed)");
        for (pid_t pid : pids) ::kill(pid, SIGKILL);
        break;
      }
      const ssize_t n = ::read(pipes[rank], buffer, sizeof(buffer));
      if (n <= 0) break;
      output.append(buffer, static_cast<size_t>(n));
    }
    ::close(pipes[rank]);
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    if (!output.empty()) failures.push_back("rank " + std::to_string(rank) + ": " + output);
    if (!WIFEXITED(status)) {
      failures.push_back("rank " + std::to_string(rank) + ": ended by a signal");
    } else if (WEXITSTATUS(status) != 0 && output.empty() && !before_join) {
      failures.push_back("rank " + std::to_string(rank) + ": exit status " + std::to_string(WEXITSTATUS(status)));
    }
  }
  return failures;
}

// ---- RecordingGroup ------------------------------------------------------------------------

RecordingGroup::RecordingGroup(std::shared_ptr<comm::ProcessGroup> inner)
    : ProcessGroup(inner->rank(), inner->size(), inner->backend(), "RecordingGroup", inner->tensor_rules()),
      inner_(std::move(inner)) {}

std::vector<RecordingGroup::Call> RecordingGroup::calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return calls_;
}

size_t RecordingGroup::count(const std::string& op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(std::count_if(calls_.begin(), calls_.end(), [&](const Call& c) { return c.op == op; }));
}

void RecordingGroup::note(const std::string& event) { record(event, nullptr, /*noted=*/true); }

void RecordingGroup::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  calls_.clear();
}

void RecordingGroup::record(std::string op, const tensor::Tensor* first, bool noted) {
  std::lock_guard<std::mutex> lock(mutex_);
  calls_.push_back(Call{std::move(op), first != nullptr ? first->numel() : 0,
                        first != nullptr ? first->raw_data_ptr() : nullptr, noted, std::chrono::steady_clock::now(),
                        std::this_thread::get_id()});
}

using comm::ReduceOp;
using comm::Work;
using tensor::Tensor;

std::shared_ptr<Work> RecordingGroup::allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, comm::Call) {
  record("allreduce", &tensors.front());
  return inner_->allreduce(tensors, op);
}
std::shared_ptr<Work> RecordingGroup::broadcast_impl(const Tensor& tensor, int root, comm::Call) {
  record("broadcast", &tensor);
  return inner_->broadcast(tensor, root);
}
std::shared_ptr<Work> RecordingGroup::allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                     comm::Call) {
  record("allgather", &input);
  return inner_->allgather(outputs, input);
}
std::shared_ptr<Work> RecordingGroup::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                                  comm::Call) {
  record("gather", &input);
  return inner_->gather(outputs, input, root);
}
std::shared_ptr<Work> RecordingGroup::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                                   comm::Call) {
  record("scatter", &output);
  return inner_->scatter(output, inputs, root);
}
std::shared_ptr<Work> RecordingGroup::reduce_impl(const Tensor& tensor, int root, ReduceOp op, comm::Call) {
  record("reduce", &tensor);
  return inner_->reduce(tensor, root, op);
}
std::shared_ptr<Work> RecordingGroup::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                          ReduceOp op, comm::Call) {
  record("reduce_scatter", &output);
  return inner_->reduce_scatter(output, inputs, op);
}
std::shared_ptr<Work> RecordingGroup::barrier_impl(comm::Call) {
  record("barrier", nullptr);
  return inner_->barrier();
}
std::shared_ptr<Work> RecordingGroup::send_impl(const Tensor& tensor, int dst, int tag, comm::Call) {
  record("send", &tensor);
  return inner_->send(tensor, dst, tag);
}
std::shared_ptr<Work> RecordingGroup::recv_impl(const Tensor& tensor, int src, int tag, comm::Call) {
  record("recv", &tensor);
  return inner_->recv(tensor, src, tag);
}
std::shared_ptr<comm::ProcessGroup> RecordingGroup::create_subgroup(int, int, int) {
  throw Error("RecordingGroup: new_group is not supported");
}

}  // namespace tinyddp::testing
