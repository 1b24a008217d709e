// Helpers for DDP tests whose ranks are threads of one process: a seeded MLP, a process group
// that records the order of allreduces (by the bucket they reduce), and a model whose heads
// each rank may leave unused.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <string>

#include "tinyddp/comm/process_group.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::testing {

// An MLP with the initial weights of manual_seed(seed). Ranks that are threads share the
// default generator, so seeding and drawing happen under one lock.
inline std::shared_ptr<nn::Module> seeded_mlp(uint64_t seed, std::vector<int64_t> widths) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  tensor::manual_seed(seed);
  return nn::mlp(std::move(widths));
}

// Records the order of allreduce calls (by the data pointer of the tensor) and forwards them.
class PointerRecordingGroup final : public comm::ProcessGroup {
 public:
  explicit PointerRecordingGroup(comm::ProcessGroup& inner)
      : comm::ProcessGroup(inner.rank(), inner.size(), "recording", "PointerRecordingGroup", inner.tensor_rules()), inner_(inner) {}

 protected:
  std::shared_ptr<comm::Work> allreduce_impl(const std::vector<tensor::Tensor>& t, comm::ReduceOp op, comm::Call) override {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back("allreduce " + std::to_string(reinterpret_cast<uintptr_t>(t[0].raw_data_ptr())));
    return inner_.allreduce(t, op);
  }
  std::shared_ptr<comm::Work> broadcast_impl(const tensor::Tensor& t, int root, comm::Call) override { return inner_.broadcast(t, root); }
  std::shared_ptr<comm::Work> allgather_impl(const std::vector<tensor::Tensor>& o, const tensor::Tensor& i, comm::Call) override {
    return inner_.allgather(o, i);
  }
  std::shared_ptr<comm::Work> gather_impl(const std::vector<tensor::Tensor>& o, const tensor::Tensor& i, int r, comm::Call) override {
    return inner_.gather(o, i, r);
  }
  std::shared_ptr<comm::Work> scatter_impl(const tensor::Tensor& o, const std::vector<tensor::Tensor>& i, int r, comm::Call) override {
    return inner_.scatter(o, i, r);
  }
  std::shared_ptr<comm::Work> reduce_impl(const tensor::Tensor& t, int r, comm::ReduceOp op, comm::Call) override {
    return inner_.reduce(t, r, op);
  }
  std::shared_ptr<comm::Work> reduce_scatter_impl(const tensor::Tensor& o, const std::vector<tensor::Tensor>& i, comm::ReduceOp op,
                                                  comm::Call) override {
    return inner_.reduce_scatter(o, i, op);
  }
  std::shared_ptr<comm::Work> barrier_impl(comm::Call) override { return inner_.barrier(); }
  std::shared_ptr<comm::Work> send_impl(const tensor::Tensor& t, int d, int tag, comm::Call) override { return inner_.send(t, d, tag); }
  std::shared_ptr<comm::Work> recv_impl(const tensor::Tensor& t, int s, int tag, comm::Call) override { return inner_.recv(t, s, tag); }
  std::shared_ptr<comm::ProcessGroup> create_subgroup(int, int, int) override { throw Error("PointerRecordingGroup: no subgroups"); }

 public:
  void note(const std::string& event) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(event);
  }
  std::mutex mutex;
  std::vector<std::string> events;

 private:
  comm::ProcessGroup& inner_;
};

inline std::string pointer_event(const tensor::Tensor& t) { return "allreduce " + std::to_string(reinterpret_cast<uintptr_t>(t.raw_data_ptr())); }

// Two heads; `use_a` / `use_b` pick which ones the output uses.
struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> trunk, a, b, never;
  bool use_a = true, use_b = true;
  TwoHeads() : Module("TwoHeads") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(4, 4));
    a = register_module("a", std::make_shared<nn::Linear>(4, 2));
    b = register_module("b", std::make_shared<nn::Linear>(4, 2));
    never = register_module("never", std::make_shared<nn::Linear>(4, 2));
  }
  tensor::Tensor forward(const tensor::Tensor& x) override {
    const tensor::Tensor h = tensor::relu(trunk->forward(x));
    tensor::Tensor out = tensor::zeros({x.size(0), 2});
    if (use_a) out = tensor::add(out, a->forward(h));
    if (use_b) out = tensor::add(out, b->forward(h));
    return out;
  }
};

}  // namespace tinyddp::testing
