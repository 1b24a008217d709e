// NcclCommunicator: see communicator.h; the protocol is described in process_group_nccl.h.
#include "tinyddp/comm/nccl/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>

#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"

namespace tinyddp::comm::detail {

using Clock = std::chrono::steady_clock;
using tensor::cuda::DeviceGuard;

std::string nccl_message(ncclResult_t result, const char* call, ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return fmt::format("NCCL call {} failed: {} ({}){}{}", call, ncclGetErrorString(result), static_cast<int>(result),
                     detail != nullptr && detail[0] != '\0' ? ": " : "", detail != nullptr ? detail : "");
}

// The checks in ProcessGroup have refused what NCCL cannot take (bool reductions, avg of integers).
ncclDataType_t nccl_type(tensor::DType dtype) {
  switch (dtype) {
    case tensor::kFloat32: return ncclFloat32;
    case tensor::kFloat64: return ncclFloat64;
    case tensor::kFloat16: return ncclFloat16;
    case tensor::kBFloat16: return ncclBfloat16;
    case tensor::kInt64: return ncclInt64;
    case tensor::kBool: return ncclUint8;
    case tensor::kInt32: return ncclInt32;
    case tensor::kUInt8: return ncclUint8;
  }
  throw Error(fmt::format("ProcessGroupNccl: unsupported dtype {}", tensor::dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  throw Error("ProcessGroupNccl: unknown reduce op");
}

// The Work of one NCCL collective: finished by the watchdog when its end event has passed.
class NcclWork final : public Work {
 public:
  // `captured`: queued during a CudaGraph's capture (see wait()).
  NcclWork(std::string description, int device, cudaEvent_t end, std::vector<Tensor> tensors, bool host_wait,
           bool captured = false)
      : Work(std::move(description)), device_(device), end_(end), tensors_(std::move(tensors)), host_wait_(host_wait),
        captured_(captured), started_(Clock::now()) {}
  ~NcclWork() override {
    try {
      DeviceGuard guard(device_);  // whichever thread drops it: never a context on another GPU
      cudaEventDestroy(end_);
    } catch (...) {
    }
  }

  void wait(std::optional<Millis> timeout) override {
    if (captured_) {
      // Its end is a node of the graph: the compute stream waits for it inside the capture;
      // the host cannot wait for it, and after the capture only a replay runs it.
      TDDP_CHECK(!timeout && tensor::cuda::is_capturing(device_),
                 "{}: this collective was captured into a CUDA graph: wait() for it (untimed) inside the capture, "
                 "and read its results after a replay",
                 description());
    } else if (timeout || host_wait_) {
      Work::wait(timeout);
      return;
    }
    if (std::exception_ptr error = exception()) std::rethrow_exception(error);
    // The compute stream waits for the collective; the host goes on.
    DeviceGuard guard(device_);
    TDDP_CUDA_CHECK(cudaStreamWaitEvent(tensor::cuda::compute_stream(device_), end_, 0));
  }

  // Stream order, as PyTorch's CUDA futures: once the compute stream waits for the
  // collective, its result is there for every kernel queued after, so the callback runs now,
  // on this thread (and a chain of callbacks issues its collectives in the same order on every
  // rank). barrier() (host_wait_) runs it when the host saw it finish.
  void on_finished(std::function<void(const Work&)> callback) override {
    if (host_wait_) {
      Work::on_finished(std::move(callback));
      return;
    }
    try {
      wait(std::nullopt);  // a failure is in exception() for the callback to see
    } catch (const std::exception&) {
    }
    callback(*this);
  }

  cudaEvent_t end() const { return end_; }
  Clock::time_point started() const { return started_; }
  void release_tensors() { tensors_.clear(); }

 private:
  int device_;
  cudaEvent_t end_;
  std::vector<Tensor> tensors_;  // kept alive until the collective has finished
  bool host_wait_;
  bool captured_;
  Clock::time_point started_;
};

NcclCommunicator::NcclCommunicator(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : alive_(std::make_shared<Alive>()), store_(std::move(store)), rank_(rank), size_(size),
      options_(std::move(options)) {
  alive_->comm = this;
  // The watchdog queries events: it works on the creating thread's device from its start
  // (tensor/cuda_runtime/device_guard.h), and on the communicator's once that is bound.
  watchdog_ = std::thread([this, device = tensor::cuda::current_device()] {
    tensor::cuda::adopt_device(device);
    watchdog_loop();
  });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(alive_->mutex);  // a replay in progress finishes first
    alive_->comm = nullptr;                           // later ones are refused
  }
  // Pending collectives get until the timeout to finish (the watchdog aborts them after).
  {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] { return pending_.empty(); });
    stopping_ = true;
  }
  wake_cv_.notify_all();
  watchdog_.join();
  std::lock_guard<std::mutex> comm_lock(comm_mutex_);
  abort_comm();  // frees the communicator at once, without a round with the peers
  // The stream goes back to the process's pool, not to CUDA: blocks recorded on it may be
  // freed after this group is gone, and the allocator then records an event on it.
  if (stream_ != nullptr) tensor::cuda::release_stream(device_, stream_);
}

int NcclCommunicator::bound_device() {
  std::lock_guard<std::mutex> lock(mutex_);
  return device_;
}

void NcclCommunicator::check_device(const Tensor& t, const char* op, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  TDDP_CHECK(device_ < 0 || device_ == t.device().index,
             "ProcessGroupNccl {}: {} is on {}, but rank {}'s communicator is on cuda:{}; use one device per rank", op,
             what, t.device().str(), rank_, device_);
}

std::shared_ptr<Work> NcclCommunicator::launch(std::string description, int device, std::vector<Tensor> tensors,
                                               bool host_wait,
                                               const std::function<void(ncclComm_t, cudaStream_t)>& issue,
                                               const StreamWork& before, const StreamWork& after) {
  std::unique_lock<std::mutex> comm_lock(comm_mutex_);  // no abort while NCCL calls are made
  throw_if_broken();
  const bool captured = tensor::cuda::is_capturing(device);
  if (captured) {
    if (host_wait) tensor::cuda::check_not_capturing(device, "ProcessGroupNccl::barrier");
    TDDP_CHECK(comm_ != nullptr,
               "{}: the group's first collective cannot be captured into a CUDA graph (it creates the NCCL "
               "communicator, which allocates and synchronises): run the step eagerly once before capturing",
               description);
  }
  ensure_comm(device);
  DeviceGuard guard(device);
  tensor::cuda::stream_wait(stream_, tensor::cuda::compute_stream(device), device);
  cudaEvent_t end = nullptr;
  if (before) before(stream_);
  TDDP_NCCL_CHECK(ncclGroupStart(), comm_);
  try {
    issue(comm_, stream_);
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  TDDP_NCCL_CHECK(ncclGroupEnd(), comm_);
  wait_until_queued(description);  // only then is the NCCL kernel on the stream
  if (after) after(stream_);
  TDDP_CUDA_CHECK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
  TDDP_CUDA_CHECK(cudaEventRecord(end, stream_));
  for (const Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) tensor::cuda::record_stream(t.raw_data_ptr(), device, stream_);
  }
  if (captured) note_captured(device, description);
  auto work = std::make_shared<NcclWork>(std::move(description), device, end, std::move(tensors), host_wait, captured);
  if (after_queued_for_testing) after_queued_for_testing();
  if (captured) return work;  // a replay runs it: the watchdog watches the replay
  // Registered before comm_mutex_ is released: abort() and the watchdog's abort take it, so
  // they see this work and fail it. (Registered after, an abort in between would kill the
  // kernel, its end event would pass, and wait() would report success.)
  pend(work);
  comm_lock.unlock();
  wake_cv_.notify_all();
  return work;
}

void NcclCommunicator::pend(const std::shared_ptr<NcclWork>& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) {
    work->finish(broken_);
    work->release_tensors();
  } else {
    pending_.push_back(work);
  }
}

void NcclCommunicator::watch(std::string description, int device, cudaEvent_t end) {
  pend(std::make_shared<NcclWork>(std::move(description), device, end, std::vector<Tensor>{}, false));
}

void NcclCommunicator::abort(const std::string& reason) {
  fail(reason, false);
  std::lock_guard<std::mutex> comm_lock(comm_mutex_);
  abort_comm();
}

void NcclCommunicator::throw_if_broken() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) std::rethrow_exception(broken_);
}

void NcclCommunicator::join() {
  std::lock_guard<std::mutex> lock(join_mutex_);
  if (!base_.empty()) return;
  // Groups made on one store get numbered keys (every rank makes them in the same order);
  // a retry after a failed join takes the same number.
  if (generation_ == 0) generation_ = store_->add("tinyddp/nccl/groups/rank" + std::to_string(rank_), 1);
  const std::string base = fmt::format("tinyddp/nccl/{}/", generation_);
  try {
    store_barrier(*store_, base + "rank", rank_, size_, options_.timeout());
  } catch (const PartiesMissing& e) {
    throw TimeoutError(
        fmt::format("ProcessGroupNccl: rank {} of {} gave up creating the communicator after {} ms: ranks [{}] "
                    "never joined ({})",
                    rank_, size_, options_.timeout().count(), fmt::join(e.missing(), ", "), e.what()));
  }
  base_ = base;
}

void NcclCommunicator::ensure_comm(int device) {
  if (comm_ != nullptr || aborted_) return;
  DeviceGuard guard(device);
  join();
  const std::string base = [&] {
    std::lock_guard<std::mutex> lock(join_mutex_);
    return base_;
  }();
  ncclUniqueId id{};
  if (rank_ == 0) {
    TDDP_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    store_->set(base + "unique_id",
                Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
  } else {
    store_->wait({base + "unique_id"}, options_.timeout());
    const Bytes bytes = store_->get(base + "unique_id");
    TDDP_CHECK(bytes.size() == sizeof(id), "ProcessGroupNccl: the unique id in the store has {} bytes, expected {}",
               bytes.size(), sizeof(id));
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<uint8_t*>(&id));
  }
  const cudaStream_t stream = tensor::cuda::acquire_stream(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  TDDP_NCCL_CHECK(ncclCommInitRankConfig(&comm, size_, id, rank_, &config), comm);
  const auto deadline = Clock::now() + options_.timeout();
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    TDDP_NCCL_CHECK(ncclCommGetAsyncError(comm, &state), comm);
    if (state == ncclInProgress && Clock::now() > deadline) {
      ncclCommAbort(comm);
      tensor::cuda::release_stream(device, stream);
      throw TimeoutError(
          fmt::format("ProcessGroupNccl: rank {} of {}: creating the NCCL communicator on cuda:{} did "
                      "not finish within {} ms",
                      rank_, size_, device, options_.timeout().count()));
    }
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    const std::string message = nccl_message(state, "ncclCommInitRankConfig", comm);
    ncclCommAbort(comm);
    tensor::cuda::release_stream(device, stream);
    throw Error(fmt::format("ProcessGroupNccl: rank {} of {}: {}", rank_, size_, message));
  }
  comm_ = comm;
  stream_ = stream;
  std::lock_guard<std::mutex> lock(mutex_);
  device_ = device;
}

void NcclCommunicator::wait_until_queued(const std::string& description) {
  const auto deadline = Clock::now() + options_.timeout();
  ncclResult_t state = ncclInProgress;
  for (int polls = 0;;) {
    TDDP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      const std::string message = fmt::format("{} failed: {}", description, nccl_message(state, "ncclGroupEnd", comm_));
      fail(message, false);
      abort_comm();
      throw Error(message);
    }
    if (Clock::now() > deadline) {
      const std::string message =
          fmt::format("{} could not be queued within {} ms", description, options_.timeout().count());
      fail(message, true);
      abort_comm();
      throw TimeoutError(message);
    }
    // Usually done at the first look; a communicator still connecting gets a yield, then
    // sleeps of 20 us (this runs holding comm_mutex_, which only abort() waits for).
    if (++polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

void NcclCommunicator::fail(const std::string& reason, bool timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_locked(reason, timeout);
}

void NcclCommunicator::fail_locked(const std::string& reason, bool timeout) {
  if (!broken_) {
    broken_ = timeout ? std::make_exception_ptr(TimeoutError(reason)) : std::make_exception_ptr(Error(reason));
  }
  for (auto& work : pending_) {
    work->finish(broken_);
    work->release_tensors();
  }
  pending_.clear();
  idle_cv_.notify_all();
}

void NcclCommunicator::abort_comm() {
  if (comm_ == nullptr || aborted_) return;
  DeviceGuard guard(device_);
  ncclCommAbort(comm_);
  aborted_ = true;
  comm_ = nullptr;
}

void NcclCommunicator::fail_and_abort(std::unique_lock<std::mutex>& lock, const std::string& reason, bool timeout) {
  fail_locked(reason, timeout);
  lock.unlock();
  {
    std::lock_guard<std::mutex> comm_lock(comm_mutex_);
    abort_comm();
  }
  lock.lock();
}

void NcclCommunicator::watchdog_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_cv_.wait_for(lock, std::chrono::milliseconds(pending_.empty() ? 100 : 1));
    if (pending_.empty()) continue;
    // NCCL's asynchronous errors (a peer's connection lost, ...), when no launch is using
    // the communicator right now.
    std::unique_lock<std::mutex> comm_lock(comm_mutex_, std::try_to_lock);
    if (comm_lock.owns_lock() && comm_ != nullptr) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
        const std::string reason = fmt::format("{} failed: {}", pending_.front()->description(),
                                               nccl_message(state, "ncclCommGetAsyncError", comm_));
        fail_locked(reason, false);
        abort_comm();
        continue;
      }
    }
    if (comm_lock.owns_lock()) comm_lock.unlock();
    if (device_ >= 0) tensor::cuda::set_device(device_);  // once: a no-op when current
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      const cudaError_t status = cudaEventQuery((*it)->end());
      if (status == cudaSuccess) {
        (*it)->finish();
        (*it)->release_tensors();
        it = pending_.erase(it);
        continue;
      }
      if (status != cudaErrorNotReady) {
        fail_and_abort(lock,
                       fmt::format("{} failed: CUDA error {} ({})", (*it)->description(), cudaGetErrorString(status),
                                   cudaGetErrorName(status)),
                       false);
        break;
      }
      if (now - (*it)->started() > options_.timeout()) {
        fail_and_abort(lock,
                       fmt::format("ProcessGroupNccl: {} did not finish within {} ms; the communicator was aborted "
                                   "(did a rank exit, or skip this collective?)",
                                   (*it)->description(), options_.timeout().count()),
                       true);
        break;
      }
      ++it;
    }
    if (pending_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace tinyddp::comm::detail
