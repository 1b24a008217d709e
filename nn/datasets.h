// torch.utils.data's dataset combinators: Subset (some of a dataset's samples, by index),
// ConcatDataset (datasets one after another) and random_split (a dataset cut into random
// disjoint Subsets of given lengths or fractions, as PyTorch cuts it from the same generator).
#pragma once

#include <memory>
#include <vector>

#include "tinyddp/nn/data.h"

namespace tinyddp::nn {

class Subset : public Dataset {
 public:
  // Every index must be in [0, dataset->size()).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);
  int64_t size() const override { return cumulative_sizes_.empty() ? 0 : cumulative_sizes_.back(); }
  // A negative index counts from the end, as in Python.
  Example get(int64_t index) const override;
  const std::vector<int64_t>& cumulative_sizes() const { return cumulative_sizes_; }

 private:
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<int64_t> cumulative_sizes_;
};

// As torch.utils.data.random_split: a permutation of the indices (randperm from `generator`,
// else the default generator) cut into consecutive pieces of `lengths`, which sum to the
// dataset's size, or are fractions summing to 1 (then floor(n * fraction) each, the remainder
// added one by one from the first).
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<double>& lengths,
                                                  tensor::Generator* generator = nullptr);

}  // namespace tinyddp::nn
