// ProcessGroupGloo: rendezvous through our Store, and one worker thread executing collectives
// in issue order (the collectives themselves, mapped onto Gloo's API, are in collectives.cc).
// See process_group_gloo.h.
#include "tinyddp/comm/gloo/process_group_gloo.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/gloo/peer_addresses.h"
#include "tinyddp/comm/gloo/small_allreduce.h"
#include "tinyddp/comm/gloo/staging.h"
#include "tinyddp/comm/transport/tcp_ring.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::comm {

using detail::flatten_all;
using detail::reduce_function;
using detail::with_element_type;
using tensor::DType;
using tensor::NoGradGuard;

namespace {

// Gloo's rendezvous reaches our stores through this adapter.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<comm::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<comm::Store> store_;
};

// CPU tensors, and CUDA tensors staged through the host (any layout: staging makes them dense).
constexpr TensorRules kGlooTensors{/*cpu=*/true, /*cuda=*/true, /*contiguous_only=*/false, /*bool_data=*/false,
                                   "the Gloo backend takes CPU and CUDA tensors"};

}  // namespace

namespace {
// A write to a connection whose peer died raises SIGPIPE, whose default action kills the
// process; Gloo reports the failure as an error instead once SIGPIPE is ignored (as every
// Python program, PyTorch's included, has it). A handler the program installed is kept.
void ignore_sigpipe_once() {
  static const bool done = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)done;
}
}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, "gloo", "ProcessGroupGloo", kGlooTensors), store_(std::move(store)),
      options_(std::move(options)) {
  ignore_sigpipe_once();
  TDDP_CHECK(store_ != nullptr, "ProcessGroupGloo: the store is null");
  // Announce this rank first, so that a failed rendezvous can say who never arrived.
  store_->set(fmt::format("tinyddp/joined/{}", rank), std::string("1"));
  const auto started = Clock::now();
  try {
    connect();
  } catch (const std::exception& e) {
    std::rethrow_exception(rendezvous_failure(e, started));
  }
  // The worker stages CUDA tensors: it works on its creator's device from its start
  // (tensor/cuda_runtime/device_guard.h), never binding GPU 0 by default.
  worker_ = std::thread([this, device = tensor::cuda::current_device()] {
    tensor::cuda::adopt_device(device);
    worker_loop();
  });
}

std::shared_ptr<gloo::Context> ProcessGroupGloo::connect_mesh(const char* rendezvous_prefix) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(options_.timeout());
  GlooStore rendezvous(std::make_shared<PrefixStore>(rendezvous_prefix, store_));
  context->connectFullMesh(rendezvous, device_);
  return context;
}

void ProcessGroupGloo::connect() {
  gloo::transport::tcp::attr attr;
  attr.hostname = options_.bind_address();
  device_ = gloo::transport::tcp::CreateDevice(attr);
  context_ = connect_mesh("tinyddp/gloo");
  if (size_ == 1) return;
  // A second mesh for small allreduces of three or more ranks, with synchronous connections:
  // see small_allreduce.h (two ranks send theirs through pair_allreduce instead).
  std::shared_ptr<gloo::Context> small;
  if (size_ > 2) {
    small = connect_mesh("tinyddp/gloo-small");
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) small->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
    }
    small_allreduce_ = std::make_unique<detail::SmallAllreduce>(small);
  }
  // Larger allreduces: a ring of plain TCP connections (see tcp_ring.h), listening on
  // the address this rank's Gloo connections use.
  const auto& pair_address =
      dynamic_cast<const gloo::transport::tcp::Address&>(context_->getPair((rank_ + 1) % size_)->address());
  tcp_ring_ = std::make_unique<detail::TcpRing>(*store_, "tinyddp/ring", rank_, size_, pair_address.getSockaddr(),
                                                options_.timeout());
  std::vector<detail::PeerAddresses::Mesh> meshes = {{"main", "tinyddp/gloo", context_.get()}};
  if (small) meshes.push_back({"small", "tinyddp/gloo-small", small.get()});
  peers_ = std::make_unique<detail::PeerAddresses>(*store_, rank_, size_, meshes);
}

bool ProcessGroupGloo::timed_out(const std::exception& e, Clock::time_point started) const {
  // Our own waits (the store, the ring, the small allreduce) throw TimeoutError. Gloo has one
  // error type for every transport failure (IoException): it timed out when it failed no
  // sooner than its timeout, which every Gloo wait here is given.
  if (dynamic_cast<const TimeoutError*>(&e) != nullptr) return true;
  return dynamic_cast<const gloo::IoException*>(&e) != nullptr && Clock::now() - started >= options_.timeout();
}

std::exception_ptr ProcessGroupGloo::rendezvous_failure(const std::exception& e, Clock::time_point started) const {
  std::vector<int> missing;
  std::string unreachable;  // why the store could not say, if it could not
  for (int r = 0; r < size_ && unreachable.empty(); ++r) {
    try {
      if (!store_->check({fmt::format("tinyddp/joined/{}", r)})) missing.push_back(r);
    } catch (const std::exception& error) {
      unreachable = error.what();
    }
  }
  const std::string who = !unreachable.empty()
                              ? fmt::format("the store could not say which ranks joined: {}", unreachable)
                          : missing.empty() ? "every rank joined the store"
                                            : fmt::format("ranks [{}] never joined", fmt::join(missing, ", "));
  const std::string message =
      fmt::format("ProcessGroupGloo: rank {} of {} could not connect to the group within {} ms: {} ({})", rank_, size_,
                  options_.timeout().count(), who, e.what());
  if (!missing.empty() || timed_out(e, started)) return std::make_exception_ptr(TimeoutError(message));
  return std::make_exception_ptr(Error(message));
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  for (std::thread& t : p2p_threads_) t.join();
}

void ProcessGroupGloo::worker_loop() {
  NoGradGuard no_grad;  // collectives write into tensors (parameters too) without recording
  uint32_t tag = 0;
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty() || !chained_.empty(); });
      std::deque<Item>& next = chained_.empty() ? queue_ : chained_;
      if (next.empty()) return;  // stopping, and everything queued has run
      item = std::move(next.front());
      next.pop_front();
    }
    detail::set_running_marks(&item.marks);
    const uint32_t seq = tag++;
    const auto started = Clock::now();
    try {
      if (item.hook && !item.carries_hook) item.hook->run();
      item.run(seq);
      item.work->finish();
    } catch (const CallRefused&) {
      item.work->finish(std::current_exception());
    } catch (const std::exception& e) {
      item.work->finish(failure(*item.work, e, started));
    }
    detail::set_running_marks(nullptr);
  }
}

namespace {
// The two-rank message: the hook's record (zeros without a hook), then how many bytes of data
// follow, then the data.
constexpr size_t kRecordBytes = sizeof(CallHook::Record);
constexpr size_t kPrefixBytes = kRecordBytes + sizeof(int64_t);

void write_prefix(std::vector<char>& message, const CallHook::Record& record, size_t data_bytes) {
  message.resize(kPrefixBytes + data_bytes);
  const auto bytes = static_cast<int64_t>(data_bytes);
  std::memcpy(message.data(), record.data(), kRecordBytes);
  std::memcpy(message.data() + kRecordBytes, &bytes, sizeof(bytes));
}

size_t data_bytes_after(const char* prefix) {
  int64_t bytes = 0;
  std::memcpy(&bytes, prefix + kRecordBytes, sizeof(bytes));
  TDDP_CHECK(bytes >= 0 && bytes <= ProcessGroupGloo::kPairMaxBytes,
             "the peer's message announces {} bytes of data: not a tinyddp peer, or a corrupted stream", bytes);
  return static_cast<size_t>(bytes);
}

CallHook::Record record_of(const std::vector<char>& message) {
  CallHook::Record record{};
  std::memcpy(record.data(), message.data(), kRecordBytes);
  return record;
}
}  // namespace

RecordExchange ProcessGroupGloo::own_record_exchange() {
  // More than two ranks sum the records on the small mesh, which takes up to a thousand ranks'.
  const auto words = static_cast<int64_t>(size_ * std::tuple_size_v<CallHook::Record>);
  const bool fits = size_ == 2 || detail::SmallAllreduce::takes(tensor::kInt64, words);
  if (size_ == 1 || !fits) return nullptr;
  return [this](std::vector<CallHook::Record>& records) { return exchange_records(records); };
}

DataFate ProcessGroupGloo::exchange_records(std::vector<CallHook::Record>& records) {
  if (size_ == 2) {
    write_prefix(pair_out_, records[static_cast<size_t>(rank_)], 0);
    const size_t received =
        tcp_ring_->swap(pair_out_, kPrefixBytes, kPairMaxBytes, data_bytes_after, pair_in_, options_.timeout());
    records[static_cast<size_t>(1 - rank_)] = record_of(pair_in_);
    // The peer may have sent a small allreduce's data with its record (and now drops ours).
    return received > kPrefixBytes ? DataFate::kDropped : DataFate::kNotSent;
  }
  exchange_records_by_sum(records, rank_, records_,
                          [this](const Tensor& t) { small_allreduce_->run({t}, ReduceOp::kSum, t.numel()); });
  return DataFate::kNotSent;
}

void ProcessGroupGloo::pair_allreduce(const std::vector<Tensor>& tensors, ReduceOp op, int64_t total, CallHook* hook) {
  // One contiguous tensor is reduced in place; several (or a strided one) through a flat copy.
  const bool in_place = tensors.size() == 1 && tensors[0].is_contiguous();
  const Tensor flat = in_place ? tensors[0].view({total}) : flatten_all(tensors);
  std::vector<CallHook::Record> records(2);
  const auto mine = static_cast<size_t>(rank_), theirs = static_cast<size_t>(1 - rank_);
  if (hook != nullptr) records[mine] = hook->record();
  write_prefix(pair_out_, records[mine], flat.nbytes());
  std::memcpy(pair_out_.data() + kPrefixBytes, flat.raw_data_ptr(), flat.nbytes());
  const size_t received_bytes =
      tcp_ring_->swap(pair_out_, kPrefixBytes, kPairMaxBytes, data_bytes_after, pair_in_, options_.timeout());
  records[theirs] = record_of(pair_in_);
  if (hook != nullptr) hook->settle(records, DataFate::kDropped);  // may refuse before any tensor changed
  // Without a hook that refuses it a size mismatch is still refused here rather than read
  // past the data.
  TDDP_CHECK(received_bytes - kPrefixBytes == flat.nbytes(),
             "rank {} sent {} bytes where this rank sent {}: the ranks allreduce different sizes (the desync check, "
             "off here, would name both calls)",
             1 - rank_, received_bytes - kPrefixBytes, flat.nbytes());
  // Rank 0's values come first on both ranks, so both hold the same bits (whatever the op
  // does with NaNs).
  const char* received = pair_in_.data() + kPrefixBytes;
  const void* first = rank_ == 0 ? flat.raw_data_ptr() : received;
  const void* second = rank_ == 0 ? received : flat.raw_data_ptr();
  with_element_type(flat.dtype(), "allreduce", [&](auto type_tag) {
    using T = decltype(type_tag);
    reduce_function<T>(op)(flat.raw_data_ptr(), first, second, static_cast<size_t>(total));
  });
  if (op == ReduceOp::kAvg) flat.div_(2.0);
  if (!in_place) unflatten_into(flat, tensors);
}

std::exception_ptr ProcessGroupGloo::failure(const Work& work, const std::exception& e,
                                             Clock::time_point started) const {
  const std::string what = e.what();
  std::string message = peers_ ? peers_->name_ranks(what) : what;
  const bool timeout = timed_out(e, started);
  if (message == what && timeout && size() > 1) {
    // Gloo's own algorithms time out without saying on whom ("Timed out waiting 1000ms for
    // recv operation"): name the peers this collective waits for, all the others.
    std::vector<int> others;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) others.push_back(r);
    }
    message +=
        others.size() == 1
            ? fmt::format(" (waited for rank {}, which did not take part in time)", others.front())
            : fmt::format(" (waited for ranks {}: one or more did not take part in time)", fmt::join(others, ", "));
  }
  const std::string full = fmt::format("{} failed: {}", work.description(), message);
  return timeout ? std::make_exception_ptr(TimeoutError(full)) : std::make_exception_ptr(Error(full));
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(Call call, std::function<void(uint32_t)> run,
                                                const std::vector<Tensor>& tensors, bool carries_hook) {
  auto work = std::make_shared<Work>(std::move(call.what));
  std::vector<tensor::cuda::StreamMark> marks;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    const int device = t.device().index;
    const bool marked = std::any_of(marks.begin(), marks.end(), [&](const auto& m) { return m.device() == device; });
    if (!marked) marks.push_back(tensor::cuda::StreamMark::record(device));
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    const bool chained = std::this_thread::get_id() == worker_.get_id();
    // (A chain still running when shutdown began may go on: the worker drains it.)
    TDDP_CHECK(!stopping_ || chained, "ProcessGroupGloo: {} issued while the group is shutting down",
               work->description());
    (chained ? chained_ : queue_)
        .push_back(Item{work, std::move(call.hook), carries_hook, std::move(run), std::move(marks)});
  }
  queue_cv_.notify_one();
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::start_p2p(std::string description, std::function<void()> run) {
  auto work = std::make_shared<Work>(std::move(description));
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  p2p_threads_.emplace_back([this, work, run = std::move(run)] {
    NoGradGuard no_grad;
    const auto started = Clock::now();
    try {
      run();
      work->finish();
    } catch (const std::exception& e) {
      work->finish(failure(*work, e, started));
    }
  });
  return work;
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::create_subgroup(int id, int rank, int size) {
  return std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), store_),
                                            rank, size, options_);
}

}  // namespace tinyddp::comm
