// Desync detection: every rank of a group must issue the same collectives in the same order,
// with the same dtype, element count, root and reduce op. A rank that skips a broadcast, or
// allreduces another size, dtype or op, would otherwise hang until the timeout, abort inside
// the transport, or (worst) finish with silently wrong numbers.
//
// Before each collective's data moves, the backend exchanges every rank's CallSignature (a
// fixed row of integers, encode()) and compares them with find_mismatch(). Every rank sees the
// same rows, so every rank raises the same CollectiveMismatchError, naming the ranks on each
// side and the calls they made, and no data is sent, so the group stays usable. On by default
// (ProcessGroupOptions::check_calls; TINYDDP_DESYNC_CHECK=0 turns it off): it costs one small
// exchange per collective (bench/README.md, "Desync check").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

// Ranks disagreed on a collective; what() names the ranks and both calls.
class CollectiveMismatchError : public Error {
 public:
  explicit CollectiveMismatchError(const std::string& message) : Error(message) {}
};

enum class Collective { kAllreduce, kBroadcast, kAllgather, kGather, kScatter, kReduce, kReduceScatter, kBarrier };
const char* collective_name(Collective c);

// What every rank must agree on for one collective. numel is the elements this rank
// contributes (allreduce: of all its tensors together; allgather/gather: its input;
// scatter/reduce_scatter: its output).
struct CallSignature {
  Collective op = Collective::kBarrier;
  tensor::DType dtype = tensor::kFloat32;
  int64_t numel = 0;
  int root = -1;                    // -1: the collective has no root
  std::optional<ReduceOp> reduce;  // unset: it does not reduce

  static constexpr size_t kWords = 6;
  using Row = std::array<int64_t, kWords>;
  // The row exchanged for call number `seq` of the group (seq is also checked: a rank that
  // counts its calls differently is caught too). A zero row is never valid.
  Row encode(uint64_t seq) const;
  // "broadcast (1000 x float32, root 0)", or for a row that is no valid call, what it holds.
  static std::string describe_row(const Row& row);
};

// `rows` holds one encoded row per rank (rank r at r). Returns the error message when they
// differ ("ranks disagree on collective call 12 of ProcessGroupGloo's group: rank 0 called
// broadcast (...); rank 1 called allreduce (...)"), else nothing. `group` names the group.
std::optional<std::string> find_mismatch(const std::vector<CallSignature::Row>& rows, const std::string& group);

// The default of ProcessGroupOptions::check_calls: true unless TINYDDP_DESYNC_CHECK is "0".
bool call_check_default();

}  // namespace tinyddp::comm
