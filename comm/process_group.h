// ProcessGroup: a set of ranks and the collectives between them, each returning a Work handle
// at once (the caller is not blocked until it calls wait()). Backends (Gloo for CPU tensors,
// and CUDA tensors staged through the host; NCCL for CUDA tensors) implement the interface;
// DDP sees only this header.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"
#include "tensor/tensor.h"

namespace tinyddp::comm {

using tensor::Tensor;

enum class ReduceOp { kSum, kProduct, kMin, kMax, kAvg };
const char* reduce_op_name(ReduceOp op);

// The handle of one asynchronous operation.
class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work() = default;

  bool is_completed() const;
  // True when completed without an error.
  bool is_success() const;
  // The failure, or null (also null while still running).
  std::exception_ptr exception() const;
  // Blocks until the operation finishes and rethrows its error. With a timeout, throws
  // TimeoutError if it has not finished by then (the operation itself is not cancelled).
  // Backends on GPUs override the untimed form so that it does not block the host: NCCL's
  // makes the device's compute stream wait for the collective instead (see
  // process_group_nccl.h).
  virtual void wait(std::optional<Millis> timeout = std::nullopt);
  // What the operation is, for messages: "allreduce (rank 1 of 4, 1000 x float32, sum)".
  const std::string& description() const { return description_; }

  // For backends: marks the operation finished, with its error if any.
  void finish(std::exception_ptr error = nullptr);
  // When the host saw it finish (for timelines), or nothing while it is still running (an
  // NCCL collective whose untimed wait() returned may still be running on the GPU).
  std::optional<std::chrono::steady_clock::time_point> finished_at() const;

 private:
  std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point finished_at_{};
};

struct ProcessGroupOptions {
  // Bound for connecting and for every collective; past it the operation fails on every rank.
  Millis timeout{60000};
  // The address this rank's Gloo transport binds to (other ranks connect to it).
  std::string bind_address = "127.0.0.1";
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  // Every tensor becomes the reduction over ranks of that tensor; a list is reduced as one
  // (coalesced) buffer. kAvg divides the sum by size() (floating point only).
  virtual std::shared_ptr<Work> allreduce(const std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::kSum) = 0;
  std::shared_ptr<Work> allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) {
    return allreduce(std::vector<Tensor>{tensor}, op);
  }
  // `tensor` takes root's value on every rank.
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int root = 0) = 0;
  // outputs[r] receives rank r's input (outputs.size() == size(), each shaped like input).
  virtual std::shared_ptr<Work> allgather(const std::vector<Tensor>& outputs, const Tensor& input) = 0;
  // As allgather, but only `root` receives (other ranks pass no outputs).
  virtual std::shared_ptr<Work> gather(const std::vector<Tensor>& outputs, const Tensor& input, int root = 0) = 0;
  // Rank r's output receives root's inputs[r] (only root passes inputs).
  virtual std::shared_ptr<Work> scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root = 0) = 0;
  // Only root's tensor receives the reduction (other ranks' tensors are left as they are).
  virtual std::shared_ptr<Work> reduce(const Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::kSum) = 0;
  // output on rank r = reduction over ranks of inputs[r].
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                               ReduceOp op = ReduceOp::kSum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  // Point to point; `tag` pairs a send with its recv.
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& tensor, int src, int tag = 0) = 0;

  // A group of the given ranks of this group (sorted, unique). Every rank of this group must
  // call it with the same list, in the same order as other new_group calls; ranks outside
  // the list get nullptr.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

 protected:
  int rank_;
  int size_;
};

}  // namespace tinyddp::comm
