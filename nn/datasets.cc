#include "tinyddp/nn/datasets.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tinyddp/tensor/shape.h"

namespace tinyddp::nn {

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  TDDP_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (int64_t i : indices_) TDDP_CHECK(i >= 0 && i < n, "Subset: index {} is out of range for a dataset of {}", i, n);
}

Example Subset::get(int64_t index) const {
  TDDP_CHECK(index >= 0 && index < size(), "Subset: index {} is out of range for a subset of {}", index, size());
  return dataset_->get(indices_[static_cast<size_t>(index)]);
}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets) : datasets_(std::move(datasets)) {
  TDDP_CHECK(!datasets_.empty(), "ConcatDataset: datasets should not be an empty iterable");
  int64_t total = 0;
  for (const auto& d : datasets_) {
    TDDP_CHECK(d != nullptr, "ConcatDataset: a dataset is null");
    total += d->size();
    cumulative_sizes_.push_back(total);
  }
}

Example ConcatDataset::get(int64_t index) const {
  const int64_t n = size();
  TDDP_CHECK(index >= -n && index < n, "ConcatDataset: index {} is out of range for a dataset of {}", index, n);
  if (index < 0) index += n;
  const auto it = std::upper_bound(cumulative_sizes_.begin(), cumulative_sizes_.end(), index);
  const size_t which = static_cast<size_t>(it - cumulative_sizes_.begin());
  const int64_t start = which == 0 ? 0 : cumulative_sizes_[which - 1];
  return datasets_[which]->get(index - start);
}

namespace {
std::vector<int64_t> split_lengths(const std::vector<double>& lengths, int64_t n) {
  const double total = std::accumulate(lengths.begin(), lengths.end(), 0.0);
  std::vector<int64_t> out;
  if (std::abs(total - 1.0) < 1e-9 && total != static_cast<double>(n)) {  // fractions
    for (double f : lengths) {
      TDDP_CHECK(f >= 0 && f <= 1, "random_split: fraction {} is not between 0 and 1", f);
      out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(n) * f)));
    }
    const int64_t remainder = n - std::accumulate(out.begin(), out.end(), int64_t{0});
    for (int64_t i = 0; i < remainder; ++i) ++out[static_cast<size_t>(i) % out.size()];
    return out;
  }
  for (double l : lengths) {
    TDDP_CHECK(l >= 0 && l == std::trunc(l), "random_split: lengths must be non-negative integers, got {}", l);
    out.push_back(static_cast<int64_t>(l));
  }
  TDDP_CHECK(std::accumulate(out.begin(), out.end(), int64_t{0}) == n,
             "random_split: Sum of input lengths does not equal the length of the input dataset! ({})", n);
  return out;
}
}  // namespace

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<double>& lengths, tensor::Generator* generator) {
  TDDP_CHECK(dataset != nullptr, "random_split: the dataset is null");
  TDDP_CHECK(!lengths.empty(), "random_split: expected at least one length");
  const int64_t n = dataset->size();
  const std::vector<int64_t> sizes = split_lengths(lengths, n);
  const std::vector<int64_t> order = tensor::randperm(n, generator).to_vector<int64_t>();
  std::vector<std::shared_ptr<Subset>> out;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    out.push_back(
        std::make_shared<Subset>(dataset, std::vector<int64_t>(order.begin() + offset, order.begin() + offset + size)));
    offset += size;
  }
  return out;
}

}  // namespace tinyddp::nn
