// ProcessGroupNccl in a build without CUDA: the constructor says why there is no NCCL, so no
// instance (and no call to the methods below) can exist.
#include "comm/process_group_nccl.h"

#include "tensor/cuda.h"

namespace tinyddp::comm {

class ProcessGroupNccl::Impl {};

namespace {
[[noreturn]] void unavailable() {
  throw Error(fmt::format("ProcessGroupNccl: the NCCL backend needs CUDA: {}", tensor::cuda::unavailable_reason()));
}
}  // namespace

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store>, int rank, int size, ProcessGroupOptions) : ProcessGroup(rank, size) {
  unavailable();
}
ProcessGroupNccl::~ProcessGroupNccl() = default;
void ProcessGroupNccl::abort(const std::string&) { unavailable(); }
void ProcessGroupNccl::set_after_queued_for_testing(std::function<void()>) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::allreduce(const std::vector<Tensor>&, ReduceOp) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::broadcast(const Tensor&, int) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::allgather(const std::vector<Tensor>&, const Tensor&) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::gather(const std::vector<Tensor>&, const Tensor&, int) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::scatter(const Tensor&, const std::vector<Tensor>&, int) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::reduce(const Tensor&, int, ReduceOp) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(const Tensor&, const std::vector<Tensor>&, ReduceOp) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::barrier() { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::send(const Tensor&, int, int) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::recv(const Tensor&, int, int) { unavailable(); }
std::shared_ptr<ProcessGroup> ProcessGroupNccl::new_group(const std::vector<int>&) { unavailable(); }

}  // namespace tinyddp::comm
