// Instance normalisation, as torch.nn.InstanceNorm1d/2d: each sample's channels normalised over
// their own positions (F::instance_norm). PyTorch's defaults: no affine weight and bias, no
// running statistics. With track_running_stats, training updates them (each sample's unbiased
// variance, averaged over the batch) and eval normalises with them. An unbatched input ([C, L]
// for 1d, [C, H, W] for 2d) is a batch of one.
#pragma once

#include <string>

#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/nn/options.h"

namespace tinyddp::nn {

class InstanceNorm : public NormBase {
 public:
  // spatial_dims: 1 (InstanceNorm1d) or 2 (InstanceNorm2d).
  InstanceNorm(std::string type_name, int64_t spatial_dims, const InstanceNormOptions& options);
  Tensor forward(const Tensor& input) override;

 protected:
  InstanceNormOptions options() const;
  int64_t spatial_dims;
};

// Input [N, C, L] or [C, L].
class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(const InstanceNormOptions& o) : InstanceNorm("InstanceNorm1d", 1, o) {}
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false)
      : InstanceNorm1d(InstanceNormOptions(num_features)
                           .eps(eps)
                           .momentum(momentum)
                           .affine(affine)
                           .track_running_stats(track_running_stats)) {}
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<InstanceNorm1d>(options()); }
};

// Input [N, C, H, W] or [C, H, W].
class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(const InstanceNormOptions& o) : InstanceNorm("InstanceNorm2d", 2, o) {}
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false)
      : InstanceNorm2d(InstanceNormOptions(num_features)
                           .eps(eps)
                           .momentum(momentum)
                           .affine(affine)
                           .track_running_stats(track_running_stats)) {}
  std::shared_ptr<Module> clone_structure() const override { return std::make_shared<InstanceNorm2d>(options()); }
};

}  // namespace tinyddp::nn
