// Feeding a training loop, as torch.utils.data does: a Dataset (size and get(i)), TensorDataset,
// samplers that order one epoch's indices (sequential, random, and DistributedSampler, which
// gives each rank its own share), default_collate, and the DataLoader that batches them, with
// optional background workers that prefetch a bounded number of batches.
//
//   auto sampler = std::make_shared<nn::DistributedSampler>(*dataset);  // the default group's share
//   nn::DataLoader loader(dataset, nn::DataLoaderOptions(32).sampler(sampler).num_workers(2));
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler->set_epoch(epoch);                      // a new order, the same on every rank
//     for (const nn::Example& batch : loader) { ... batch[0] (inputs), batch[1] (targets) ... }
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tinyddp/tensor/random.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

using tensor::Tensor;

// One sample, or one batch of them: a tensor per field (inputs, targets, ...), in the order
// the dataset gives them, as the tuples of PyTorch's datasets.
using Example = std::vector<Tensor>;

// A map-style dataset. get() may be called from DataLoader's worker threads at the same time:
// it must not change shared state without a lock.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Samples are slices along the first dimension of the given tensors (torch's TensorDataset):
// get(i) = {tensors[0][i], tensors[1][i], ...}, views of the tensors' storage.
class TensorDataset : public Dataset {
 public:
  // Every tensor must be defined, have at least one dimension and the same size(0).
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override;
  Example get(int64_t index) const override;
  // default_collate of get(i) for each of `indices`, as one gather per tensor (the DataLoader's
  // path for a TensorDataset with the default collate, as PyTorch's fetcher takes a dataset's
  // __getitems__): the same batch. Null when a tensor is not contiguous (its samples are then
  // stacked one by one).
  std::optional<Example> get_batch(const std::vector<int64_t>& indices) const;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
};

// Stacks the samples field by field along a new first dimension: field f of the batch has
// shape [samples.size(), ...shape of field f]. Every sample must have the same fields with
// the same shapes and dtypes (the error names the first one that differs).
Example default_collate(const std::vector<Example>& samples);
using CollateFn = std::function<Example(const std::vector<Example>& samples)>;

// Orders the indices of one epoch. indices() is called once at the start of each epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices() = 0;
  // How many indices each epoch has.
  virtual int64_t size() const = 0;
};

// 0, 1, ..., n - 1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A random permutation of 0..n-1 each epoch (torch.randperm). With a generator, each epoch
// draws from it (the same orders as PyTorch's RandomSampler with that generator); without one, each epoch seeds a fresh
// generator from the default generator (as PyTorch's RandomSampler does), so tensor::manual_seed fixes the orders.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, std::shared_ptr<tensor::Generator> generator = nullptr);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  std::shared_ptr<tensor::Generator> generator_;
};

// This rank's share of a dataset of `dataset_size` samples (torch's DistributedSampler, with
// its defaults and its numbers). Each epoch the whole index list is ordered the same way on
// every rank (randperm seeded with seed + epoch, or 0..n-1 without shuffle), then made
// divisible by num_replicas: without drop_last by repeating indices from its start, with
// drop_last by cutting the tail. Rank r takes positions r, r + num_replicas, ... of it, so
// the ranks' lists are disjoint (up to the padding) and together cover the dataset.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  // As torch's DistributedSampler(dataset): num_replicas and rank, when not given, are the
  // default process group's (comm::init_process_group; an error before it).
  explicit DistributedSampler(const Dataset& dataset, std::optional<int> num_replicas = std::nullopt,
                              std::optional<int> rank = std::nullopt, bool shuffle = true, uint64_t seed = 0,
                              bool drop_last = false);
  std::vector<int64_t> indices() override;
  // num_samples: the length of every rank's list.
  int64_t size() const override { return num_samples_; }
  // Call at the start of each epoch: the order depends on seed + epoch, so each epoch differs
  // and the same epoch repeats. Without it every epoch has epoch 0's order.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t total_size() const { return total_size_; }

 private:
  int64_t dataset_size_;
  int num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_, total_size_;
  int64_t epoch_ = 0;
};

// DataLoader's settings with PyTorch's names and defaults, as chained setters:
// DataLoaderOptions(64).shuffle(true).drop_last(true).num_workers(2).
struct DataLoaderOptions {
  explicit DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  DataLoaderOptions& batch_size(int64_t v) {
    batch_size_ = v;
    return *this;
  }
  // A new random order each epoch (a RandomSampler; exclusive with sampler()).
  DataLoaderOptions& shuffle(bool v) {
    shuffle_ = v;
    return *this;
  }
  // The seed of the loader's own generator (PyTorch's generator=torch.Generator().manual_seed(
  // seed)); none: the default generator.
  DataLoaderOptions& seed(uint64_t v) {
    seed_ = v;
    return *this;
  }
  // Where the indices come from (a DistributedSampler, typically); none: sequential or shuffle.
  DataLoaderOptions& sampler(std::shared_ptr<Sampler> v) {
    sampler_ = std::move(v);
    return *this;
  }
  // Drop the last batch of an epoch when it is smaller than batch_size.
  DataLoaderOptions& drop_last(bool v) {
    drop_last_ = v;
    return *this;
  }
  // Background threads that load batches ahead of the training thread; 0: load in the loop.
  DataLoaderOptions& num_workers(int v) {
    num_workers_ = v;
    return *this;
  }
  // With workers: at most num_workers * prefetch_factor batches loaded ahead.
  DataLoaderOptions& prefetch_factor(int v) {
    prefetch_factor_ = v;
    return *this;
  }
  // Batches in page-locked host memory, from which copies to a GPU are asynchronous (when a
  // GPU is available; otherwise there is nothing to pin for and batches stay as they are).
  DataLoaderOptions& pin_memory(bool v) {
    pin_memory_ = v;
    return *this;
  }
  // Builds a batch from its samples; none: default_collate.
  DataLoaderOptions& collate(CollateFn v) {
    collate_ = std::move(v);
    return *this;
  }
  // How long the training thread waits for one batch before failing (0: no limit).
  DataLoaderOptions& timeout(std::chrono::milliseconds v) {
    timeout_ = v;
    return *this;
  }

  int64_t batch_size() const { return batch_size_; }
  bool shuffle() const { return shuffle_; }
  const std::optional<uint64_t>& seed() const { return seed_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  bool drop_last() const { return drop_last_; }
  int num_workers() const { return num_workers_; }
  int prefetch_factor() const { return prefetch_factor_; }
  bool pin_memory() const { return pin_memory_; }
  const CollateFn& collate() const { return collate_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  int64_t batch_size_;
  bool shuffle_ = false;
  std::optional<uint64_t> seed_;
  std::shared_ptr<Sampler> sampler_;
  bool drop_last_ = false;
  int num_workers_ = 0;
  int prefetch_factor_ = 2;
  bool pin_memory_ = false;
  CollateFn collate_;
  std::chrono::milliseconds timeout_{0};
};

class DataLoaderEpoch;

// Batches of a dataset, one epoch per range-for loop (PyTorch's DataLoader, whose numbers it
// keeps: each epoch first draws 64 bits from the loader's generator, as PyTorch draws its base
// seed, then, with shuffle, a RandomSampler order from the same generator):
//   for (const nn::Example& batch : loader) { ... }
// Batches come in the sampler's order whatever the workers' timing. An error in Dataset::get
// or the collate step (in a worker or not) is thrown from the loop naming the batch, and the
// epoch's workers stop; leaving the loop early stops them too.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = DataLoaderOptions());

  // Batches per epoch (len(loader)).
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const Example*;
    using reference = const Example&;

    Iterator() = default;
    const Example& operator*() const;
    const Example* operator->() const { return &**this; }
    Iterator& operator++();
    // Only "reached the end" is compared: iterators of one epoch are single-pass.
    bool operator==(const Iterator& other) const { return done() == other.done(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<DataLoaderEpoch> epoch);
    bool done() const;
    std::shared_ptr<DataLoaderEpoch> epoch_;
  };

  // Starts an epoch: asks the sampler for its order and (with workers) starts loading.
  Iterator begin();
  Iterator end() const { return Iterator(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<tensor::Generator> generator_;  // with a seed; else the default generator
  std::shared_ptr<Sampler> sampler_;
};

}  // namespace tinyddp::nn
