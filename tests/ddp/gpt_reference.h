// The GPT fixture (fixtures/make_gpt_fixture.py: nanoGPT's model trained 20 steps by PyTorch,
// alone and under DDP) and its runs ("single", "ddp") with the tolerances a run is held to
// against them (tests/ddp/rounding.h says where they come from; in this training, 20 steps of
// Adam, the DDP run's gradient norm at step 10, a spike, moves by 4e-5 when the initial
// weights move by one unit in the last place). Shared by tests/ddp/gpt_test.cc and
// tests/examples/train_gpt_test.cc.
#pragma once

#include <string>

#include "tests/ddp/rounding.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/nn/transformer.h"

namespace tinyddp::testing {

inline const nn::OrderedDict<tensor::Tensor>& gpt_reference() {
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/gpt_reference.safetensors");
  return file.tensors;
}

// The exact run `run` ("single" or "ddp") of the fixture and its float32 spread.
inline ExactRun gpt_run(const std::string& run) { return ExactRun(gpt_reference(), run + "."); }

// The fixture's model: make_gpt_fixture.py's CONFIG.
inline nn::GPTConfig gpt_fixture_config() {
  nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 13;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

// The fixture's initial state dict ("init.<name>"), lm_head.weight included as PyTorch saves it.
inline nn::OrderedDict<tensor::Tensor> gpt_initial_state() {
  nn::OrderedDict<tensor::Tensor> init;
  for (const auto& [name, t] : gpt_reference()) {
    if (name.rfind("init.", 0) == 0) init.insert(name.substr(5), t);
  }
  return init;
}

}  // namespace tinyddp::testing
