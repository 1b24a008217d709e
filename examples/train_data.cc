// The datasets of //examples:train (train_data.h): a safetensors file of batches, generated
// classes, or the digits, each rank taking its share.
#include "examples/train_data.h"

#include <cmath>

#include "tinyddp/base/error.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

namespace {

// Rows [rank * B / world, (rank + 1) * B / world) of a global batch of B rows.
Batch share(const Batch& global, int rank, int world) {
  const int64_t rows = global.inputs.size(0);
  TDDP_CHECK(rows % world == 0, "a batch of {} rows is not divisible by WORLD_SIZE {}", rows, world);
  return {global.inputs.narrow(0, rank * rows / world, rows / world),
          global.targets.narrow(0, rank * rows / world, rows / world)};
}

class FileDataset : public Dataset {
 public:
  FileDataset(const std::string& path, int64_t steps, const t::Shape& sample, int64_t out, bool classification,
              int rank, int world)
      : path_(path), rank_(rank), world_(world) {
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    TDDP_CHECK(file.tensors.contains("inputs") && file.tensors.contains("targets"),
               "--data {}: expected tensors named 'inputs' and 'targets'", path);
    inputs_ = file.tensors.at("inputs");
    targets_ = file.tensors.at("targets");
    const t::Shape per_sample(inputs_.sizes().begin() + std::min<int64_t>(2, inputs_.dim()), inputs_.sizes().end());
    TDDP_CHECK(inputs_.dtype() == t::kFloat32 && inputs_.dim() >= 2 && per_sample == sample,
               "--data {}: 'inputs' must be float32 [steps, batch, {}], got {} {}", path, fmt::join(sample, ", "),
               t::dtype_name(inputs_.dtype()), t::format_shape(inputs_.sizes()));
    TDDP_CHECK(inputs_.size(0) >= steps, "--data {}: --steps {} but the file holds {} batches", path, steps,
               inputs_.size(0));
    const t::Shape want =
        classification ? t::Shape{inputs_.size(0), inputs_.size(1)} : t::Shape{inputs_.size(0), inputs_.size(1), out};
    const t::DType want_dtype = classification ? t::kInt64 : t::kFloat32;
    TDDP_CHECK(targets_.dtype() == want_dtype && targets_.sizes() == want,
               "--data {}: 'targets' must be {} {} for this loss, got {} {}", path, t::dtype_name(want_dtype),
               t::format_shape(want), t::dtype_name(targets_.dtype()), t::format_shape(targets_.sizes()));
  }
  Batch batch(int64_t step) override { return share({inputs_[step], targets_[step]}, rank_, world_); }
  std::string describe() const override { return "data from " + path_; }

 private:
  std::string path_;
  int rank_, world_;
  Tensor inputs_, targets_;
};

class SyntheticDataset : public Dataset {
 public:
  static constexpr int64_t kHeldOutRows = 1024;

  SyntheticDataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification, int rank, int world)
      : generator_(seed + 1), batch_(batch), out_(out), classification_(classification), rank_(rank), world_(world) {
    t::NoGradGuard no_grad;
    // Centres about 4 noise standard deviations apart: learnable, but not trivially.
    const double scale = (classification ? 3.0 : 1.0) / std::sqrt(static_cast<double>(in));
    reference_ = t::mul(t::randn({out, in}, {}, &generator_), scale);  // teacher or centres
  }
  Batch batch(int64_t /*step*/) override { return share(draw(batch_, generator_), rank_, world_); }
  // Fresh samples from the same distribution, from a generator of their own.
  std::optional<Batch> held_out() override {
    if (!classification_) return std::nullopt;
    return draw(kHeldOutRows, held_out_generator_);
  }
  std::string describe() const override { return "synthetic data"; }
  std::string describe_held_out() const override { return fmt::format("{} new samples", kHeldOutRows); }

 private:
  Batch draw(int64_t rows, t::Generator& generator) {
    t::NoGradGuard no_grad;
    const int64_t in = reference_.size(1);
    const Tensor noise = t::randn({rows, in}, {}, &generator);
    if (!classification_) {
      const Tensor x = noise;
      const Tensor y = t::add(t::matmul(x, reference_.t()), t::mul(t::randn({rows, out_}, {}, &generator), 0.1));
      return {x, y};
    }
    // labels = floor(U(0, classes)); one_hot @ centres picks each sample's centre.
    const Tensor labels = t::rand({rows}, t::kFloat64, &generator).mul_(static_cast<double>(out_)).to(t::kInt64);
    const Tensor one_hot = t::eq(labels.unsqueeze(1), t::arange(out_).unsqueeze(0)).to(t::kFloat32);
    return {t::add(t::matmul(one_hot, reference_), noise), labels};
  }

  t::Generator generator_;
  t::Generator held_out_generator_{0x5eed};
  int64_t batch_, out_;
  bool classification_;
  int rank_, world_;
  Tensor reference_;
};

// Rows [rank n, (rank + 1) n) of each batch of `batch` = world n indices of `order`: a rank's
// contiguous block of every one-process batch (whole batches only).
class BatchBlockSampler : public nn::Sampler {
 public:
  BatchBlockSampler(std::shared_ptr<nn::Sampler> order, int64_t batch, int rank, int world)
      : order_(std::move(order)), batch_(batch), share_(batch / world), rank_(rank) {}
  std::vector<int64_t> indices() override {
    const std::vector<int64_t> all = order_->indices();
    std::vector<int64_t> mine;
    mine.reserve(static_cast<size_t>(size()));
    for (int64_t start = 0; start + batch_ <= static_cast<int64_t>(all.size()); start += batch_) {
      const auto from = all.begin() + start + rank_ * share_;
      mine.insert(mine.end(), from, from + share_);
    }
    return mine;
  }
  int64_t size() const override { return order_->size() / batch_ * share_; }

 private:
  std::shared_ptr<nn::Sampler> order_;
  int64_t batch_, share_, rank_;
};

class DigitsDataset : public Dataset {
 public:
  DigitsDataset(const std::string& path, uint64_t seed, int64_t batch, int rank, int world, bool blocks)
      : path_(path), digits_(load_digits(path)), split_(split_digits(digits_.rows(), kDigitsHeldOut, seed)),
        batch_(batch), train_(std::make_shared<nn::TensorDataset>(
                           std::vector<Tensor>{digits_.inputs(split_.train), digits_.targets(split_.train)})),
        sampler_(std::make_shared<nn::DistributedSampler>(train_->size(), blocks ? 1 : world, blocks ? 0 : rank,
                                                          /*shuffle=*/true, seed)),
        loader_(train_, nn::DataLoaderOptions(batch / world)
                            .sampler(blocks ? std::make_shared<BatchBlockSampler>(sampler_, batch, rank, world)
                                            : std::shared_ptr<nn::Sampler>(sampler_))
                            .drop_last(true)) {
    TDDP_CHECK(batch <= train_->size(), "--batch {}: larger than the {} training digits of {}", batch, train_->size(),
               path);
  }
  Batch batch(int64_t step) override {
    const int64_t epoch = step / loader_.size(), position = step % loader_.size();
    if (epoch != epoch_ || position < next_) {  // a new epoch (or a step out of order): start it
      sampler_->set_epoch(epoch);
      current_ = loader_.begin();
      epoch_ = epoch;
      next_ = 0;
    }
    for (; next_ < position; ++next_) ++current_;  // resuming mid-epoch skips the done batches
    const nn::Example& b = *current_;
    Batch out{b[0], b[1]};
    ++current_;
    ++next_;
    return out;
  }
  std::optional<Batch> held_out() override {
    return Batch{digits_.inputs(split_.held_out), digits_.targets(split_.held_out)};
  }
  std::string describe() const override {
    return fmt::format("{} training digits from {} ({} batches of {} per epoch)", split_.train.size(), path_,
                       loader_.size(), batch_);
  }
  std::string describe_held_out() const override { return fmt::format("{} held-out digits", split_.held_out.size()); }

 private:
  std::string path_;
  Digits digits_;
  DigitsSplit split_;
  int64_t batch_;
  std::shared_ptr<nn::TensorDataset> train_;
  std::shared_ptr<nn::DistributedSampler> sampler_;
  nn::DataLoader loader_;
  nn::DataLoader::Iterator current_;
  int64_t epoch_ = -1, next_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> file_dataset(const std::string& path, int64_t steps, const tensor::Shape& sample, int64_t out,
                                      bool classification, int rank, int world) {
  return std::make_unique<FileDataset>(path, steps, sample, out, classification, rank, world);
}

std::unique_ptr<Dataset> synthetic_dataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification,
                                           int rank, int world) {
  return std::make_unique<SyntheticDataset>(seed, batch, in, out, classification, rank, world);
}

std::unique_ptr<Dataset> digits_dataset(const std::string& path, uint64_t seed, int64_t batch, int rank, int world,
                                        bool blocks) {
  return std::make_unique<DigitsDataset>(path, seed, batch, rank, world, blocks);
}

}  // namespace tinyddp::examples
