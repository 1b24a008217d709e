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

namespace tinyddp::testing {

inline const nn::OrderedDict<tensor::Tensor>& gpt_reference() {
  static const nn::SafetensorsFile file = nn::load_safetensors("tests/ddp/fixtures/gpt_reference.safetensors");
  return file.tensors;
}

// The exact run `run` ("single" or "ddp") of the fixture and its float32 spread.
inline ExactRun gpt_run(const std::string& run) { return ExactRun(gpt_reference(), run + "."); }

}  // namespace tinyddp::testing
