// ProcessGroupNccl under --config=cuda: each collective's NCCL calls, launched through the
// NcclCommunicator (communicator.h). See process_group_nccl.h for the protocol.
#include "tinyddp/comm/nccl/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>

#include "tinyddp/comm/nccl/communicator.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::comm {

using detail::nccl_op;
using detail::nccl_type;

// ---- the backend's side of each collective ------------------------------------------------------

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size, "nccl", "ProcessGroupNccl", kNcclTensors) {
  TDDP_CHECK(store != nullptr, "ProcessGroupNccl: the store is null");
  TDDP_CHECK(tensor::cuda::is_available(), "ProcessGroupNccl: needs a GPU: {}", tensor::cuda::unavailable_reason());
  impl_ = std::make_unique<detail::NcclCommunicator>(std::move(store), rank, size, std::move(options));
}

void ProcessGroupNccl::prepare_calls() { impl_->join(); }

ProcessGroupNccl::~ProcessGroupNccl() = default;

void ProcessGroupNccl::abort(const std::string& reason) { impl_->abort(reason); }

void ProcessGroupNccl::set_after_queued_for_testing(std::function<void()> fn) {
  impl_->after_queued_for_testing = std::move(fn);
}

void ProcessGroupNccl::check_placement(const Tensor& t, const char* op, const std::string& what) const {
  impl_->check_device(t, op, what);
}

namespace {
int device_of(const Tensor& t) { return t.device().index; }
size_t count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// Copies between equally sized tensors and consecutive slices of `flat`, on `stream`:
// into flat (to_flat) or out of it.
void copy_slices(const std::vector<Tensor>& parts, const Tensor& flat, bool to_flat, cudaStream_t stream) {
  auto* base = static_cast<char*>(flat.raw_data_ptr());
  for (size_t r = 0; r < parts.size(); ++r) {
    const size_t bytes = parts[r].nbytes();
    char* slice = base + r * bytes;
    void* part = parts[r].raw_data_ptr();
    TDDP_CUDA_CHECK(
        cudaMemcpyAsync(to_flat ? slice : part, to_flat ? part : slice, bytes, cudaMemcpyDeviceToDevice, stream));
  }
}

Tensor flat_like(const Tensor& t, int64_t parts) {
  return tensor::empty({t.numel() * parts}, tensor::TensorOptions().dtype(t.dtype()).device(t.device()));
}

std::vector<Tensor> with(std::vector<Tensor> list, std::initializer_list<Tensor> more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}
}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) {
  const ncclDataType_t type = nccl_type(tensors[0].dtype());
  const ncclRedOp_t red = nccl_op(op);
  return impl_->launch(
      std::move(call.what), device_of(tensors[0]), tensors, false, [&](ncclComm_t comm, cudaStream_t stream) {
        for (const Tensor& t : tensors) {
          TDDP_NCCL_CHECK(ncclAllReduce(t.raw_data_ptr(), t.raw_data_ptr(), count(t), type, red, comm, stream), comm);
        }
      });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast_impl(const Tensor& tensor, int root, Call call) {
  const ncclDataType_t type = nccl_type(tensor.dtype());
  return impl_->launch(
      std::move(call.what), device_of(tensor), {tensor}, false, [&](ncclComm_t comm, cudaStream_t stream) {
        TDDP_NCCL_CHECK(
            ncclBroadcast(tensor.raw_data_ptr(), tensor.raw_data_ptr(), count(tensor), type, root, comm, stream), comm);
      });
}

std::shared_ptr<Work> ProcessGroupNccl::allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                       Call call) {
  const ncclDataType_t type = nccl_type(input.dtype());
  // Gathered into one flat buffer, then each slice copied to its output on the NCCL stream.
  const Tensor flat = flat_like(input, size_);
  return impl_->launch(
      std::move(call.what), device_of(input), with(outputs, {input, flat}), false,
      [&](ncclComm_t comm, cudaStream_t stream) {
        TDDP_NCCL_CHECK(ncclAllGather(input.raw_data_ptr(), flat.raw_data_ptr(), count(input), type, comm, stream),
                        comm);
      },
      nullptr, [&](cudaStream_t stream) { copy_slices(outputs, flat, false, stream); });
}

namespace {
// gather (to_root) and scatter: `mine` is this rank's tensor, `at_root` the root's list (one
// per rank, only on the root). The root exchanges with every other rank and copies its own
// slot locally; every other rank makes one send or recv.
void exchange_with_root(bool to_root, const Tensor& mine, const std::vector<Tensor>& at_root, int root, int rank,
                        int size, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  if (rank != root) {
    if (to_root) {
      TDDP_NCCL_CHECK(ncclSend(mine.raw_data_ptr(), count(mine), type, root, comm, stream), comm);
    } else {
      TDDP_NCCL_CHECK(ncclRecv(mine.raw_data_ptr(), count(mine), type, root, comm, stream), comm);
    }
    return;
  }
  for (int r = 0; r < size; ++r) {
    void* slot = at_root[r].raw_data_ptr();
    if (r == rank) {
      TDDP_CUDA_CHECK(cudaMemcpyAsync(to_root ? slot : mine.raw_data_ptr(), to_root ? mine.raw_data_ptr() : slot,
                                      mine.nbytes(), cudaMemcpyDeviceToDevice, stream));
    } else if (to_root) {
      TDDP_NCCL_CHECK(ncclRecv(slot, count(mine), type, r, comm, stream), comm);
    } else {
      TDDP_NCCL_CHECK(ncclSend(slot, count(mine), type, r, comm, stream), comm);
    }
  }
}
}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                                    Call call) {
  return root_exchange(true, input, outputs, root, std::move(call.what));
}

std::shared_ptr<Work> ProcessGroupNccl::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                                     Call call) {
  return root_exchange(false, output, inputs, root, std::move(call.what));
}

std::shared_ptr<Work> ProcessGroupNccl::root_exchange(bool to_root, const Tensor& mine,
                                                      const std::vector<Tensor>& at_root, int root, std::string what) {
  const ncclDataType_t type = nccl_type(mine.dtype());
  return impl_->launch(std::move(what), device_of(mine), with(at_root, {mine}), false,
                       [&](ncclComm_t comm, cudaStream_t stream) {
                         exchange_with_root(to_root, mine, at_root, root, rank_, size_, type, comm, stream);
                       });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) {
  const ncclDataType_t type = nccl_type(tensor.dtype());
  const ncclRedOp_t red = nccl_op(op);
  // Non-root ranks reduce from their tensor into a scratch buffer: their tensor is unchanged.
  const Tensor target = rank_ == root ? tensor : tensor::empty_like(tensor);
  return impl_->launch(
      std::move(call.what), device_of(tensor), {tensor, target}, false, [&](ncclComm_t comm, cudaStream_t stream) {
        TDDP_NCCL_CHECK(
            ncclReduce(tensor.raw_data_ptr(), target.raw_data_ptr(), count(tensor), type, red, root, comm, stream),
            comm);
      });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                            ReduceOp op, Call call) {
  const ncclDataType_t type = nccl_type(output.dtype());
  const ncclRedOp_t red = nccl_op(op);
  // The inputs copied end to end on the NCCL stream, then reduce-scattered from there.
  const Tensor flat = flat_like(output, size_);
  return impl_->launch(
      std::move(call.what), device_of(output), with(inputs, {output, flat}), false,
      [&](ncclComm_t comm, cudaStream_t stream) {
        TDDP_NCCL_CHECK(
            ncclReduceScatter(flat.raw_data_ptr(), output.raw_data_ptr(), count(output), type, red, comm, stream),
            comm);
      },
      [&](cudaStream_t stream) { copy_slices(inputs, flat, true, stream); });
}

std::shared_ptr<Work> ProcessGroupNccl::barrier_impl(Call call) {
  // An allreduce of one element on this rank's device, which wait() observes on the host.
  // Before any collective has bound the group to a device: cuda:LOCAL_RANK (the launcher's
  // choice), else cuda:(rank mod devices), as PyTorch guesses.
  int device = impl_->bound_device();
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = (local != nullptr && *local != '\0' ? std::atoi(local) : rank_) % tensor::cuda::device_count();
  }
  const Tensor token = tensor::zeros(
      {1}, tensor::TensorOptions().dtype(tensor::kFloat32).device(tensor::Device(tensor::DeviceType::kCUDA, device)));
  return impl_->launch(std::move(call.what), device, {token}, true, [&](ncclComm_t comm, cudaStream_t stream) {
    TDDP_NCCL_CHECK(ncclAllReduce(token.raw_data_ptr(), token.raw_data_ptr(), 1, ncclFloat32, ncclSum, comm, stream),
                    comm);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::send_impl(const Tensor& tensor, int dst, int /*tag*/, Call call) {
  return point_to_point(true, tensor, dst, std::move(call.what));  // NCCL has no tags: pairs match in issue order
}

std::shared_ptr<Work> ProcessGroupNccl::recv_impl(const Tensor& tensor, int src, int /*tag*/, Call call) {
  return point_to_point(false, tensor, src, std::move(call.what));
}

std::shared_ptr<Work> ProcessGroupNccl::point_to_point(bool sending, const Tensor& tensor, int peer, std::string what) {
  const ncclDataType_t type = nccl_type(tensor.dtype());
  return impl_->launch(std::move(what), device_of(tensor), {tensor}, false, [&](ncclComm_t comm, cudaStream_t stream) {
    if (sending) {
      TDDP_NCCL_CHECK(ncclSend(tensor.raw_data_ptr(), count(tensor), type, peer, comm, stream), comm);
    } else {
      TDDP_NCCL_CHECK(ncclRecv(tensor.raw_data_ptr(), count(tensor), type, peer, comm, stream), comm);
    }
  });
}

std::shared_ptr<ProcessGroup> ProcessGroupNccl::create_subgroup(int id, int rank, int size) {
  return std::make_shared<ProcessGroupNccl>(
      std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), impl_->store()), rank, size, impl_->options());
}

}  // namespace tinyddp::comm
