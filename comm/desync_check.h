// Desync detection: every rank of a group must issue the same collectives in the same order,
// with the same dtype, element count, root and reduce op. A rank that skips a broadcast, or
// allreduces another size, dtype or op, would otherwise hang until the timeout, abort inside
// the transport, or (worst) finish with silently wrong numbers.
//
// One check for every backend, with one home: ProcessGroupWrapper (process_group_wrapper.h),
// which wraps the backend of every group init_process_group and new_process_group make.
// ProcessGroup's public collectives describe each call with a CallSignature (call.h); the
// wrapper's CallCheck numbers the calls in the order they run, swaps every rank's encoded row
// with the others on a CPU side channel and compares them (find_mismatch) before any tensor is
// changed. Every rank sees the same rows, so every rank raises the same
// CollectiveMismatchError, naming the ranks on each side and the calls they made, and the
// group stays usable. For a backend that runs its calls on a worker of its own (Gloo) the
// wrapper hands the check to the backend as each call's CallHook (call.h), which the worker
// runs just before the data moves, its rows travelling as the hook's records on the backend's
// own connections (on two ranks in the same message as a small allreduce's data, so the check
// costs no extra round trip); the backend knows nothing of the check. Any other backend
// (NCCL) is checked on the calling thread before the call is queued, over a small Gloo group
// the wrapper makes, so no CUDA stream ever waits for it. On by default
// (ProcessGroupOptions::check_calls; TINYDDP_DESYNC_CHECK=0 turns it off).
// docs/comm.md, "Desync detection", says more; bench/README.md, "Desync check", measures it.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/call.h"
#include "tinyddp/comm/store.h"

namespace tinyddp::comm {

// Ranks disagreed on a collective; what() names the ranks and both calls. A CallRefused: a
// backend that runs the check as a call's hook fails the call with it as it is.
class CollectiveMismatchError : public CallRefused {
 public:
  explicit CollectiveMismatchError(const std::string& message) : CallRefused(message) {}
};

// `rows` holds one encoded row per rank (rank r at r). Returns the error message when they
// differ ("ProcessGroupGloo: the ranks called different collectives: rank 0 called broadcast
// (...); rank 1 called allreduce (...) ..."), else nothing. `group` names the group.
std::optional<std::string> find_mismatch(const std::vector<CallSignature::Row>& rows, const std::string& group,
                                         DataFate fate = DataFate::kNotSent);

// The default of ProcessGroupOptions::check_calls: true unless TINYDDP_DESYNC_CHECK is "0".
bool call_check_default();

// One group's check: its call numbering, its side channel and the comparison.
class CallCheck {
 public:
  using Row = CallSignature::Row;
  // Swaps the rows (RecordExchange: one per rank) over the side channel.
  using Exchange = RecordExchange;

  // Collective, once for a group of more than one rank: whether the check runs, as
  // `requested` (unset: call_check_default()) says on every rank, waiting up to `timeout` for
  // the others' choices (a TimeoutError past it). Throws, on every rank and naming the ranks on
  // each side, when they chose differently (a checked rank's rows would meet an unchecked
  // rank's data). `group` starts the message ("ProcessGroupGloo").
  static bool agree(Store& store, int rank, int size, std::optional<bool> requested, const std::string& group,
                    Millis timeout);

  CallCheck(std::string group, int rank, int size, Exchange exchange);

  // The row of the next call, counting it: for a backend whose own messages carry the rows.
  Row next_row(const CallSignature& call);
  // Throws CollectiveMismatchError (the same on every rank) when the rows differ.
  void compare(const std::vector<Row>& rows, DataFate fate = DataFate::kNotSent) const;
  // The whole check of the next call: its row, the exchange, the comparison. Calls are
  // numbered in the order they reach verify (or next_row), which must be the same on every
  // rank: the order the backend runs them in.
  void verify(const CallSignature& call);

 private:
  std::string group_;
  int rank_;
  int size_;
  Exchange exchange_;
  std::mutex mutex_;  // numbering and exchanging one call at a time
  uint64_t next_ = 0;
};

}  // namespace tinyddp::comm
