#include "tinyddp/comm/distributed.h"

#include <cstdint>

#include "tinyddp/comm/init.h"
#include "tinyddp/comm/objects.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::comm {

namespace {
ProcessGroup& pick(const GroupPtr& group) { return group ? *group : *default_group(); }
std::shared_ptr<Work> finish(std::shared_ptr<Work> work, bool async_op) {
  if (async_op) return work;
  work->wait();
  return nullptr;
}
}  // namespace

int get_rank(const GroupPtr& group) { return pick(group).rank(); }
int get_world_size(const GroupPtr& group) { return pick(group).size(); }
std::string get_backend(const GroupPtr& group) { return pick(group).backend(); }

std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op, const GroupPtr& group, bool async_op) {
  return finish(pick(group).allreduce(tensor, op), async_op);
}
std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const GroupPtr& group, bool async_op) {
  return finish(pick(group).broadcast(tensor, src), async_op);
}
std::shared_ptr<Work> all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor, const GroupPtr& group,
                                 bool async_op) {
  return finish(pick(group).allgather(tensor_list, tensor), async_op);
}
std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op, const GroupPtr& group, bool async_op) {
  return finish(pick(group).reduce(tensor, dst, op), async_op);
}
std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list, ReduceOp op,
                                     const GroupPtr& group, bool async_op) {
  return finish(pick(group).reduce_scatter(output, input_list, op), async_op);
}
std::shared_ptr<Work> barrier(const GroupPtr& group, bool async_op) { return finish(pick(group).barrier(), async_op); }

void all_to_all(const std::vector<Tensor>& output_list, const std::vector<Tensor>& input_list, const GroupPtr& group) {
  ProcessGroup& pg = pick(group);
  const auto n = static_cast<size_t>(pg.size());
  TDDP_CHECK(output_list.size() == n && input_list.size() == n,
             "all_to_all: expected one output and one input tensor per rank ({}), got {} and {}", n, output_list.size(),
             input_list.size());
  for (int root = 0; root < pg.size(); ++root) {
    pg.scatter(output_list[static_cast<size_t>(root)], pg.rank() == root ? input_list : std::vector<Tensor>{}, root)
        ->wait();
  }
}

namespace {
// Where the group takes its tensors: the current GPU for NCCL, the CPU for Gloo.
tensor::Device object_device(const ProcessGroup& pg) {
  return pg.backend() == "nccl" ? tensor::Device::cuda(tensor::cuda::current_device()) : tensor::Device::cpu();
}
std::string encode(const nlohmann::json& value) {
  const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(value);
  return std::string(cbor.begin(), cbor.end());
}
nlohmann::json decode(const std::string& bytes) {
  return nlohmann::json::from_cbor(std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
}
}  // namespace

void all_gather_object(std::vector<nlohmann::json>& object_list, const nlohmann::json& obj, const GroupPtr& group) {
  ProcessGroup& pg = pick(group);
  TDDP_CHECK(object_list.size() == static_cast<size_t>(pg.size()),
             "all_gather_object: object_list must have one entry per rank ({}), got {}", pg.size(), object_list.size());
  const std::vector<std::string> all = allgather_bytes(pg, object_device(pg), encode(obj));
  for (size_t r = 0; r < all.size(); ++r) object_list[r] = decode(all[r]);
}

void broadcast_object_list(std::vector<nlohmann::json>& object_list, int src, const GroupPtr& group) {
  ProcessGroup& pg = pick(group);
  TDDP_CHECK(src >= 0 && src < pg.size(), "broadcast_object_list: src {} is not a rank of the group (size {})", src,
             pg.size());
  const std::string bytes = broadcast_bytes(pg, object_device(pg), encode(nlohmann::json(object_list)), src);
  const nlohmann::json values = decode(bytes);
  TDDP_CHECK(values.size() == object_list.size(),
             "broadcast_object_list: rank {} passed {} objects but src {} sent {} (every rank passes as many)",
             pg.rank(), object_list.size(), src, values.size());
  for (size_t i = 0; i < object_list.size(); ++i) object_list[i] = values[i];
}

}  // namespace tinyddp::comm
