// ProcessGroupWrapper: the desync check's home (desync_check.h), as a ProcessGroup that wraps
// another. Every collective passes through it on its way to the wrapped backend; it hands the
// call on only once every rank has been seen to make the same call (else every rank's call
// fails with the same CollectiveMismatchError and nothing reaches the backend). Every group of
// more than one rank that init_process_group and new_process_group make (init.h) is wrapped;
// with the check off, the wrapper hands each call straight on. Its subgroups (new_group) are
// wrapped in turn, and their ranks agree on the switch at their first collective.
//
// Where the check runs is decided here, once, from what the backend offers:
// - A backend that runs its calls in order on a thread of its own (Gloo's worker) says so
//   (ProcessGroup::runs_call_hooks): the wrapper hands it the check of each call as the
//   call's hook (Call::hook, a CallHook), and the backend runs it on that thread just before
//   the data moves, knowing nothing of what it does. The caller is never blocked, so DDP keeps
//   its overlap of allreduce with backward.
// - Any other backend (NCCL, a test's recording group) is checked here, on the calling thread,
//   before the call is handed on: the host waits until every rank has issued the call, but no
//   CUDA stream ever waits for the check.
// The rows travel as the hooks' records on the backend's own connections when it offers them
// (own_record_exchange: Gloo's, where on two ranks a small allreduce's message carries its
// record ahead of the data, so the check costs no round trip), else on a small Gloo group
// this wrapper makes over the same ranks and store (side group), as PyTorch's
// ProcessGroupWrapper does.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "tinyddp/comm/desync_check.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/comm/store.h"

namespace tinyddp::comm {

class ProcessGroupWrapper final : public ProcessGroup {
 public:
  // Wraps `inner`, a group of more than one rank on `store`. The ranks agree on the switch
  // (options.check_calls(), else TINYDDP_DESYNC_CHECK) through the store at the first
  // collective, or at agree(); ranks that chose differently all fail, naming both sides. When
  // the check is off every call goes straight to `inner`.
  ProcessGroupWrapper(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<Store> store, ProcessGroupOptions options);
  // Wraps `inner` with the check on, its rows swapped over `side`, a CPU group of the same
  // ranks whose own check is off (no agreement: the caller chose).
  ProcessGroupWrapper(std::shared_ptr<ProcessGroup> inner, std::shared_ptr<ProcessGroup> side);

  // Agrees on the switch now (collective; the first collective does it otherwise) and makes
  // the side group if one is needed. Throws when the ranks disagree or one never comes.
  void agree();
  // Whether the check runs (agreeing first if that has not happened).
  bool checking();
  // The backend this wraps.
  const std::shared_ptr<ProcessGroup>& wrapped() const { return inner_; }

 protected:
  std::shared_ptr<Work> allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) override;
  std::shared_ptr<Work> broadcast_impl(const Tensor& tensor, int root, Call call) override;
  std::shared_ptr<Work> allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input, Call call) override;
  std::shared_ptr<Work> gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                    Call call) override;
  std::shared_ptr<Work> scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                     Call call) override;
  std::shared_ptr<Work> reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) override;
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                            Call call) override;
  std::shared_ptr<Work> reduce_scatter_widened_impl(const Tensor& sums, const Tensor& values, const Widen& widen,
                                                    Call call) override;
  std::shared_ptr<Work> barrier_impl(Call call) override;
  std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, Call call) override;
  std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, Call call) override;
  // The wrapped backend's subgroup, wrapped in turn (a subgroup of one rank is not).
  std::shared_ptr<ProcessGroup> create_subgroup(int id, int rank, int size) override;
  void check_placement(const Tensor& t, const char* op, const std::string& what) const override;
  // The backend's own setup first (NCCL's rendezvous), then the agreement.
  void prepare_calls() override;

 private:
  // Checks `call` here when the backend does not run hooks, and hands it on with the check as
  // its hook when it does. A mismatch (or a failed exchange) becomes a failed Work.
  std::shared_ptr<Work> forward(Call call, const std::function<std::shared_ptr<Work>(Call)>& hand_on);

  std::shared_ptr<ProcessGroup> inner_;
  std::shared_ptr<Store> store_;  // null when made with a side group
  ProcessGroupOptions options_;
  std::mutex agree_mutex_;
  bool agreed_ = false;                 // under agree_mutex_
  std::shared_ptr<ProcessGroup> side_;  // the rows' channel when the backend has none of its own
  std::shared_ptr<CallCheck> check_;    // null while not agreed, or when the check is off
};

}  // namespace tinyddp::comm
