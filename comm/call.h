// What one collective call is, in the terms every rank must agree on: the reduce ops, the
// collectives, and a call's signature (collective, dtype, element count, root, op). The
// ProcessGroup interface describes each call with one (process_group.h), and the desync check
// compares them across ranks (desync_check.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tinyddp/tensor/dtype.h"

namespace tinyddp::comm {

class CallCheck;  // desync_check.h

enum class ReduceOp { kSum, kProduct, kMin, kMax, kAvg };
const char* reduce_op_name(ReduceOp op);

enum class Collective { kAllreduce, kBroadcast, kAllgather, kGather, kScatter, kReduce, kReduceScatter, kBarrier };
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

// One call as ProcessGroup hands it to its backend: `what` describes it for its Work and
// errors ("allreduce (rank 1 of 4, 1000 x float32, sum)"); `signature` is what the ranks
// compare. Point-to-point calls carry no signature (the ranks' calls differ by design).
struct Call {
  Call() = default;
  Call(std::string what_, std::optional<CallSignature> signature_)
      : what(std::move(what_)), signature(std::move(signature_)) {}

  std::string what;
  std::optional<CallSignature> signature;
  // The desync check, for a backend that runs it itself just before the data moves
  // (ProcessGroup::runs_call_checks); null when it was run already, or is off.
  std::shared_ptr<CallCheck> check;
};

}  // namespace tinyddp::comm
