// Call signatures, their comparison, and CallCheck: see call.h and desync_check.h.
#include "tinyddp/comm/desync_check.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tinyddp::comm {

namespace {

constexpr int64_t kCollectives = static_cast<int64_t>(Collective::kBarrier) + 1;
constexpr int64_t kDTypes = static_cast<int64_t>(tensor::DType::kUInt8) + 1;  // the last DType
constexpr int64_t kReduceOps = static_cast<int64_t>(ReduceOp::kAvg) + 1;
// In the op word's high bits, so that a row of other data is not taken for a call.
constexpr int64_t kMark = int64_t{0x5EC} << 16;

// "rank 3" or "ranks 0, 2".
std::string rank_list(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? fmt::format("rank {}", ranks.front()) : fmt::format("ranks {}", fmt::join(ranks, ", "));
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllgather: return "allgather";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kReduce: return "reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kReduceScatterWidened: return "reduce_scatter_widened";
    case Collective::kBarrier: return "barrier";
  }
  return "?";
}

CallSignature::Row CallSignature::encode(uint64_t seq) const {
  return Row{
      static_cast<int64_t>(seq) + 1,                   // the call's number, from 1 (0: no row)
      kMark | static_cast<int64_t>(op),                // the collective, marked
      static_cast<int64_t>(dtype),                     // the element type
      numel,                                           // elements
      static_cast<int64_t>(root) + 1,                  // 0: no root
      reduce ? static_cast<int64_t>(*reduce) + 1 : 0,  // 0: no reduce op
  };
}

std::string CallSignature::describe_row(const Row& row) {
  const int64_t op = row[1] - kMark;
  const bool valid = row[0] >= 1 && op >= 0 && op < kCollectives && row[2] >= 0 && row[2] < kDTypes && row[3] >= 0 &&
                     row[4] >= 0 && row[5] >= 0 && row[5] <= kReduceOps;
  if (!valid) return fmt::format("an unreadable call record [{}]", fmt::join(row, ", "));
  const auto collective = static_cast<Collective>(op);
  std::string text = fmt::format("{} (call {}", collective_name(collective), row[0] - 1);
  if (collective != Collective::kBarrier) {
    text += fmt::format(", {} x {}", row[3], tensor::dtype_name(static_cast<tensor::DType>(row[2])));
  }
  if (row[4] > 0) text += fmt::format(", root {}", row[4] - 1);
  if (row[5] > 0) text += fmt::format(", {}", reduce_op_name(static_cast<ReduceOp>(row[5] - 1)));
  return text + ")";
}

std::optional<std::string> find_mismatch(const std::vector<CallSignature::Row>& rows, const std::string& group,
                                         DataFate fate) {
  // The distinct calls, in order of the lowest rank making each, with the ranks making it.
  std::vector<std::pair<CallSignature::Row, std::vector<int>>> calls;
  for (size_t r = 0; r < rows.size(); ++r) {
    auto same = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == rows[r]; });
    if (same == calls.end()) {
      calls.push_back({rows[r], {static_cast<int>(r)}});
    } else {
      same->second.push_back(static_cast<int>(r));
    }
  }
  if (calls.size() <= 1) return std::nullopt;
  std::vector<std::string> sides;
  for (const auto& [row, ranks] : calls) {
    sides.push_back(fmt::format("{} called {}", rank_list(ranks), CallSignature::describe_row(row)));
  }
  return fmt::format(
      "{}: the ranks called different collectives: {}. Every rank must issue the same collectives in the same order, "
      "with the same dtype, element count, root and reduce op ({}; TINYDDP_DESYNC_CHECK=0 turns this check off)",
      group, fmt::join(sides, "; "),
      fate == DataFate::kNotSent ? "no data was sent"
                                 : "no tensor was changed: each rank dropped the data that came with the call records");
}

bool call_check_default() {
  const char* value = std::getenv("TINYDDP_DESYNC_CHECK");
  return value == nullptr || std::string(value) != "0";
}

namespace {
// Whether the check runs, from every rank's choice (rank r's at r): throws if they differ.
bool decide(const std::vector<bool>& on_per_rank, const std::string& group) {
  std::vector<int> on_ranks, off_ranks;
  for (size_t r = 0; r < on_per_rank.size(); ++r)
    (on_per_rank[r] ? on_ranks : off_ranks).push_back(static_cast<int>(r));
  TDDP_CHECK(on_ranks.empty() || off_ranks.empty(),
             "{}: ranks disagree on the desync check: on for ranks [{}], off for ranks [{}]; every rank must set "
             "ProcessGroupOptions::check_calls (or TINYDDP_DESYNC_CHECK) alike",
             group, fmt::join(on_ranks, ", "), fmt::join(off_ranks, ", "));
  return off_ranks.empty();
}
}  // namespace

bool CallCheck::agree(Store& store, int rank, int size, std::optional<bool> requested, const std::string& group,
                      Millis timeout) {
  const bool on = requested.value_or(call_check_default());
  std::vector<std::string> choices;
  try {
    choices = store_allgather(store, "tinyddp/check-calls/", rank, size, on ? "1" : "0", timeout);
  } catch (const PartiesMissing& e) {
    throw TimeoutError(fmt::format(
        "{}: rank {} of {} waited {} ms for the other ranks' choice on the desync check: ranks [{}] never said ({})",
        group, rank, size, timeout.count(), fmt::join(e.missing(), ", "), e.what()));
  }
  std::vector<bool> on_per_rank;
  for (const std::string& choice : choices) on_per_rank.push_back(choice == "1");
  return decide(on_per_rank, group);
}

CallCheck::CallCheck(std::string group, int rank, int size, Exchange exchange)
    : group_(std::move(group)), rank_(rank), size_(size), exchange_(std::move(exchange)) {}

CallSignature::Row CallCheck::next_row(const CallSignature& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  return call.encode(next_++);
}

void CallCheck::compare(const std::vector<Row>& rows, DataFate fate) const {
  if (auto mismatch = find_mismatch(rows, group_, fate)) throw CollectiveMismatchError(*mismatch);
}

void CallCheck::verify(const CallSignature& call) {
  std::vector<Row> rows(static_cast<size_t>(size_), Row{});
  DataFate fate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rows[static_cast<size_t>(rank_)] = call.encode(next_++);
    fate = exchange_(rows);
  }
  compare(rows, fate);
}

}  // namespace tinyddp::comm
