// torch.distributed's free functions: the collectives of process_group.h called as
// dist.all_reduce(t) is, on the default group (the last init_process_group's) unless a group
// is passed, waiting for the result unless async_op asks for the Work instead:
//
//   comm::init_process_group("gloo");
//   if (comm::get_rank() == 0) ...;
//   comm::all_reduce(t);                          // sum over the ranks, in place
//   comm::all_reduce(t, comm::ReduceOp::kAvg);    // dist.all_reduce(t, op=ReduceOp.AVG)
//
// Without a default group each one throws init.h's "no process group yet" error.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

using GroupPtr = std::shared_ptr<ProcessGroup>;

// This rank in `group` (the default group when null) and the group's size, as
// dist.get_rank() / dist.get_world_size(); get_backend names the backend ("gloo", "nccl").
int get_rank(const GroupPtr& group = nullptr);
int get_world_size(const GroupPtr& group = nullptr);
std::string get_backend(const GroupPtr& group = nullptr);

// Each waits for its Work and returns null, or with async_op returns the Work unwaited.
std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum, const GroupPtr& group = nullptr,
                                 bool async_op = false);
std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const GroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor,
                                 const GroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op = ReduceOp::kSum,
                             const GroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list,
                                     ReduceOp op = ReduceOp::kSum, const GroupPtr& group = nullptr,
                                     bool async_op = false);
std::shared_ptr<Work> barrier(const GroupPtr& group = nullptr, bool async_op = false);

// dist.all_to_all(output_tensor_list, input_tensor_list): every rank passes one tensor per rank
// each way; output_list[i] receives rank i's input_list[this rank]. One scatter per rank (each
// rank the root once), waited.
void all_to_all(const std::vector<Tensor>& output_list, const std::vector<Tensor>& input_list,
                const GroupPtr& group = nullptr);

// dist.all_gather_object(object_list, obj) and dist.broadcast_object_list(object_list, src) for
// JSON values, the C++ side of what PyTorch pickles: object_list must hold one entry per rank
// (all_gather_object) or the same count on every rank (broadcast_object_list, whose entries
// become src's). The typed forms below take any type nlohmann::json converts.
void all_gather_object(std::vector<nlohmann::json>& object_list, const nlohmann::json& obj,
                       const GroupPtr& group = nullptr);
void broadcast_object_list(std::vector<nlohmann::json>& object_list, int src = 0, const GroupPtr& group = nullptr);

template <class T>
void all_gather_object(std::vector<T>& object_list, const T& obj, const GroupPtr& group = nullptr) {
  std::vector<nlohmann::json> values(object_list.size());
  all_gather_object(values, nlohmann::json(obj), group);
  for (size_t i = 0; i < values.size(); ++i) object_list[i] = values[i].get<T>();
}

template <class T>
void broadcast_object_list(std::vector<T>& object_list, int src = 0, const GroupPtr& group = nullptr) {
  std::vector<nlohmann::json> values;
  for (const T& v : object_list) values.emplace_back(v);
  broadcast_object_list(values, src, group);
  for (size_t i = 0; i < values.size(); ++i) object_list[i] = values[i].get<T>();
}

}  // namespace tinyddp::comm
