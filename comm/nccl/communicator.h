// NcclCommunicator: the NCCL side of ProcessGroupNccl (internal to comm/nccl): one
// communicator, created on the first collective, its own stream, the launch of each
// collective in steps 1-2 of process_group_nccl.h, and the watchdog of step 4.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::comm::detail {

// An NCCL result as an error message: the call, NCCL's description and, when the
// communicator has one, its last detailed error.
std::string nccl_message(ncclResult_t result, const char* call, ncclComm_t comm);

#define TDDP_NCCL_CHECK(call, communicator)                                                             \
  do {                                                                                                  \
    const ncclResult_t tddp_result_ = (call);                                                           \
    if (tddp_result_ != ncclSuccess && tddp_result_ != ncclInProgress) {                                \
      throw ::tinyddp::Error(::tinyddp::comm::detail::nccl_message(tddp_result_, #call, communicator)); \
    }                                                                                                   \
  } while (false)

// NCCL's names for a dtype and a reduction (ProcessGroup's checks refused what NCCL cannot take).
ncclDataType_t nccl_type(tensor::DType dtype);
ncclRedOp_t nccl_op(ReduceOp op);

class NcclWork;

class NcclCommunicator {
 public:
  // Starts the watchdog; the communicator itself is created by the first launch().
  NcclCommunicator(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Waits (up to the timeout) for pending collectives, then aborts and frees the communicator.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // The device the communicator is on, or -1 before the first collective.
  int bound_device();
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  const ProcessGroupOptions& options() const { return options_; }

  // Throws unless `t` is on the device the communicator is bound to (any, before the first
  // collective binds it: launch() does).
  void check_device(const Tensor& t, const char* op, const std::string& what);

  // Plain CUDA work queued on the NCCL stream around the NCCL calls (copies into or out of a
  // flat buffer).
  using StreamWork = std::function<void(cudaStream_t)>;

  // Runs `issue(comm, stream)` (NCCL calls, inside one group) as one collective on `device`,
  // ordered after the compute stream's work so far, with `before` and `after` queued on the
  // same stream around it; `tensors` are the ones it touches.
  std::shared_ptr<Work> launch(std::string description, int device, std::vector<Tensor> tensors, bool host_wait,
                               const std::function<void(ncclComm_t, cudaStream_t)>& issue,
                               const StreamWork& before = nullptr, const StreamWork& after = nullptr);

  void abort(const std::string& reason);

  // A collective launched while a CudaGraph captures on its device is recorded into the graph
  // (NCCL captures its kernels) and not watched: its end event is a node of the graph, which no
  // host can query. Instead, the first one of each capture adds a hook to the graph (
  // tensor/cuda.h, on_graph_replay) that, at every replay, refuses to launch on a broken group
  // and then hands the watchdog an event after the replay (replay_captured).
  struct Captured {
    uint64_t capture = 0;                   // tensor::cuda::capture_id
    std::vector<std::string> descriptions;  // the collectives, in capture order
  };

  // The ranks' rendezvous, made once (later calls return at once): this rank announces itself
  // under the group's next numbered key and waits, up to the timeout, for every other rank.
  // Throws a TimeoutError naming the missing keys when a rank never joins.
  void join();

 private:
  void throw_if_broken();

  // The communicator, created on first use: every rank announces itself in the store and
  // waits for the others, rank 0 publishes the unique id, and NCCL's non-blocking
  // initialisation is polled until it completes or the timeout passes.
  // Caller holds comm_mutex_.
  void ensure_comm(int device);

  // In non-blocking mode NCCL may still be queueing the group's kernels when ncclGroupEnd
  // returns: poll until it is done (bounded by the timeout). Caller holds comm_mutex_.
  void wait_until_queued(const std::string& description);

  // The group is broken from now on: every pending Work fails with `reason`, as does every
  // later call. Takes mutex_.
  void fail(const std::string& reason, bool timeout);

  // Caller holds mutex_.
  void fail_locked(const std::string& reason, bool timeout);

  // Caller holds comm_mutex_. In-flight NCCL kernels exit; the events after them complete.
  void abort_comm();

  // Called by the watchdog, holding mutex_ through `lock`: fails the group, then aborts the
  // communicator with mutex_ released (lock order: comm_mutex_ before mutex_).
  void fail_and_abort(std::unique_lock<std::mutex>& lock, const std::string& reason, bool timeout);

  void watchdog_loop();

  // Registers `work` with the watchdog, or fails it at once on a broken group. Caller holds
  // comm_mutex_ (so no abort comes between the check and the registration).
  void pend(const std::shared_ptr<NcclWork>& work);
  // Hands the watchdog `end` (an event already recorded) as one pending work named
  // `description`. Caller holds comm_mutex_.
  void watch(std::string description, int device, cudaEvent_t end);

  // For a collective queued during a capture: its graph replays it; the first of the capture
  // adds the replay hook. Caller holds comm_mutex_.
  void note_captured(int device, const std::string& description);
  // The hook's body at each replay of a graph holding `captured`: the graph is launched under
  // comm_mutex_ (no abort in between) unless the group is broken, then its end is watched as
  // one pending work.
  void replay_captured(const Captured& captured, int device, const tensor::cuda::ReplayLaunch& launch);

  // What the graphs' hooks reach this communicator through: cleared (under its mutex) first
  // thing in the destructor, so that a replay after it is refused.
  struct Alive {
    std::mutex mutex;
    NcclCommunicator* comm = nullptr;
  };
  std::shared_ptr<Alive> alive_;
  std::shared_ptr<Captured> captured_;  // the latest capture's collectives (under comm_mutex_)

  std::mutex join_mutex_;   // guards the two below; taken after comm_mutex_
  int64_t generation_ = 0;  // the group's number on the store, 0 before the first join
  std::string base_;        // "tinyddp/nccl/<generation>/" once joined

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
  // Runs inside launch() after the collective is queued, before its work is registered and
  // comm_mutex_ released (a test aborts the group from another thread there).
  std::function<void()> after_queued_for_testing;
};

}  // namespace tinyddp::comm::detail
