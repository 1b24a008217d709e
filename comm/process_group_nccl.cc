// ProcessGroupNccl under --config=cuda: see process_group_nccl.h for the protocol.
#include "comm/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <thread>

#include "tensor/cuda.h"
#include "tensor/cuda/runtime.h"
#include "tensor/factory.h"

namespace tinyddp::comm {

namespace {

using Clock = std::chrono::steady_clock;
using tensor::cuda::DeviceGuard;

// An NCCL result as an error message: the call, NCCL's description and, when the
// communicator has one, its last detailed error.
std::string nccl_message(ncclResult_t result, const char* call, ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return fmt::format("NCCL call {} failed: {} ({}){}{}", call, ncclGetErrorString(result), static_cast<int>(result),
                     detail != nullptr && detail[0] != '\0' ? ": " : "", detail != nullptr ? detail : "");
}

#define TDDP_NCCL_CHECK(call, comm)                                                                             \
  do {                                                                                                          \
    const ncclResult_t tddp_result_ = (call);                                                                   \
    if (tddp_result_ != ncclSuccess && tddp_result_ != ncclInProgress) throw Error(nccl_message(tddp_result_, #call, comm)); \
  } while (false)

ncclDataType_t nccl_type(tensor::DType dtype, bool reduction, const char* op) {
  switch (dtype) {
    case tensor::kFloat32: return ncclFloat32;
    case tensor::kFloat64: return ncclFloat64;
    case tensor::kFloat16: return ncclFloat16;
    case tensor::kBFloat16: return ncclBfloat16;
    case tensor::kInt64: return ncclInt64;
    case tensor::kBool:
      TDDP_CHECK(!reduction, "ProcessGroupNccl {}: cannot reduce bool tensors (convert with .to(int64))", op);
      return ncclUint8;
  }
  throw Error(fmt::format("ProcessGroupNccl {}: unsupported dtype {}", op, tensor::dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op, tensor::DType dtype, const char* name) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg:
      TDDP_CHECK(tensor::is_floating_point(dtype), "ProcessGroupNccl {}: avg needs floating-point tensors, got {}", name,
                 tensor::dtype_name(dtype));
      return ncclAvg;
  }
  throw Error(fmt::format("ProcessGroupNccl {}: unknown reduce op", name));
}

// The Work of one NCCL collective: finished by the watchdog when its end event has passed.
class NcclWork final : public Work {
 public:
  NcclWork(std::string description, int device, cudaEvent_t end, std::vector<Tensor> tensors, bool host_wait)
      : Work(std::move(description)), device_(device), end_(end), tensors_(std::move(tensors)), host_wait_(host_wait),
        started_(Clock::now()) {}
  ~NcclWork() override {
    try {
      DeviceGuard guard(device_);  // whichever thread drops it: never a context on another GPU
      cudaEventDestroy(end_);
    } catch (...) {
    }
  }

  void wait(std::optional<Millis> timeout) override {
    if (timeout || host_wait_) {
      Work::wait(timeout);
      return;
    }
    if (std::exception_ptr error = exception()) std::rethrow_exception(error);
    // The compute stream waits for the collective; the host goes on.
    DeviceGuard guard(device_);
    TDDP_CUDA_CHECK(cudaStreamWaitEvent(tensor::cuda::compute_stream(device_), end_, 0));
  }

  cudaEvent_t end() const { return end_; }
  Clock::time_point started() const { return started_; }
  void release_tensors() { tensors_.clear(); }

 private:
  int device_;
  cudaEvent_t end_;
  std::vector<Tensor> tensors_;  // kept alive until the collective has finished
  bool host_wait_;
  Clock::time_point started_;
};

}  // namespace

class ProcessGroupNccl::Impl {
 public:
  Impl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
      : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
    // The watchdog queries events: it works on the creating thread's device from its start
    // (tensor/cuda/device_guard.h), and on the communicator's once that is bound.
    watchdog_ = std::thread([this, device = tensor::cuda::current_device()] {
      tensor::cuda::adopt_device(device);
      watchdog_loop();
    });
  }

  ~Impl() {
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

  // The device the communicator is on, or -1 before the first collective.
  int bound_device() {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_;
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  const ProcessGroupOptions& options() const { return options_; }

  // Checks `t` for an operation: defined, CUDA, contiguous, and on this rank's device once
  // the first collective has bound the communicator to one (launch() binds it).
  void check(const Tensor& t, const char* op, const std::string& what) {
    TDDP_CHECK(t.defined(), "ProcessGroupNccl {}: {} is an undefined tensor", op, what);
    TDDP_CHECK(t.is_cuda(), "ProcessGroupNccl {}: {} is on {}; the NCCL backend takes CUDA tensors (use gloo for CPU tensors)",
               op, what, t.device().str());
    TDDP_CHECK(t.is_contiguous(), "ProcessGroupNccl {}: {} (shape {}) is not contiguous; pass .contiguous()", op, what,
               tensor::format_shape(t.sizes()));
    std::lock_guard<std::mutex> lock(mutex_);
    TDDP_CHECK(device_ < 0 || device_ == t.device().index,
               "ProcessGroupNccl {}: {} is on {}, but rank {}'s communicator is on cuda:{}; use one device per rank", op,
               what, t.device().str(), rank_, device_);
  }

  void check_like(const Tensor& t, const Tensor& reference, const char* op, const std::string& what) {
    check(t, op, what);
    TDDP_CHECK(t.dtype() == reference.dtype() && t.sizes() == reference.sizes(),
               "ProcessGroupNccl {}: {} is {} {} but must be {} {}", op, what, tensor::dtype_name(t.dtype()),
               tensor::format_shape(t.sizes()), tensor::dtype_name(reference.dtype()), tensor::format_shape(reference.sizes()));
  }

  void check_rank(int r, const char* op, const char* role) const {
    TDDP_CHECK(r >= 0 && r < size_, "ProcessGroupNccl {}: {} {} is not a rank of this group of {}", op, role, r, size_);
  }

  std::string describe(const char* op, const Tensor& t, const std::string& extra = "") const {
    return fmt::format("{} (rank {} of {}, {} x {}{}{})", op, rank_, size_, t.numel(), tensor::dtype_name(t.dtype()),
                       extra.empty() ? "" : ", ", extra);
  }

  // Plain CUDA work queued on the NCCL stream around the NCCL calls (copies into or out of a
  // flat buffer).
  using StreamWork = std::function<void(cudaStream_t)>;

  // Runs `issue(comm, stream)` (NCCL calls, inside one group) as one collective on `device`,
  // ordered after the compute stream's work so far, with `before` and `after` queued on the
  // same stream around it; `tensors` are the ones it touches.
  std::shared_ptr<Work> launch(std::string description, int device, std::vector<Tensor> tensors, bool host_wait,
                               const std::function<void(ncclComm_t, cudaStream_t)>& issue,
                               const StreamWork& before = nullptr, const StreamWork& after = nullptr) {
    std::unique_lock<std::mutex> comm_lock(comm_mutex_);  // no abort while NCCL calls are made
    throw_if_broken();
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
    auto work = std::make_shared<NcclWork>(std::move(description), device, end, std::move(tensors), host_wait);
    if (after_queued_for_testing) after_queued_for_testing();
    {
      // Registered before comm_mutex_ is released: abort() and the watchdog's abort take it,
      // so they see this work and fail it. (Registered after, an abort in between would kill
      // the kernel, its end event would pass, and wait() would report success.)
      std::lock_guard<std::mutex> lock(mutex_);
      if (broken_) {
        work->finish(broken_);
        work->release_tensors();
      } else {
        pending_.push_back(work);
      }
    }
    comm_lock.unlock();
    wake_cv_.notify_all();
    return work;
  }

  void abort(const std::string& reason) {
    fail(reason, false);
    std::lock_guard<std::mutex> comm_lock(comm_mutex_);
    abort_comm();
  }

 private:
  void throw_if_broken() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) std::rethrow_exception(broken_);
  }

  // The communicator, created on first use: every rank announces itself in the store and
  // waits for the others, rank 0 publishes the unique id, and NCCL's non-blocking
  // initialisation is polled until it completes or the timeout passes.
  // Caller holds comm_mutex_.
  void ensure_comm(int device) {
    if (comm_ != nullptr || aborted_) return;
    DeviceGuard guard(device);
    // Groups made on one store get numbered keys (every rank makes them in the same order).
    const int64_t generation = store_->add("tinyddp/nccl/groups/rank" + std::to_string(rank_), 1);
    const std::string base = fmt::format("tinyddp/nccl/{}/", generation);
    store_->set(base + "rank" + std::to_string(rank_), std::string("here"));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(base + "rank" + std::to_string(r));
    try {
      store_->wait(keys, options_.timeout);
    } catch (const TimeoutError& e) {
      throw TimeoutError(fmt::format("ProcessGroupNccl: rank {} of {} gave up creating the communicator after {} ms: not "
                                     "every rank joined ({})",
                                     rank_, size_, options_.timeout.count(), e.what()));
    }
    ncclUniqueId id{};
    if (rank_ == 0) {
      TDDP_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
      store_->set(base + "unique_id", Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
    } else {
      store_->wait({base + "unique_id"}, options_.timeout);
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
    const auto deadline = Clock::now() + options_.timeout;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      TDDP_NCCL_CHECK(ncclCommGetAsyncError(comm, &state), comm);
      if (state == ncclInProgress && Clock::now() > deadline) {
        ncclCommAbort(comm);
        tensor::cuda::release_stream(device, stream);
        throw TimeoutError(fmt::format("ProcessGroupNccl: rank {} of {}: creating the NCCL communicator on cuda:{} did "
                                       "not finish within {} ms",
                                       rank_, size_, device, options_.timeout.count()));
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

  // In non-blocking mode NCCL may still be queueing the group's kernels when ncclGroupEnd
  // returns: poll until it is done (bounded by the timeout). Caller holds comm_mutex_.
  void wait_until_queued(const std::string& description) {
    const auto deadline = Clock::now() + options_.timeout;
    ncclResult_t state = ncclInProgress;
    for (int polls = 0;; ) {
      TDDP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        const std::string message = fmt::format("{} failed: {}", description, nccl_message(state, "ncclGroupEnd", comm_));
        fail(message, false);
        abort_comm();
        throw Error(message);
      }
      if (Clock::now() > deadline) {
        const std::string message = fmt::format("{} could not be queued within {} ms", description, options_.timeout.count());
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

  // The group is broken from now on: every pending Work fails with `reason`, as does every
  // later call. Takes mutex_.
  void fail(const std::string& reason, bool timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(reason, timeout);
  }

  // Caller holds mutex_.
  void fail_locked(const std::string& reason, bool timeout) {
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

  // Caller holds comm_mutex_. In-flight NCCL kernels exit; the events after them complete.
  void abort_comm() {
    if (comm_ == nullptr || aborted_) return;
    DeviceGuard guard(device_);
    ncclCommAbort(comm_);
    aborted_ = true;
    comm_ = nullptr;
  }

  // Called by the watchdog, holding mutex_ through `lock`: fails the group, then aborts the
  // communicator with mutex_ released (lock order: comm_mutex_ before mutex_).
  void fail_and_abort(std::unique_lock<std::mutex>& lock, const std::string& reason, bool timeout) {
    fail_locked(reason, timeout);
    lock.unlock();
    {
      std::lock_guard<std::mutex> comm_lock(comm_mutex_);
      abort_comm();
    }
    lock.lock();
  }

  void watchdog_loop() {
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
        if (now - (*it)->started() > options_.timeout) {
          fail_and_abort(lock,
                         fmt::format("ProcessGroupNccl: {} did not finish within {} ms; the communicator was aborted "
                                     "(did a rank exit, or skip this collective?)",
                                     (*it)->description(), options_.timeout.count()),
                         true);
          break;
        }
        ++it;
      }
      if (pending_.empty()) idle_cv_.notify_all();
    }
  }

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  ProcessGroupOptions options_;

  // comm_mutex_ guards comm_ and stream_: held while NCCL calls are made (creation, a
  // launch) and to abort. mutex_ guards the rest. Order: comm_mutex_ before mutex_.
  std::mutex comm_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_cv_;
  std::condition_variable idle_cv_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
  bool aborted_ = false;
  std::exception_ptr broken_;
  std::list<std::shared_ptr<NcclWork>> pending_;
  bool stopping_ = false;
  std::thread watchdog_;

 public:
  int groups_created = 0;
  // Runs inside launch() after the collective is queued, before its work is registered and
  // comm_mutex_ released (a test aborts the group from another thread there).
  std::function<void()> after_queued_for_testing;
};

// ---- the public interface ----------------------------------------------------------------------

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size) {
  TDDP_CHECK(store != nullptr, "ProcessGroupNccl: the store is null");
  TDDP_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroupNccl: rank {} is not in [0, {}) for a group of size {}",
             rank, size, size);
  TDDP_CHECK(tensor::cuda::is_available(), "ProcessGroupNccl: needs a GPU: {}", tensor::cuda::unavailable_reason());
  impl_ = std::make_unique<Impl>(std::move(store), rank, size, std::move(options));
}

ProcessGroupNccl::~ProcessGroupNccl() = default;

void ProcessGroupNccl::abort(const std::string& reason) { impl_->abort(reason); }

void ProcessGroupNccl::set_after_queued_for_testing(std::function<void()> fn) {
  impl_->after_queued_for_testing = std::move(fn);
}

namespace {
int device_of(const Tensor& t) { return t.device().index; }
size_t count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// Copies between equally sized tensors and consecutive slices of `flat`, on `stream`:
// into flat (to_flat) or out of it.
void copy_slices(const std::vector<Tensor>& parts, const Tensor& flat, bool to_flat, cudaStream_t stream) {
  auto* base = static_cast<char*>(flat.raw_data_ptr());
  for (size_t r = 0; r < parts.size(); ++r) {
    const size_t bytes = parts[r].nbytes();
    char* slice = base + r * bytes;
    void* part = parts[r].raw_data_ptr();
    TDDP_CUDA_CHECK(cudaMemcpyAsync(to_flat ? slice : part, to_flat ? part : slice, bytes, cudaMemcpyDeviceToDevice, stream));
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::allreduce(const std::vector<Tensor>& tensors, ReduceOp op) {
  TDDP_CHECK(!tensors.empty(), "ProcessGroupNccl allreduce: no tensors given");
  for (size_t i = 0; i < tensors.size(); ++i) {
    impl_->check(tensors[i], "allreduce", fmt::format("tensor {}", i));
    TDDP_CHECK(tensors[i].dtype() == tensors[0].dtype(), "ProcessGroupNccl allreduce: tensors of different dtypes ({} and {})",
               tensor::dtype_name(tensors[0].dtype()), tensor::dtype_name(tensors[i].dtype()));
  }
  const ncclDataType_t type = nccl_type(tensors[0].dtype(), true, "allreduce");
  const ncclRedOp_t red = nccl_op(op, tensors[0].dtype(), "allreduce");
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  const std::string what = fmt::format("allreduce (rank {} of {}, {} tensor(s), {} x {}, {})", rank_, size_, tensors.size(),
                                       total, tensor::dtype_name(tensors[0].dtype()), reduce_op_name(op));
  return impl_->launch(what, device_of(tensors[0]), tensors, false, [&](ncclComm_t comm, cudaStream_t stream) {
    for (const Tensor& t : tensors) {
      TDDP_NCCL_CHECK(ncclAllReduce(t.raw_data_ptr(), t.raw_data_ptr(), count(t), type, red, comm, stream), comm);
    }
  });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast(const Tensor& tensor, int root) {
  impl_->check(tensor, "broadcast", "tensor");
  impl_->check_rank(root, "broadcast", "root");
  const ncclDataType_t type = nccl_type(tensor.dtype(), false, "broadcast");
  return impl_->launch(impl_->describe("broadcast", tensor, fmt::format("root {}", root)), device_of(tensor), {tensor},
                       false, [&](ncclComm_t comm, cudaStream_t stream) {
                         TDDP_NCCL_CHECK(ncclBroadcast(tensor.raw_data_ptr(), tensor.raw_data_ptr(), count(tensor), type,
                                                       root, comm, stream),
                                         comm);
                       });
}

std::shared_ptr<Work> ProcessGroupNccl::allgather(const std::vector<Tensor>& outputs, const Tensor& input) {
  impl_->check(input, "allgather", "input");
  TDDP_CHECK(static_cast<int>(outputs.size()) == size_, "ProcessGroupNccl allgather: {} outputs given for a group of {}",
             outputs.size(), size_);
  for (size_t r = 0; r < outputs.size(); ++r) impl_->check_like(outputs[r], input, "allgather", fmt::format("output {}", r));
  const ncclDataType_t type = nccl_type(input.dtype(), false, "allgather");
  // Gathered into one flat buffer, then each slice copied to its output on the NCCL stream.
  const Tensor flat = tensor::empty({input.numel() * size_}, tensor::TensorOptions().dtype(input.dtype()).device(input.device()));
  std::vector<Tensor> touched = outputs;
  touched.push_back(input);
  touched.push_back(flat);
  return impl_->launch(impl_->describe("allgather", input), device_of(input), touched, false,
                       [&](ncclComm_t comm, cudaStream_t stream) {
                         TDDP_NCCL_CHECK(ncclAllGather(input.raw_data_ptr(), flat.raw_data_ptr(), count(input), type, comm, stream),
                                         comm);
                       },
                       nullptr, [&](cudaStream_t stream) { copy_slices(outputs, flat, false, stream); });
}

namespace {
// gather (to_root) and scatter: `mine` is this rank's tensor, `at_root` the root's list (one
// per rank, only on the root). The root exchanges with every other rank and copies its own
// slot locally; every other rank makes one send or recv.
void exchange_with_root(bool to_root, const Tensor& mine, const std::vector<Tensor>& at_root, int root, int rank, int size,
                        ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  if (rank != root) {
    if (to_root) {
      TDDP_NCCL_CHECK(ncclSend(mine.raw_data_ptr(), count(mine), type, root, comm, stream), comm);
    } else {
      TDDP_NCCL_CHECK(ncclRecv(mine.raw_data_ptr(), count(mine), type, root, comm, stream), comm);
    }
    return;
  }
  for (int r = 0; r < size; ++r) {
    void* slot = at_root[r].raw_data_ptr();
    if (r == rank) {
      TDDP_CUDA_CHECK(cudaMemcpyAsync(to_root ? slot : mine.raw_data_ptr(), to_root ? mine.raw_data_ptr() : slot, mine.nbytes(),
                                      cudaMemcpyDeviceToDevice, stream));
    } else if (to_root) {
      TDDP_NCCL_CHECK(ncclRecv(slot, count(mine), type, r, comm, stream), comm);
    } else {
      TDDP_NCCL_CHECK(ncclSend(slot, count(mine), type, r, comm, stream), comm);
    }
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  return root_exchange(true, input, outputs, root);
}

std::shared_ptr<Work> ProcessGroupNccl::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  return root_exchange(false, output, inputs, root);
}

std::shared_ptr<Work> ProcessGroupNccl::root_exchange(bool to_root, const Tensor& mine, const std::vector<Tensor>& at_root,
                                                      int root) {
  const char* op = to_root ? "gather" : "scatter";
  const char* mine_name = to_root ? "input" : "output";
  const char* list_name = to_root ? "outputs" : "inputs";
  impl_->check(mine, op, mine_name);
  impl_->check_rank(root, op, "root");
  if (rank_ == root) {
    TDDP_CHECK(static_cast<int>(at_root.size()) == size_, "ProcessGroupNccl {}: the root needs {} {}, got {}", op, size_,
               list_name, at_root.size());
    for (size_t r = 0; r < at_root.size(); ++r) {
      impl_->check_like(at_root[r], mine, op, fmt::format("{} {}", to_root ? "output" : "input", r));
    }
  } else {
    TDDP_CHECK(at_root.empty(), "ProcessGroupNccl {}: only the root (rank {}) passes {}", op, root, list_name);
  }
  const ncclDataType_t type = nccl_type(mine.dtype(), false, op);
  std::vector<Tensor> touched = at_root;
  touched.push_back(mine);
  return impl_->launch(impl_->describe(op, mine, fmt::format("root {}", root)), device_of(mine), touched, false,
                       [&](ncclComm_t comm, cudaStream_t stream) {
                         exchange_with_root(to_root, mine, at_root, root, rank_, size_, type, comm, stream);
                       });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce(const Tensor& tensor, int root, ReduceOp op) {
  impl_->check(tensor, "reduce", "tensor");
  impl_->check_rank(root, "reduce", "root");
  const ncclDataType_t type = nccl_type(tensor.dtype(), true, "reduce");
  const ncclRedOp_t red = nccl_op(op, tensor.dtype(), "reduce");
  // Non-root ranks reduce from their tensor into a scratch buffer: their tensor is unchanged.
  const Tensor target = rank_ == root ? tensor : tensor::empty_like(tensor);
  return impl_->launch(impl_->describe("reduce", tensor, fmt::format("root {}, {}", root, reduce_op_name(op))),
                       device_of(tensor), {tensor, target}, false, [&](ncclComm_t comm, cudaStream_t stream) {
                         TDDP_NCCL_CHECK(ncclReduce(tensor.raw_data_ptr(), target.raw_data_ptr(), count(tensor), type, red,
                                                    root, comm, stream),
                                         comm);
                       });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  impl_->check(output, "reduce_scatter", "output");
  TDDP_CHECK(static_cast<int>(inputs.size()) == size_, "ProcessGroupNccl reduce_scatter: {} inputs given for a group of {}",
             inputs.size(), size_);
  for (size_t r = 0; r < inputs.size(); ++r) impl_->check_like(inputs[r], output, "reduce_scatter", fmt::format("input {}", r));
  const ncclDataType_t type = nccl_type(output.dtype(), true, "reduce_scatter");
  const ncclRedOp_t red = nccl_op(op, output.dtype(), "reduce_scatter");
  // The inputs copied end to end on the NCCL stream, then reduce-scattered from there.
  const Tensor flat = tensor::empty({output.numel() * size_}, tensor::TensorOptions().dtype(output.dtype()).device(output.device()));
  std::vector<Tensor> touched = inputs;
  touched.push_back(output);
  touched.push_back(flat);
  return impl_->launch(impl_->describe("reduce_scatter", output, reduce_op_name(op)), device_of(output), touched, false,
                       [&](ncclComm_t comm, cudaStream_t stream) {
                         TDDP_NCCL_CHECK(ncclReduceScatter(flat.raw_data_ptr(), output.raw_data_ptr(), count(output), type, red,
                                                           comm, stream),
                                         comm);
                       },
                       [&](cudaStream_t stream) { copy_slices(inputs, flat, true, stream); });
}

std::shared_ptr<Work> ProcessGroupNccl::barrier() {
  // An allreduce of one element on this rank's device, which wait() observes on the host.
  // Before any collective has bound the group to a device: cuda:LOCAL_RANK (the launcher's
  // choice), else cuda:(rank mod devices), as PyTorch guesses.
  int device = impl_->bound_device();
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = (local != nullptr && *local != '\0' ? std::atoi(local) : rank_) % tensor::cuda::device_count();
  }
  const Tensor token = tensor::zeros({1}, tensor::TensorOptions().dtype(tensor::kFloat32).device(tensor::Device(tensor::DeviceType::kCUDA, device)));
  return impl_->launch(fmt::format("barrier (rank {} of {})", rank_, size_), device, {token}, true,
                       [&](ncclComm_t comm, cudaStream_t stream) {
                         TDDP_NCCL_CHECK(ncclAllReduce(token.raw_data_ptr(), token.raw_data_ptr(), 1, ncclFloat32, ncclSum,
                                                       comm, stream),
                                         comm);
                       });
}

std::shared_ptr<Work> ProcessGroupNccl::send(const Tensor& tensor, int dst, int tag) {
  return point_to_point(true, tensor, dst, tag);
}

std::shared_ptr<Work> ProcessGroupNccl::recv(const Tensor& tensor, int src, int tag) {
  return point_to_point(false, tensor, src, tag);
}

std::shared_ptr<Work> ProcessGroupNccl::point_to_point(bool sending, const Tensor& tensor, int peer, int tag) {
  const char* op = sending ? "send" : "recv";
  impl_->check(tensor, op, "tensor");
  TDDP_CHECK(peer >= 0 && peer < size_ && peer != rank_, "ProcessGroupNccl {}: {} {} is not another rank of this group of {}",
             op, sending ? "destination" : "source", peer, size_);
  TDDP_CHECK(tag >= 0, "ProcessGroupNccl {}: tag must be >= 0, got {}", op, tag);
  const ncclDataType_t type = nccl_type(tensor.dtype(), false, op);
  return impl_->launch(impl_->describe(op, tensor, fmt::format("{} {}", sending ? "to" : "from", peer)), device_of(tensor),
                       {tensor}, false, [&](ncclComm_t comm, cudaStream_t stream) {
                         if (sending) {
                           TDDP_NCCL_CHECK(ncclSend(tensor.raw_data_ptr(), count(tensor), type, peer, comm, stream), comm);
                         } else {
                           TDDP_NCCL_CHECK(ncclRecv(tensor.raw_data_ptr(), count(tensor), type, peer, comm, stream), comm);
                         }
                       });
}

std::shared_ptr<ProcessGroup> ProcessGroupNccl::new_group(const std::vector<int>& ranks) {
  TDDP_CHECK(!ranks.empty(), "new_group: the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    TDDP_CHECK(ranks[i] >= 0 && ranks[i] < size_, "new_group: rank {} is not in this group of {}", ranks[i], size_);
    TDDP_CHECK(i == 0 || ranks[i] > ranks[i - 1], "new_group: ranks must be sorted and unique, got [{}]", fmt::join(ranks, ", "));
  }
  const int id = impl_->groups_created++;  // the same on every rank: new_group is called in the same order
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  auto store = std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), impl_->store());
  return std::make_shared<ProcessGroupNccl>(store, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()),
                                            impl_->options());
}

}  // namespace tinyddp::comm
