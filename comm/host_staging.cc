// comm/host_staging.h: a ProcessGroup whose *_impl copy their CPU tensors to the device, call
// the wrapped group's public collective on the copies, and return a Work that copies the
// results back when waited on.
#include "tinyddp/comm/host_staging.h"

#include <fmt/format.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::comm {

namespace {

// The wrapped collective's Work; wait() waits for it, then copies each (host, device) pair's
// device tensor into its host tensor, once.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, std::vector<std::pair<Tensor, Tensor>> back)
      : Work(inner->description()), inner_(std::move(inner)), back_(std::move(back)) {}

  void wait(std::optional<Millis> timeout) override {
    try {
      inner_->wait(timeout);
    } catch (...) {
      finish(std::current_exception());
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (copied_) return;
    for (auto& [host, device] : back_) host.copy_(device);
    copied_ = true;
    finish();
  }

 private:
  std::shared_ptr<Work> inner_;
  std::vector<std::pair<Tensor, Tensor>> back_;
  std::mutex mutex_;
  bool copied_ = false;
};

class HostStagedGroup final : public ProcessGroup {
 public:
  HostStagedGroup(std::shared_ptr<ProcessGroup> inner, const tensor::Device& device)
      : ProcessGroup(inner->rank(), inner->size(), inner->backend(), "host-staged " + inner->backend(), TensorRules{}),
        inner_(std::move(inner)), device_(device) {}

 protected:
  std::shared_ptr<Work> allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call) override {
    const std::vector<Tensor> copies = there(tensors);
    return staged(inner_->allreduce(copies, op), pairs(tensors, copies));
  }
  std::shared_ptr<Work> broadcast_impl(const Tensor& tensor, int root, Call) override {
    const Tensor copy = there(tensor);
    return staged(inner_->broadcast(copy, root), {{tensor, copy}});
  }
  std::shared_ptr<Work> allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input, Call) override {
    const std::vector<Tensor> copies = there(outputs);
    return staged(inner_->allgather(copies, there(input)), pairs(outputs, copies));
  }
  std::shared_ptr<Work> gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root, Call) override {
    const std::vector<Tensor> copies = there(outputs);
    return staged(inner_->gather(copies, there(input), root), pairs(outputs, copies));
  }
  std::shared_ptr<Work> scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root, Call) override {
    const Tensor copy = there(output);
    return staged(inner_->scatter(copy, there(inputs), root), {{output, copy}});
  }
  std::shared_ptr<Work> reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call) override {
    const Tensor copy = there(tensor);
    return staged(inner_->reduce(copy, root, op), {{tensor, copy}});
  }
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                            Call) override {
    const Tensor copy = there(output);
    return staged(inner_->reduce_scatter(copy, there(inputs), op), {{output, copy}});
  }
  std::shared_ptr<Work> barrier_impl(Call) override { return staged(inner_->barrier(), {}); }
  std::shared_ptr<Work> send_impl(const Tensor& tensor, int dst, int tag, Call) override {
    return staged(inner_->send(there(tensor), dst, tag), {});
  }
  std::shared_ptr<Work> recv_impl(const Tensor& tensor, int src, int tag, Call) override {
    const Tensor copy = there(tensor);
    return staged(inner_->recv(copy, src, tag), {{tensor, copy}});
  }
  std::shared_ptr<ProcessGroup> create_subgroup(int, int, int) override {
    throw Error(prefix("new_group") +
                fmt::format("a host-staged group makes no subgroups; make them from the {} group", inner_->backend()));
  }

 private:
  // A copy of t of its own on the device.
  Tensor there(const Tensor& t) const {
    Tensor copy = tensor::empty(t.sizes(), tensor::TensorOptions(t.dtype()).device(device_));
    copy.copy_(t);
    return copy;
  }
  std::vector<Tensor> there(const std::vector<Tensor>& list) const {
    std::vector<Tensor> copies;
    copies.reserve(list.size());
    for (const Tensor& t : list) copies.push_back(there(t));
    return copies;
  }
  static std::vector<std::pair<Tensor, Tensor>> pairs(const std::vector<Tensor>& host, const std::vector<Tensor>& dev) {
    std::vector<std::pair<Tensor, Tensor>> out;
    for (size_t i = 0; i < host.size(); ++i) out.emplace_back(host[i], dev[i]);
    return out;
  }
  static std::shared_ptr<Work> staged(std::shared_ptr<Work> inner, std::vector<std::pair<Tensor, Tensor>> back) {
    return std::make_shared<StagedWork>(std::move(inner), std::move(back));
  }

  std::shared_ptr<ProcessGroup> inner_;
  tensor::Device device_;
};

}  // namespace

std::shared_ptr<ProcessGroup> stage_through(std::shared_ptr<ProcessGroup> pg, const tensor::Device& device) {
  TDDP_CHECK(pg != nullptr, "stage_through: no process group");
  return std::make_shared<HostStagedGroup>(std::move(pg), device);
}

std::shared_ptr<ProcessGroup> host_staged(std::shared_ptr<ProcessGroup> pg, const tensor::Device& device) {
  if (pg == nullptr || pg->tensor_rules().cpu) return pg;
  return stage_through(std::move(pg), device);
}

}  // namespace tinyddp::comm
