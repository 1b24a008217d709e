// ProcessGroupNccl in a build without CUDA: the constructor says why there is no NCCL, so no
// instance (and no call to the methods below) can exist.
#include "tinyddp/comm/nccl/process_group_nccl.h"

#include "tinyddp/tensor/cuda.h"

namespace tinyddp::comm {

namespace detail {
class NcclCommunicator {};
}  // namespace detail

namespace {
[[noreturn]] void unavailable() {
  throw Error(fmt::format("ProcessGroupNccl: the NCCL backend needs CUDA: {}", tensor::cuda::unavailable_reason()));
}
}  // namespace

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store>, int rank, int size, ProcessGroupOptions)
    : ProcessGroup(rank, size, "nccl", "ProcessGroupNccl", kNcclTensors) {
  unavailable();
}
ProcessGroupNccl::~ProcessGroupNccl() = default;
void ProcessGroupNccl::abort(const std::string&) { unavailable(); }
void ProcessGroupNccl::set_after_queued_for_testing(std::function<void()>) { unavailable(); }
void ProcessGroupNccl::check_placement(const Tensor&, const char*, const std::string&) const { unavailable(); }
void ProcessGroupNccl::prepare_calls() { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::allreduce_impl(const std::vector<Tensor>&, ReduceOp, Call) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::broadcast_impl(const Tensor&, int, Call) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::allgather_impl(const std::vector<Tensor>&, const Tensor&, Call) {
  unavailable();
}
std::shared_ptr<Work> ProcessGroupNccl::gather_impl(const std::vector<Tensor>&, const Tensor&, int, Call) {
  unavailable();
}
std::shared_ptr<Work> ProcessGroupNccl::scatter_impl(const Tensor&, const std::vector<Tensor>&, int, Call) {
  unavailable();
}
std::shared_ptr<Work> ProcessGroupNccl::reduce_impl(const Tensor&, int, ReduceOp, Call) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter_impl(const Tensor&, const std::vector<Tensor>&, ReduceOp, Call) {
  unavailable();
}
std::shared_ptr<Work> ProcessGroupNccl::barrier_impl(Call) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::send_impl(const Tensor&, int, int, Call) { unavailable(); }
std::shared_ptr<Work> ProcessGroupNccl::recv_impl(const Tensor&, int, int, Call) { unavailable(); }
std::shared_ptr<ProcessGroup> ProcessGroupNccl::create_subgroup(int, int, int) { unavailable(); }

}  // namespace tinyddp::comm
