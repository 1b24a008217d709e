// AccumulateGrad: the node at every leaf that requires grad. It adds the incoming gradient
// into the leaf's .grad and then (through the engine) runs its post-hooks. DDP registers one
// post-hook per parameter here: the moment that parameter's gradient is ready.
#pragma once

#include <memory>

#include "tinyddp/autograd/node.h"

namespace tinyddp::autograd {

class AccumulateGrad final : public Node {
 public:
  // Runs as soon as it is ready (the highest sequence number), so gradients land early.
  static constexpr uint64_t kSequenceNr = UINT64_MAX;

  explicit AccumulateGrad(const Tensor& variable);

  // .grad undefined: takes the incoming buffer when nothing else holds it and its layout is
  // plain, else a contiguous copy. .grad defined: adds in place, so a .grad that aliases
  // other memory (a DDP bucket view) keeps aliasing it. Returns no gradients (no next edges).
  std::vector<Tensor> apply(const Tensor& grad_output) override;

  // The leaf, or an undefined tensor when it no longer exists.
  Tensor variable() const;

 private:
  std::weak_ptr<tensor::TensorImpl> variable_;  // weak: the leaf owns this node
};

}  // namespace tinyddp::autograd
