// TensorDataset, default_collate (samples stacked into a batch, on the intra-op threads) and
// the DataLoader's iteration with its worker threads (data.h).
#include "tinyddp/nn/data.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <typeinfo>

#include <fmt/format.h>

#include "tinyddp/base/distributed_info.h"
#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/factory.h"
#include "tinyddp/tensor/grad_mode.h"
#include "tinyddp/tensor/ops.h"
#include "tinyddp/tensor/parallel.h"
#include "tinyddp/tensor/shape.h"

namespace tinyddp::nn {

// ---- TensorDataset ---------------------------------------------------------------------------

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  TDDP_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TDDP_CHECK(tensors_[i].defined(), "TensorDataset: tensor {} is undefined", i);
    TDDP_CHECK(tensors_[i].dim() >= 1, "TensorDataset: tensor {} is 0-d; samples are slices along dimension 0", i);
    TDDP_CHECK(tensors_[i].size(0) == tensors_[0].size(0),
               "TensorDataset: size mismatch between tensors: tensor 0 has {} samples, tensor {} has {} (shape {})",
               tensors_[0].size(0), i, tensors_[i].size(0), tensor::format_shape(tensors_[i].sizes()));
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Example TensorDataset::get(int64_t index) const {
  TDDP_CHECK(index >= 0 && index < size(), "TensorDataset: index {} is out of range for {} samples", index, size());
  Example sample;
  sample.reserve(tensors_.size());
  for (const Tensor& t : tensors_) sample.push_back(t.select(0, index));
  return sample;
}

std::optional<Example> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (const Tensor& t : tensors_) {
    if (!t.is_contiguous()) return std::nullopt;
  }
  for (int64_t index : indices) {
    TDDP_CHECK(index >= 0 && index < size(), "TensorDataset: index {} is out of range for {} samples", index, size());
  }
  tensor::NoGradGuard no_grad;  // as default_collate
  const Tensor rows = tensor::from_vector(indices);
  Example batch;
  batch.reserve(tensors_.size());
  for (const Tensor& t : tensors_) batch.push_back(tensor::index_select(t, 0, t.is_cpu() ? rows : rows.to(t.device())));
  return batch;
}

// ---- collate ---------------------------------------------------------------------------------

Example default_collate(const std::vector<Example>& samples) {
  TDDP_CHECK(!samples.empty(), "default_collate: no samples");
  const Example& first = samples.front();
  for (size_t i = 1; i < samples.size(); ++i) {
    TDDP_CHECK(samples[i].size() == first.size(), "default_collate: sample {} has {} fields, sample 0 has {}", i,
               samples[i].size(), first.size());
  }
  tensor::NoGradGuard no_grad;
  Example batch;
  batch.reserve(first.size());
  for (size_t f = 0; f < first.size(); ++f) {
    const Tensor& model = first[f];
    TDDP_CHECK(model.defined(), "default_collate: field {} of sample 0 is undefined", f);
    tensor::Shape sizes{static_cast<int64_t>(samples.size())};
    for (int64_t s : model.sizes()) sizes.push_back(s);
    for (size_t i = 0; i < samples.size(); ++i) {
      const Tensor& t = samples[i][f];
      TDDP_CHECK(
          t.defined() && t.sizes() == model.sizes() && t.dtype() == model.dtype() && t.device() == model.device(),
          "default_collate: field {} of sample {} is {} {} on {}, sample 0's is {} {} on {}: every sample must "
          "match to be stacked",
          f, i, t.defined() ? tensor::format_shape(t.sizes()) : "undefined",
          t.defined() ? tensor::dtype_name(t.dtype()) : "", t.defined() ? t.device().str() : "-",
          tensor::format_shape(model.sizes()), tensor::dtype_name(model.dtype()), model.device().str());
    }
    Tensor out = tensor::empty(sizes, tensor::TensorOptions(model.dtype()).device(model.device()));
    // CPU samples are copied on the intra-op threads, each into its own row of the batch.
    const int64_t n = static_cast<int64_t>(samples.size());
    const int64_t grain = model.is_cpu() ? std::max<int64_t>(1, 32768 / std::max<int64_t>(model.numel(), 1)) : n;
    tensor::parallel_for(0, n, grain, [&](int64_t from, int64_t to) {
      tensor::NoGradGuard chunk_no_grad;  // grad mode is per thread
      for (int64_t i = from; i < to; ++i) out.select(0, i).copy_(samples[static_cast<size_t>(i)][f]);
    });
    batch.push_back(std::move(out));
  }
  return batch;
}

namespace {

// 64 random bits from `g` (two 32-bit draws), under its lock.
uint64_t draw64(tensor::Generator& g) {
  const std::lock_guard<std::mutex> lock(g.mutex());
  return g.random64();
}

}  // namespace

// ---- samplers --------------------------------------------------------------------------------

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TDDP_CHECK(n >= 0, "SequentialSampler: n must be non-negative, got {}", n);
}

std::vector<int64_t> SequentialSampler::indices() {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

RandomSampler::RandomSampler(int64_t n, std::shared_ptr<tensor::Generator> generator)
    : n_(n), generator_(std::move(generator)) {
  TDDP_CHECK(n >= 0, "RandomSampler: n must be non-negative, got {}", n);
}

std::vector<int64_t> RandomSampler::indices() {
  if (generator_) {
    std::vector<int64_t> order = tensor::randperm(n_, generator_.get()).to_vector<int64_t>();
    // PyTorch's sampler draws one more permutation per epoch and keeps none of it (the
    // remainder of num_samples % n); skipping its n - 1 draws keeps the next epoch equal.
    const std::lock_guard<std::mutex> lock(generator_->mutex());
    for (int64_t i = 0; i + 1 < n_; ++i) generator_->random();
    return order;
  }
  // A fresh generator per epoch, seeded with a non-negative int64 drawn from the default one.
  tensor::Generator epoch(draw64(tensor::default_generator()) & ~(uint64_t{1} << 63));
  return tensor::randperm(n_, &epoch).to_vector<int64_t>();
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  TDDP_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be non-negative, got {}", dataset_size);
  TDDP_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be at least 1, got {}", num_replicas);
  TDDP_CHECK(rank >= 0 && rank < num_replicas,
             "DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]", rank, num_replicas - 1);
  const int64_t replicas = num_replicas;
  // drop_last cuts the tail to a multiple of num_replicas; otherwise padding fills it up.
  num_samples_ = drop_last ? dataset_size / replicas : (dataset_size + replicas - 1) / replicas;
  total_size_ = num_samples_ * replicas;
}

namespace {
int from_default_group(std::optional<int> given, bool want_rank) {
  if (given) return *given;
  const std::optional<base::DistributedInfo> info = base::distributed_info();
  TDDP_CHECK(info.has_value(),
             "DistributedSampler: Default process group has not been initialized, please make sure to call "
             "init_process_group (or pass num_replicas and rank)");
  return want_rank ? info->rank : info->world_size;
}
}  // namespace

DistributedSampler::DistributedSampler(const Dataset& dataset, std::optional<int> num_replicas, std::optional<int> rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : DistributedSampler(dataset.size(), from_default_group(num_replicas, false), from_default_group(rank, true),
                         shuffle, seed, drop_last) {}

std::vector<int64_t> DistributedSampler::indices() {
  std::vector<int64_t> order;
  if (shuffle_) {
    tensor::Generator generator(seed_ + static_cast<uint64_t>(epoch_));  // the same on every rank
    order = tensor::randperm(dataset_size_, &generator).to_vector<int64_t>();
  } else {
    order = SequentialSampler(dataset_size_).indices();
  }
  if (drop_last_) {
    order.resize(static_cast<size_t>(total_size_));
  } else if (!order.empty()) {
    // Padding: indices repeated from the start until the list is total_size long.
    const size_t original = order.size();
    for (size_t i = 0; order.size() < static_cast<size_t>(total_size_); ++i) order.push_back(order[i % original]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < order.size(); i += static_cast<size_t>(num_replicas_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

// ---- DataLoader ------------------------------------------------------------------------------

// One epoch: its batches' indices and, with workers, the threads loading them. The training
// thread takes batch `next_` when it is ready; worker w loads the lowest batch nobody has
// claimed, at most `capacity` batches ahead of the training thread.
class DataLoaderEpoch {
 public:
  DataLoaderEpoch(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
                  std::vector<std::vector<int64_t>> batches)
      : shared_(std::make_shared<Shared>()) {
    shared_->dataset = std::move(dataset);
    shared_->options = options;
    shared_->batches = std::move(batches);
    const int workers = options.num_workers();
    shared_->capacity = static_cast<int64_t>(workers) * options.prefetch_factor();
    for (int w = 0; w < workers; ++w) {
      // Each worker holds the shared state, so a worker still inside Dataset::get when the epoch
      // is abandoned (after a timeout) can finish on its own, detached.
      shared_->running += 1;
      threads_.emplace_back([shared = shared_, w] { work(*shared, w); });
    }
  }

  ~DataLoaderEpoch() {
    {
      const std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->stop = true;
    }
    shared_->changed.notify_all();
    // Workers notice `stop` between batches. One stuck inside Dataset::get is waited for as
    // long as the loader's timeout (forever without one), then left to finish detached.
    bool all_stopped = true;
    {
      std::unique_lock<std::mutex> lock(shared_->mutex);
      const auto stopped = [&] { return shared_->running == 0; };
      if (shared_->options.timeout().count() > 0) {
        all_stopped = shared_->changed.wait_for(lock, shared_->options.timeout(), stopped);
      } else {
        shared_->changed.wait(lock, stopped);
      }
    }
    for (std::thread& t : threads_) {
      if (all_stopped) {
        t.join();
      } else {
        t.detach();
      }
    }
  }

  DataLoaderEpoch(const DataLoaderEpoch&) = delete;
  DataLoaderEpoch& operator=(const DataLoaderEpoch&) = delete;

  bool done() const { return done_; }
  const Example& current() const {
    TDDP_CHECK(!done_, "DataLoader: the iterator is past the last batch");
    return current_;
  }

  // Moves to the next batch (or to the end), rethrowing a worker's error.
  void advance() {
    Shared& s = *shared_;
    const int64_t index = next_;
    if (index >= static_cast<int64_t>(s.batches.size())) {
      done_ = true;
      current_.clear();
      return;
    }
    ++next_;
    if (threads_.empty()) {
      current_ = load(s, index, -1);
      return;
    }
    std::unique_lock<std::mutex> lock(s.mutex);
    s.consumed = index;  // lets workers run up to `capacity` batches past this one
    s.changed.notify_all();
    const auto ready = [&] { return s.results.count(index) > 0; };
    if (s.options.timeout().count() > 0) {
      TDDP_CHECK(s.changed.wait_for(lock, s.options.timeout(), ready),
                 "DataLoader: batch {} was not ready after the timeout of {} ms (a worker stuck in Dataset::get?)",
                 index, s.options.timeout().count());
    } else {
      s.changed.wait(lock, ready);
    }
    Result result = std::move(s.results[index]);
    s.results.erase(index);
    s.consumed = index + 1;
    s.changed.notify_all();
    if (result.error) {
      done_ = true;
      s.stop = true;
      s.changed.notify_all();
      lock.unlock();
      std::rethrow_exception(result.error);
    }
    current_ = std::move(result.batch);
  }

 private:
  struct Result {
    Example batch;
    std::exception_ptr error;
  };
  struct Shared {
    std::shared_ptr<const Dataset> dataset;
    DataLoaderOptions options;
    std::vector<std::vector<int64_t>> batches;
    int64_t capacity = 0;
    std::mutex mutex;
    std::condition_variable changed;
    int64_t claimed = 0;   // batches handed to workers
    int64_t consumed = 0;  // the batch the training thread waits for (or will next)
    std::map<int64_t, Result> results;
    int running = 0;  // workers not yet returned
    bool stop = false;
  };

  // Loads batch `index`: gets its samples, collates them, pins them if asked. Errors name the
  // batch, its first indices and the worker.
  static Example load(const Shared& s, int64_t index, int worker) {
    const std::vector<int64_t>& indices = s.batches[static_cast<size_t>(index)];
    try {
      // A TensorDataset itself (not a subclass, whose get may differ) gathers the batch at once.
      const auto* whole =
          typeid(*s.dataset) == typeid(TensorDataset) ? static_cast<const TensorDataset*>(s.dataset.get()) : nullptr;
      std::optional<Example> gathered;
      if (whole != nullptr && !s.options.collate() && !indices.empty()) gathered = whole->get_batch(indices);
      std::vector<Example> samples;
      if (!gathered) {
        samples.reserve(indices.size());
        for (int64_t i : indices) samples.push_back(s.dataset->get(i));
      }
      Example batch = gathered              ? std::move(*gathered)
                      : s.options.collate() ? s.options.collate()(samples)
                                            : default_collate(samples);
      if (s.options.pin_memory() && tensor::cuda::is_available()) {
        for (Tensor& t : batch) {
          if (t.defined() && t.is_cpu()) t = t.pin_memory();
        }
      }
      return batch;
    } catch (const std::exception& e) {
      const std::string where = worker >= 0 ? fmt::format(" in worker {}", worker) : std::string();
      throw Error(fmt::format("DataLoader: loading batch {} (samples {}{}){} failed: {}", index, indices.front(),
                              indices.size() > 1 ? ", ..." : "", where, e.what()));
    }
  }

  static void work(Shared& s, int worker) {
    for (;;) {
      int64_t index;
      {
        std::unique_lock<std::mutex> lock(s.mutex);
        s.changed.wait(lock, [&] {
          return s.stop || s.claimed >= static_cast<int64_t>(s.batches.size()) || s.claimed < s.consumed + s.capacity;
        });
        if (s.stop || s.claimed >= static_cast<int64_t>(s.batches.size())) break;
        index = s.claimed++;
      }
      Result result;
      try {
        result.batch = load(s, index, worker);
      } catch (...) {
        result.error = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(s.mutex);
      s.results[index] = std::move(result);
      s.changed.notify_all();
    }
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.running -= 1;
    s.changed.notify_all();
  }

  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
  int64_t next_ = 0;
  bool done_ = false;
  Example current_;
};

DataLoader::Iterator::Iterator(std::shared_ptr<DataLoaderEpoch> epoch) : epoch_(std::move(epoch)) {}

bool DataLoader::Iterator::done() const { return epoch_ == nullptr || epoch_->done(); }

const Example& DataLoader::Iterator::operator*() const {
  TDDP_CHECK(epoch_ != nullptr, "DataLoader: dereferencing the end iterator");
  return epoch_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  TDDP_CHECK(epoch_ != nullptr, "DataLoader: incrementing the end iterator");
  epoch_->advance();
  return *this;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  TDDP_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  TDDP_CHECK(options_.batch_size() >= 1, "DataLoader: batch_size should be a positive integer, got {}",
             options_.batch_size());
  TDDP_CHECK(options_.num_workers() >= 0, "DataLoader: num_workers option should be non-negative, got {}",
             options_.num_workers());
  TDDP_CHECK(options_.prefetch_factor() >= 1, "DataLoader: prefetch_factor should be at least 1, got {}",
             options_.prefetch_factor());
  TDDP_CHECK(options_.timeout().count() >= 0, "DataLoader: timeout option should be non-negative");
  TDDP_CHECK(!(options_.sampler() && options_.shuffle()),
             "DataLoader: sampler option is mutually exclusive with shuffle");
  if (options_.seed()) generator_ = std::make_shared<tensor::Generator>(*options_.seed());
  if (options_.sampler()) {
    sampler_ = options_.sampler();
  } else if (options_.shuffle()) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), generator_);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  // PyTorch draws each epoch's base seed (for its worker processes) first; tinyddp's workers
  // are threads that need none, but the draw keeps the generator's stream in step with it.
  draw64(generator_ ? *generator_ : tensor::default_generator());
  const std::vector<int64_t> order = sampler_->indices();
  const int64_t n = dataset_->size();
  for (int64_t i : order) {
    TDDP_CHECK(i >= 0 && i < n, "DataLoader: the sampler gave index {}, out of range for a dataset of {} samples", i,
               n);
  }
  std::vector<std::vector<int64_t>> batches;
  const size_t b = static_cast<size_t>(options_.batch_size());
  for (size_t start = 0; start < order.size(); start += b) {
    const size_t end = std::min(order.size(), start + b);
    if (end - start < b && options_.drop_last()) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                         order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  auto epoch = std::make_shared<DataLoaderEpoch>(dataset_, options_, std::move(batches));
  epoch->advance();  // the first batch; an error here stops the workers as the epoch goes
  return Iterator(std::move(epoch));
}

}  // namespace tinyddp::nn
