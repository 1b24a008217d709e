// torch.nn.Upsample: F::interpolate with its options fixed at construction, e.g.
//   nn::Upsample(nn::UpsampleOptions().scale_factor({2.0, 2.0}).mode("bilinear"))
// for nn.Upsample(scale_factor=2, mode="bilinear"). No parameters.
#pragma once

#include <string>

#include "tinyddp/nn/module.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

class Upsample : public Module {
 public:
  explicit Upsample(UpsampleOptions options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<Upsample>(options); }

  UpsampleOptions options;
};

}  // namespace tinyddp::nn
