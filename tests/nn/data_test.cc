// nn/data.h: TensorDataset, default_collate, the samplers and the DataLoader, against PyTorch's
// own index lists and batches (fixtures/make_data_fixtures.py writes data_reference.json) and
// against the properties DistributedSampler promises (disjoint shares that cover the data).
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/data.h"
#include "tinyddp/nn/datasets.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;
using json = nlohmann::json;
using Catch::Contains;

namespace {

const json& reference() {
  static const json data = tinyddp::testing::read_nn_json_fixture("data_reference.json");
  return data;
}

std::vector<int64_t> first_field(const nn::Example& batch) { return batch.at(0).to_vector<int64_t>(); }

// Every epoch of `loader` as lists of the first field's values.
std::vector<std::vector<int64_t>> epoch_of(nn::DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (const nn::Example& batch : loader) batches.push_back(first_field(batch));
  return batches;
}

std::shared_ptr<nn::TensorDataset> range_dataset(int64_t n) {
  return std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{t::arange(n)});
}

// A dataset whose get() can be slowed down, fail at one index, or count its calls.
class TestDataset : public nn::Dataset {
 public:
  explicit TestDataset(int64_t n, int64_t fail_at = -1, std::chrono::milliseconds delay = {})
      : n_(n), fail_at_(fail_at), delay_(delay) {}
  int64_t size() const override { return n_; }
  nn::Example get(int64_t index) const override {
    calls.fetch_add(1);
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (index == fail_at_) throw std::runtime_error("no such image: sample_" + std::to_string(index) + ".png");
    return {t::full({2}, static_cast<double>(index)), t::scalar_tensor(static_cast<double>(index), t::kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
  std::chrono::milliseconds delay_;
};

}  // namespace

TEST_CASE("randperm equals torch.randperm for the same seed", "[nn][data]") {
  for (const json& c : reference()["randperm"]) {
    t::Generator g(c["seed"].get<uint64_t>());
    INFO("n " << c["n"] << " seed " << c["seed"]);
    CHECK(t::randperm(c["n"].get<int64_t>(), &g).to_vector<int64_t>() == c["perm"].get<std::vector<int64_t>>());
  }
  CHECK(t::randperm(0).numel() == 0);
  CHECK_THROWS_WITH(t::randperm(-1), Contains("randperm: n must be non-negative, got -1"));
}

TEST_CASE("randint equals torch.randint for the same seed, below and above 2^32", "[nn][data]") {
  for (const json& c : reference()["randint"]) {
    t::Generator g(c["seed"].get<uint64_t>());
    const auto want = c["values"].get<std::vector<int64_t>>();
    INFO("randint(" << c["low"] << ", " << c["high"] << ") seed " << c["seed"]);
    CHECK(t::randint(c["low"].get<int64_t>(), c["high"].get<int64_t>(), {static_cast<int64_t>(want.size())}, &g)
              .to_vector<int64_t>() == want);
  }
  // The default generator, a 2-d shape, and the stream after it (what nanoGPT's get_batch leaves).
  const json& d = reference()["randint_default"];
  t::manual_seed(d["seed"].get<uint64_t>());
  const t::Tensor drawn = t::randint(d["high"].get<int64_t>(), {4, 3});
  CHECK(drawn.sizes() == t::Shape{4, 3});
  CHECK(drawn.to_vector<int64_t>() == d["values"].get<std::vector<int64_t>>());
  CHECK(t::rand({2}).to_vector<float>() == d["then_rand"].get<std::vector<float>>());
  CHECK_THROWS_WITH(t::randint(3, 3, {2}), Contains("randint: expected low < high, got low 3 and high 3"));
}

TEST_CASE("DistributedSampler gives every rank PyTorch's index list", "[nn][data][distributed]") {
  int cases = 0;
  for (const json& c : reference()["distributed"]) {
    const int replicas = c["replicas"].get<int>();
    for (int rank = 0; rank < replicas; ++rank) {
      nn::DistributedSampler sampler(c["size"].get<int64_t>(), replicas, rank, c["shuffle"].get<bool>(),
                                     c["seed"].get<uint64_t>(), c["drop_last"].get<bool>());
      sampler.set_epoch(c["epoch"].get<int64_t>());
      const auto expected = c["ranks"][rank].get<std::vector<int64_t>>();
      INFO(c.dump() << " rank " << rank);
      CHECK(sampler.indices() == expected);
      CHECK(sampler.size() == static_cast<int64_t>(expected.size()));
      ++cases;
    }
  }
  CHECK(cases > 300);
}

TEST_CASE("DistributedSampler: disjoint shares that cover the data, padding from the start",
          "[nn][data][distributed]") {
  for (int64_t size : {1, 7, 64, 100, 101, 1797}) {
    for (int world : {1, 2, 3, 5, 8}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          INFO("size " << size << " world " << world << " shuffle " << shuffle << " drop_last " << drop_last);
          std::vector<int64_t> all;
          for (int rank = 0; rank < world; ++rank) {
            nn::DistributedSampler sampler(size, world, rank, shuffle, 42, drop_last);
            sampler.set_epoch(2);
            const std::vector<int64_t> mine = sampler.indices();
            CHECK(static_cast<int64_t>(mine.size()) == sampler.size());  // every rank the same length
            all.insert(all.end(), mine.begin(), mine.end());
          }
          const std::set<int64_t> distinct(all.begin(), all.end());
          for (int64_t i : all) CHECK((i >= 0 && i < size));
          if (drop_last) {
            // Nothing repeated; at most world - 1 samples left out.
            CHECK(distinct.size() == all.size());
            CHECK(size - static_cast<int64_t>(all.size()) < world);
            CHECK(static_cast<int64_t>(all.size()) % world == 0);
          } else {
            // Everything covered; the repeats are the padding, fewer than world of them.
            CHECK(static_cast<int64_t>(distinct.size()) == size);
            CHECK(static_cast<int64_t>(all.size()) == (size + world - 1) / world * world);
          }
        }
      }
    }
  }
  // Without shuffle the padding repeats the first indices: 5 samples on 3 ranks.
  CHECK(nn::DistributedSampler(5, 3, 0, false).indices() == std::vector<int64_t>{0, 3});
  CHECK(nn::DistributedSampler(5, 3, 1, false).indices() == std::vector<int64_t>{1, 4});
  CHECK(nn::DistributedSampler(5, 3, 2, false).indices() == std::vector<int64_t>{2, 0});
}

TEST_CASE("DistributedSampler: set_epoch changes the order, the same epoch repeats it", "[nn][data][distributed]") {
  nn::DistributedSampler a(100, 2, 0), b(100, 2, 0), other_rank(100, 2, 1);
  const std::vector<int64_t> epoch0 = a.indices();
  CHECK(a.indices() == epoch0);  // no set_epoch: epoch 0 again
  a.set_epoch(1);
  const std::vector<int64_t> epoch1 = a.indices();
  CHECK(epoch1 != epoch0);
  b.set_epoch(1);
  CHECK(b.indices() == epoch1);  // another sampler (another process) agrees
  other_rank.set_epoch(1);
  for (int64_t i : other_rank.indices()) CHECK(std::find(epoch1.begin(), epoch1.end(), i) == epoch1.end());
  a.set_epoch(0);
  CHECK(a.indices() == epoch0);
  CHECK(nn::DistributedSampler(100, 2, 0, true, 1).indices() != epoch0);  // another seed
}

TEST_CASE("DistributedSampler: bad arguments are named", "[nn][data][distributed][errors]") {
  CHECK_THROWS_WITH(nn::DistributedSampler(10, 2, 2),
                    Contains("invalid rank 2, rank should be in the interval [0, 1]"));
  CHECK_THROWS_WITH(nn::DistributedSampler(10, 2, -1), Contains("invalid rank -1"));
  CHECK_THROWS_WITH(nn::DistributedSampler(10, 0, 0), Contains("num_replicas must be at least 1, got 0"));
  CHECK_THROWS_WITH(nn::DistributedSampler(-3, 2, 0), Contains("dataset_size must be non-negative, got -3"));
}

TEST_CASE("RandomSampler and DataLoader orders equal PyTorch's", "[nn][data]") {
  const json& r = reference()["random_sampler"];
  nn::RandomSampler sampler(r["n"].get<int64_t>(), std::make_shared<t::Generator>(r["seed"].get<uint64_t>()));
  for (const json& epoch : r["epochs"]) CHECK(sampler.indices() == epoch.get<std::vector<int64_t>>());

  const json& seeded = reference()["loader"]["seeded"];
  nn::DataLoader loader(
      range_dataset(10),
      nn::DataLoaderOptions(seeded["batch_size"].get<int64_t>()).shuffle(true).seed(seeded["seed"].get<uint64_t>()));
  CHECK(loader.size() == 4);
  for (const json& epoch : seeded["epochs"]) CHECK(epoch_of(loader) == epoch.get<std::vector<std::vector<int64_t>>>());

  // The default generator: the orders and its stream afterwards (each epoch's base-seed draw).
  for (const char* name : {"default_generator", "sequential"}) {
    const json& c = reference()["loader"][name];
    INFO(name);
    t::manual_seed(c["manual_seed"].get<uint64_t>());
    nn::DataLoader l(range_dataset(10), nn::DataLoaderOptions(c["batch_size"].get<int64_t>())
                                            .shuffle(std::string(name) == "default_generator")
                                            .drop_last(std::string(name) == "default_generator"));
    for (const json& epoch : c["epochs"]) CHECK(epoch_of(l) == epoch.get<std::vector<std::vector<int64_t>>>());
    const std::vector<float> after = t::rand({3}).to_vector<float>();
    const auto expected = c["rand_after"].get<std::vector<double>>();
    for (size_t i = 0; i < 3; ++i) CHECK(after[i] == static_cast<float>(expected[i]));
  }
}

TEST_CASE("TensorDataset and default_collate stack fields; mismatches are named", "[nn][data]") {
  const t::Tensor x = t::arange(12).to(t::kFloat32).reshape({6, 2});
  const t::Tensor y = t::arange(6);
  auto dataset = std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{x, y});
  CHECK(dataset->size() == 6);
  const nn::Example sample = dataset->get(4);
  CHECK(sample[0].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(sample[1].item<int64_t>() == 4);

  nn::DataLoader loader(dataset, nn::DataLoaderOptions(4));
  CHECK(loader.size() == 2);
  std::vector<nn::Example> batches;
  for (const nn::Example& b : loader) batches.push_back(b);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0][0].sizes() == t::Shape{4, 2});
  CHECK(batches[0][1].sizes() == t::Shape{4});
  CHECK(batches[1][0].to_vector<float>() == std::vector<float>{8, 9, 10, 11});
  CHECK(batches[1][1].to_vector<int64_t>() == std::vector<int64_t>{4, 5});
  CHECK(nn::DataLoader(dataset, nn::DataLoaderOptions(4).drop_last(true)).size() == 1);

  CHECK_THROWS_WITH(nn::TensorDataset({x, t::arange(5)}),
                    Contains("size mismatch between tensors: tensor 0 has 6 samples, tensor 1 has 5"));
  CHECK_THROWS_WITH(dataset->get(6), Contains("index 6 is out of range for 6 samples"));
  CHECK_THROWS_WITH(nn::default_collate({{t::zeros({2})}, {t::zeros({3})}}),
                    Contains("field 0 of sample 1 is [3] float32 on cpu, sample 0's is [2] float32 on cpu"));
  CHECK_THROWS_WITH(nn::DataLoader(dataset, nn::DataLoaderOptions(0)),
                    Contains("batch_size should be a positive integer, got 0"));
  CHECK_THROWS_WITH(nn::DataLoader(dataset, nn::DataLoaderOptions(2).shuffle(true).sampler(
                                                std::make_shared<nn::SequentialSampler>(6))),
                    Contains("sampler option is mutually exclusive with shuffle"));
  CHECK_THROWS_WITH(nn::DataLoader(dataset, nn::DataLoaderOptions(2).num_workers(-1)),
                    Contains("num_workers option should be non-negative"));
  nn::DataLoader too_far(dataset, nn::DataLoaderOptions(2).sampler(std::make_shared<nn::SequentialSampler>(7)));
  CHECK_THROWS_WITH(too_far.begin(), Contains("the sampler gave index 6, out of range for a dataset of 6 samples"));
}

namespace {
// A TensorDataset the loader cannot recognise as one: its samples go through get and
// default_collate one by one.
class SampleBySample : public nn::TensorDataset {
 public:
  using nn::TensorDataset::TensorDataset;
  nn::Example get(int64_t index) const override { return nn::TensorDataset::get(index); }
};

std::vector<nn::Example> epoch_of(const std::shared_ptr<nn::Dataset>& dataset, int workers) {
  nn::DataLoader loader(dataset, nn::DataLoaderOptions(5).shuffle(true).seed(7).num_workers(workers));
  std::vector<nn::Example> out;
  for (const nn::Example& b : loader) out.push_back(b);
  return out;
}
}  // namespace

TEST_CASE("A TensorDataset's batches gathered at once equal its samples stacked one by one", "[nn][data]") {
  t::Generator g(3);
  const t::Tensor images = t::randn({23, 2, 3}, {}, &g), labels = t::arange(23);
  const t::Tensor strided = t::randn({3, 23}, {}, &g).t();  // not contiguous: stacked one by one
  const t::Tensor halves = t::randn({23, 4}, {}, &g).to(t::kBFloat16);
  for (const std::vector<t::Tensor>& fields :
       std::vector<std::vector<t::Tensor>>{{images, labels}, {images, strided, labels}, {halves, labels}}) {
    for (int workers : {0, 2}) {
      INFO(fields.size() << " fields, " << workers << " workers");
      const auto fast = epoch_of(std::make_shared<nn::TensorDataset>(fields), workers);
      const auto slow = epoch_of(std::make_shared<SampleBySample>(fields), workers);
      REQUIRE(fast.size() == slow.size());
      REQUIRE(fast.size() == 5);  // 23 samples in batches of 5, the last one of 3
      for (size_t b = 0; b < fast.size(); ++b) {
        REQUIRE(fast[b].size() == slow[b].size());
        for (size_t f = 0; f < fast[b].size(); ++f) {
          CHECK(fast[b][f].sizes() == slow[b][f].sizes());
          CHECK(fast[b][f].dtype() == slow[b][f].dtype());
          CHECK(fast[b][f].is_contiguous());
          CHECK(t::equal(fast[b][f], slow[b][f]));
        }
      }
    }
  }
  const nn::TensorDataset dataset({images, labels});
  CHECK_THROWS_WITH(dataset.get_batch({0, 23}), Contains("index 23 is out of range for 23 samples"));
  CHECK_FALSE(nn::TensorDataset({strided}).get_batch({0, 1}).has_value());
}

TEST_CASE("DataLoader workers: same batches in order, bounded prefetch, a custom collate", "[nn][data][workers]") {
  auto dataset = std::make_shared<TestDataset>(50, -1, std::chrono::milliseconds(1));
  nn::DataLoader serial(dataset, nn::DataLoaderOptions(4).shuffle(true).seed(3));
  nn::DataLoader threaded(dataset, nn::DataLoaderOptions(4).shuffle(true).seed(3).num_workers(3).prefetch_factor(2));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::vector<int64_t>> a, b;
    for (const nn::Example& batch : serial) a.push_back(batch[1].to_vector<int64_t>());
    for (const nn::Example& batch : threaded) b.push_back(batch[1].to_vector<int64_t>());
    CHECK(a == b);
    CHECK(a.size() == 13);
  }

  // The workers stay at most num_workers * prefetch_factor = 2 batches (of 1 sample) ahead.
  auto counted = std::make_shared<TestDataset>(100);
  nn::DataLoader ahead(counted, nn::DataLoaderOptions(1).num_workers(1).prefetch_factor(2));
  {
    auto it = ahead.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(counted->calls.load() <= 3);  // the batch in hand and two ahead
    ++it;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(counted->calls.load() <= 4);
  }  // leaving early stops the workers: nothing more is loaded
  const int64_t after_stop = counted->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(counted->calls.load() == after_stop);

  nn::DataLoader summed(std::make_shared<TestDataset>(6),
                        nn::DataLoaderOptions(3).num_workers(2).collate([](const std::vector<nn::Example>& samples) {
                          int64_t total = 0;
                          for (const nn::Example& s : samples) total += s[1].item<int64_t>();
                          return nn::Example{t::scalar_tensor(static_cast<double>(total), t::kInt64)};
                        }));
  std::vector<int64_t> totals;
  for (const nn::Example& batch : summed) totals.push_back(batch[0].item<int64_t>());
  CHECK(totals == std::vector<int64_t>{0 + 1 + 2, 3 + 4 + 5});
}

TEST_CASE("DataLoader: a failing Dataset::get surfaces in the training thread, nothing hangs",
          "[nn][data][workers][errors]") {
  for (int workers : {0, 1, 3}) {
    INFO("num_workers " << workers);
    auto dataset = std::make_shared<TestDataset>(40, 21);
    nn::DataLoader loader(dataset, nn::DataLoaderOptions(4).num_workers(workers));
    int seen = 0;
    const auto start = std::chrono::steady_clock::now();
    try {
      for (const nn::Example& batch : loader) {
        (void)batch;
        ++seen;
      }
      FAIL("no error");
    } catch (const tinyddp::Error& e) {
      CHECK_THAT(std::string(e.what()), Contains("DataLoader: loading batch 5 (samples 20, ...)"));
      CHECK_THAT(std::string(e.what()), Contains("failed: no such image: sample_21.png"));
      if (workers > 0) CHECK_THAT(std::string(e.what()), Contains(" in worker "));
    }
    CHECK(seen == 5);  // batches 0-4 arrived, in order, before the error
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    // The loader is usable again: a new epoch starts new workers.
    CHECK_THROWS_WITH(
        [&] {
          for (const nn::Example& batch : loader) (void)batch;
        }(),
        Contains("sample_21.png"));
  }

  // A worker stuck in get() past the timeout: an error naming the batch, within the timeout.
  auto slow = std::make_shared<TestDataset>(4, -1, std::chrono::milliseconds(1500));
  nn::DataLoader loader(slow, nn::DataLoaderOptions(1).num_workers(1).timeout(std::chrono::milliseconds(200)));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(loader.begin(), Contains("DataLoader: batch 0 was not ready after the timeout of 200 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1400));
}

TEST_CASE("DataLoader with DistributedSampler: ranks' batches together are one process's epoch",
          "[nn][data][distributed]") {
  auto dataset = range_dataset(23);
  for (int world : {2, 3}) {
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      auto sampler = std::make_shared<nn::DistributedSampler>(dataset->size(), world, rank, true, 5);
      sampler->set_epoch(4);
      nn::DataLoader loader(dataset, nn::DataLoaderOptions(3).sampler(sampler).num_workers(rank));
      CHECK(loader.size() == (sampler->size() + 2) / 3);
      for (const nn::Example& batch : loader) {
        for (int64_t i : first_field(batch)) seen.insert(i);
      }
    }
    const std::set<int64_t> distinct(seen.begin(), seen.end());
    CHECK(distinct.size() == 23);
    CHECK(static_cast<int64_t>(seen.size()) == (23 + world - 1) / world * world);
  }
}

TEST_CASE("random_split and ConcatDataset give PyTorch's subsets and items", "[nn][data][fixture]") {
  const auto dataset_of = [](int64_t n) {
    return std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{t::arange(n)});
  };
  for (const json& c : reference()["random_split"]) {
    const int64_t n = c["n"].get<int64_t>();
    INFO("n " << n << " seed " << c["seed"].get<int64_t>());
    t::Generator g(c["seed"].get<uint64_t>());
    const auto parts = nn::random_split(dataset_of(n), c["lengths"].get<std::vector<double>>(), &g);
    REQUIRE(parts.size() == c["indices"].size());
    for (size_t k = 0; k < parts.size(); ++k) {
      CHECK(parts[k]->indices() == c["indices"][k].get<std::vector<int64_t>>());
      if (parts[k]->size() > 0) CHECK(parts[k]->get(0)[0].item<int64_t>() == parts[k]->indices()[0]);
    }
  }
  const nn::ConcatDataset concat({dataset_of(3),
                                  std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{t::arange(10, 12)}),
                                  std::make_shared<nn::TensorDataset>(std::vector<t::Tensor>{t::arange(20, 24)})});
  CHECK(concat.cumulative_sizes() == reference()["concat"]["cumulative_sizes"].get<std::vector<int64_t>>());
  const auto items = reference()["concat"]["items"].get<std::vector<int64_t>>();
  for (int64_t i = -9; i < 9; ++i) CHECK(concat.get(i)[0].item<int64_t>() == items[static_cast<size_t>(i + 9)]);
  CHECK_THROWS_WITH(concat.get(9), Contains("ConcatDataset: index 9 is out of range for a dataset of 9"));
  CHECK_THROWS_WITH(nn::random_split(dataset_of(5), {2, 2}), Contains("Sum of input lengths does not equal"));
  CHECK_THROWS_WITH(nn::Subset(dataset_of(3), {0, 3}), Contains("Subset: index 3 is out of range for a dataset of 3"));
  // a split is a Dataset: a DataLoader takes it
  t::Generator g(1);
  nn::DataLoader loader(nn::random_split(dataset_of(10), {0.5, 0.5}, &g)[0], nn::DataLoaderOptions(5));
  int64_t batches = 0;
  for (const nn::Example& batch : loader) batches += batch[0].size(0) == 5;
  CHECK(batches == 1);
}
