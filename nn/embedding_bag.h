// Bags of embeddings, as torch.nn.EmbeddingBag and F.embedding_bag: each bag's rows of the
// weight summed, averaged or maxed without the [bag, length, dim] tensor a user would build
// with Embedding. Bags are the rows of a 2-D input, or the runs of a 1-D input that `offsets`
// starts; per_sample_weights scale each row (mode "sum"); padding_idx entries are left out (of
// the mean's count too); an empty bag gives zeros; scale_grad_by_freq divides each id's
// gradient by its count in input (sum and mean). Composed of embedding, index_add and max,
// so each gradient is theirs (max: to each bag's maximum). Also embedding_renorm_, the in-place
// max_norm rescaling Embedding and EmbeddingBag share.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tinyddp/base/arg.h"
#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TINYDDP_ARG(int64_t, num_embeddings);
  TINYDDP_ARG(int64_t, embedding_dim);
  TINYDDP_ARG(std::optional<double>, max_norm);
  TINYDDP_ARG(double, norm_type) = 2.0;
  TINYDDP_ARG(bool, scale_grad_by_freq) = false;  // "sum" and "mean" (as PyTorch's)
  TINYDDP_ARG(std::string, mode) = "mean";        // "sum", "mean" or "max"
  TINYDDP_ARG(bool, sparse) = false;              // true is refused: no sparse gradients
  TINYDDP_ARG(bool, include_last_offset) = false;
  TINYDDP_ARG(std::optional<int64_t>, padding_idx);
};

namespace functional {

// F.embedding_bag's keyword arguments, as libtorch's F::EmbeddingBagFuncOptions.
struct EmbeddingBagFuncOptions {
  TINYDDP_ARG(Tensor, offsets);
  TINYDDP_ARG(std::optional<double>, max_norm);
  TINYDDP_ARG(double, norm_type) = 2.0;
  TINYDDP_ARG(bool, scale_grad_by_freq) = false;
  TINYDDP_ARG(std::string, mode) = "mean";
  TINYDDP_ARG(bool, sparse) = false;
  TINYDDP_ARG(Tensor, per_sample_weights);
  TINYDDP_ARG(bool, include_last_offset) = false;
  TINYDDP_ARG(std::optional<int64_t>, padding_idx);
};

// input: int64 [B, N] (B bags of N) or [L] with int64 `offsets` (each bag's start, the first
// 0; include_last_offset: the last one is L and ends the last bag). Returns [bags, dim].
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& options = {});

// As torch.embedding_renorm_: the rows of `weight` that `input` names rescaled in place (no
// grad) so that each one's norm_type-norm is at most max_norm. Returns weight.
Tensor embedding_renorm_(const Tensor& weight, const Tensor& input, double max_norm, double norm_type);

}  // namespace functional

// torch.nn.EmbeddingBag: weight [num_embeddings, embedding_dim] ~ N(0, 1) (its padding_idx
// row zeros), as PyTorch's after the same manual_seed.
class EmbeddingBag : public Module {
 public:
  std::shared_ptr<Module> clone_structure() const override;
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBag(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  explicit EmbeddingBag(const EmbeddingBagOptions& options);
  // As torch.nn.EmbeddingBag.from_pretrained: the weight is `embeddings` itself, trained unless
  // `freeze`; options' sizes are taken from it.
  static std::shared_ptr<EmbeddingBag> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                       std::string mode = "mean");
  Tensor forward(const Tensor& input) override { return forward(input, Tensor(), Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights = Tensor());
  std::string extra_repr() const override;

  Tensor weight;
  EmbeddingBagOptions options;
};

}  // namespace tinyddp::nn
