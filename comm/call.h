// What one collective call is, in the terms every rank must agree on: the reduce ops, the
// collectives, and a call's signature (collective, dtype, element count, root, op). The
// ProcessGroup interface describes each call with one (process_group.h), and the desync check
// compares them across ranks (desync_check.h). Also the one hook a backend offers the group
// that wraps it: a step run where the call's data moves (CallHook), which the backend runs
// without knowing what it does.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/dtype.h"

namespace tinyddp::comm {

enum class ReduceOp { kSum, kProduct, kMin, kMax, kAvg };
const char* reduce_op_name(ReduceOp op);

enum class Collective {
  kAllreduce,
  kBroadcast,
  kAllgather,
  kGather,
  kScatter,
  kReduce,
  kReduceScatter,
  kReduceScatterWidened,
  kBarrier  // the last (desync_check.cc counts them from it)
};
const char* collective_name(Collective c);

// What every rank must agree on for one collective. numel is the elements this rank
// contributes (allreduce: of all its tensors together; allgather/gather: its input;
// scatter/reduce_scatter: its output).
struct CallSignature {
  Collective op = Collective::kBarrier;
  tensor::DType dtype = tensor::kFloat32;
  int64_t numel = 0;
  int root = -1;                   // -1: the collective has no root
  std::optional<ReduceOp> reduce;  // unset: it does not reduce

  static constexpr size_t kWords = 6;
  using Row = std::array<int64_t, kWords>;
  // The row exchanged for call number `seq` of the group (seq is also checked: a rank that
  // counts its calls differently is caught too). A zero row is never valid.
  Row encode(uint64_t seq) const;
  // "broadcast (1000 x float32, root 0)", or for a row that is no valid call, what it holds.
  static std::string describe_row(const Row& row);
};

// Whether a peer's data travelled with its record, for a hook that compares records: with
// the records alone nothing was sent; in a message that carries a call's data ahead of it, a
// refused call's data was received and dropped.
enum class DataFate { kNotSent, kDropped };

// A step that the group wrapping a backend must run just before each call's data moves, in
// the order the backend runs its calls (ProcessGroupWrapper's desync check). A backend that
// runs its calls on a thread of its own (ProcessGroup::runs_call_hooks) runs each call's hook
// there, so the caller is never blocked for it; it knows nothing of what the hook does. The
// hook talks to the other ranks in records, one fixed-size Record per rank: on the backend's
// own connections when it offers them (ProcessGroup::own_record_exchange), or, for a call
// whose data travels in one message per peer, in that message ahead of the data (record()
// before it is sent, settle() once every rank's has arrived).
class CallHook {
 public:
  using Record = CallSignature::Row;
  virtual ~CallHook() = default;
  // The step on its own, before anything of the call is sent.
  virtual void run() = 0;
  // The step carried by the call's own message: this rank's record, then every rank's (rank
  // r's at r) before any tensor changes.
  virtual Record record() = 0;
  virtual void settle(const std::vector<Record>& records, DataFate fate) = 0;
};

// Swaps one record per rank: `records` has this rank's filled in and the others zero;
// afterwards every rank's is there. Returns whether data travelled with them (the same on
// every rank). Throws (a TimeoutError within the group's timeout) when the exchange fails.
using RecordExchange = std::function<DataFate(std::vector<CallHook::Record>& records)>;

// A hook's refusal of a call (any of its steps may throw one): the message is complete
// ("allreduce (...) failed: ..."), and the backend fails the call's Work with it as it is.
// Anything else a hook throws is the backend's own failure to exchange.
class CallRefused : public Error {
 public:
  explicit CallRefused(const std::string& message) : Error(message) {}
};

// One call as ProcessGroup hands it to its backend: `what` describes it for its Work and
// errors ("allreduce (rank 1 of 4, 1000 x float32, sum)"); `signature` is what the ranks
// compare. Point-to-point calls carry no signature (the ranks' calls differ by design).
struct Call {
  Call() = default;
  Call(std::string what_, std::optional<CallSignature> signature_)
      : what(std::move(what_)), signature(std::move(signature_)) {}

  std::string what;
  std::optional<CallSignature> signature;
  // For a backend that runs hooks (ProcessGroup::runs_call_hooks): the step to run just
  // before the data moves; null when there is none.
  std::shared_ptr<CallHook> hook;
};
}  // namespace tinyddp::comm
