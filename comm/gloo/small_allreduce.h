// Small allreduces on a latency-tuned path (internal to ProcessGroupGloo).
//
// Gloo's general allreduce (gloo::allreduce) negotiates every message with its peer before
// sending it, through the transport's event-loop thread: about 70-130 µs for a few hundred
// bytes between two local processes. DDP's small buckets (a whole ToyModel is 660 bytes) pay
// that on every step. Gloo's older algorithm classes instead send into buffers registered once
// at construction, and with the connection in synchronous mode the calling thread reads the
// socket itself: 5-15 µs for the same message.
//
// SmallAllreduce runs allreduces of up to kMaxBytes that way, on a second Gloo context of its
// own (so its synchronous connections never meet the general path's traffic). An algorithm
// object is built once per (dtype, op, element count) and kept (least recently used dropped
// past kMaxEntries), with a staging buffer it reads and writes: inputs are copied in, reduced,
// and copied back out. Keys never depend on addresses, so every rank builds and drops the
// same objects in the same order, as Gloo requires of construction (each claims slots).
// It serves groups of three or more ranks (two ranks exchange their values in one message
// each way instead: ProcessGroupGloo::pair_allreduce), with Gloo's chunked ring, where each
// element is reduced on one rank and then copied to all, so every rank holds identical bits.
// Writes are at most kMaxBytes, within the socket buffer, so the blocking sends of both peers
// cannot wait on each other.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "tinyddp/comm/process_group.h"

namespace gloo {
class Algorithm;
class Context;
}  // namespace gloo

namespace tinyddp::comm::detail {

class SmallAllreduce {
 public:
  static constexpr int64_t kMaxBytes = 64 << 10;
  static constexpr size_t kMaxEntries = 64;

  // `context` must be connected, with its pairs in synchronous mode, and used by nothing else.
  explicit SmallAllreduce(std::shared_ptr<gloo::Context> context);
  ~SmallAllreduce();

  // Whether run() takes an allreduce of `numel` elements of `dtype` (any ReduceOp).
  static bool takes(tensor::DType dtype, int64_t numel);
  // Allreduces the tensors (one dtype, `numel` elements in all, 0 < numel) in place; kAvg
  // divides the sum by the group size. Called from one thread at a time.
  void run(const std::vector<Tensor>& tensors, ReduceOp op, int64_t numel);

 private:
  struct Entry {
    Tensor buffer;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  using Key = std::tuple<int, int, int64_t>;  // dtype, op, element count
  Entry& entry(tensor::DType dtype, ReduceOp op, int64_t numel);

  std::shared_ptr<gloo::Context> context_;
  std::list<std::pair<Key, Entry>> entries_;  // most recently used first
  std::map<Key, std::list<std::pair<Key, Entry>>::iterator> index_;
};

}  // namespace tinyddp::comm::detail
