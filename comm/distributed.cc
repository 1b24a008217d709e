#include "tinyddp/comm/distributed.h"

#include "tinyddp/comm/init.h"

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

}  // namespace tinyddp::comm
