// The records of a DDP fixture made with fixtures/ddp_records.py: the JSON file, and one step's
// gradients or weights (name -> values, null for "no gradient") compared with a model's.
#pragma once

#include <cmath>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::testing {

inline nlohmann::json read_ddp_fixture(const std::string& name) {
  const std::string path = "tests/ddp/fixtures/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

// Every named tensor of `got` within `tolerance` of `want`; an undefined tensor where `want`
// has null, and only there.
inline void compare_records(const nlohmann::json& want, const nn::OrderedDict<tensor::Tensor>& got,
                            const std::string& where, Expectations& e, double tolerance = 1e-6) {
  for (const auto& [name, t] : got) {
    if (want.at(name).is_null()) {
      e.expect(!t.defined(), fmt::format("{}: {} is defined, PyTorch's is None", where, name));
      continue;
    }
    if (!t.defined()) {
      e.expect(false, fmt::format("{}: {} is undefined, PyTorch has one", where, name));
      continue;
    }
    const std::vector<float> values = t.detach().contiguous().to_vector<float>();
    const std::vector<float> expected = want.at(name).get<std::vector<float>>();
    for (size_t i = 0; i < values.size(); ++i) {
      e.expect(std::fabs(values[i] - expected[i]) < tolerance,
               fmt::format("{}: {}[{}] = {}, PyTorch {}", where, name, i, values[i], expected[i]));
    }
  }
}

// The model's .grad of every parameter, by name (undefined where it has none).
inline nn::OrderedDict<tensor::Tensor> grads_of(const nn::Module& model) {
  nn::OrderedDict<tensor::Tensor> grads;
  for (const auto& [name, p] : model.named_parameters()) grads.insert(name, p.grad());
  return grads;
}

// The fixture's initial state for `rank` copied into `model`.
inline void load_initial(nn::Module& model, const nlohmann::json& initial) {
  tensor::NoGradGuard no_grad;
  for (const auto& [name, t] : model.state_dict()) {
    t.copy_(tensor::from_vector(initial.at(name).get<std::vector<float>>(), t.sizes()));
  }
}

}  // namespace tinyddp::testing
