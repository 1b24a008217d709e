// Helpers for DDP tests whose ranks are threads of one process: a seeded MLP, the order of a
// RecordingGroup's allreduces by the bucket they reduce, and a model whose heads each rank may
// leave unused.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/comm/comm_test_util.h"
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

// An allreduce of the data `data` as one event string ("allreduce <address>"), so that a
// RecordingGroup's calls can be compared with the buckets they should reduce.
inline std::string pointer_event(const void* data) {
  return "allreduce " + std::to_string(reinterpret_cast<uintptr_t>(data));
}
inline std::string pointer_event(const tensor::Tensor& t) { return pointer_event(t.raw_data_ptr()); }

// The recorded allreduces (as pointer_event) and noted events, in order; other collectives are
// left out.
inline std::vector<std::string> events_of(const RecordingGroup& recording) {
  std::vector<std::string> events;
  for (const RecordingGroup::Call& call : recording.calls()) {
    if (call.noted) {
      events.push_back(call.op);
    } else if (call.op == "allreduce") {
      events.push_back(pointer_event(call.data));
    }
  }
  return events;
}

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
