// The datasets of //examples:train: see train_data.h.
#include "examples/train_data.h"

#include <cmath>

#include "tinyddp/base/error.h"
#include "tinyddp/nn/nn.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

namespace {

class FileDataset : public Dataset {
 public:
  FileDataset(const std::string& path, int64_t steps, int64_t in, int64_t out, bool classification) : path_(path) {
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    TDDP_CHECK(file.tensors.contains("inputs") && file.tensors.contains("targets"),
               "--data {}: expected tensors named 'inputs' and 'targets'", path);
    inputs_ = file.tensors.at("inputs");
    targets_ = file.tensors.at("targets");
    TDDP_CHECK(inputs_.dtype() == t::kFloat32 && inputs_.dim() == 3 && inputs_.size(2) == in,
               "--data {}: 'inputs' must be float32 [steps, batch, {}], got {} {}", path, in,
               t::dtype_name(inputs_.dtype()), t::format_shape(inputs_.sizes()));
    TDDP_CHECK(inputs_.size(0) >= steps, "--data {}: --steps {} but the file holds {} batches", path, steps, inputs_.size(0));
    const t::Shape want = classification ? t::Shape{inputs_.size(0), inputs_.size(1)}
                                         : t::Shape{inputs_.size(0), inputs_.size(1), out};
    const t::DType want_dtype = classification ? t::kInt64 : t::kFloat32;
    TDDP_CHECK(targets_.dtype() == want_dtype && targets_.sizes() == want,
               "--data {}: 'targets' must be {} {} for this loss, got {} {}", path, t::dtype_name(want_dtype),
               t::format_shape(want), t::dtype_name(targets_.dtype()), t::format_shape(targets_.sizes()));
  }
  Batch batch(int64_t step) override { return {inputs_[step], targets_[step]}; }
  std::string describe() const override { return "data from " + path_; }

 private:
  std::string path_;
  Tensor inputs_, targets_;
};

class SyntheticDataset : public Dataset {
 public:
  static constexpr int64_t kHeldOutRows = 1024;

  SyntheticDataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification)
      : generator_(seed + 1), batch_(batch), out_(out), classification_(classification) {
    t::NoGradGuard no_grad;
    // Centres about 4 noise standard deviations apart: learnable, but not trivially.
    const double scale = (classification ? 3.0 : 1.0) / std::sqrt(static_cast<double>(in));
    reference_ = t::mul(t::randn({out, in}, {}, &generator_), scale);  // teacher or centres
  }
  Batch batch(int64_t /*step*/) override { return draw(batch_, generator_); }
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
  Tensor reference_;
};

class DigitsDataset : public Dataset {
 public:
  DigitsDataset(const std::string& path, uint64_t seed, int64_t batch)
      : path_(path), digits_(load_digits(path)), split_(split_digits(digits_.rows(), kDigitsHeldOut, seed)),
        seed_(seed), batch_(batch) {
    TDDP_CHECK(batch <= static_cast<int64_t>(split_.train.size()),
               "--batch {}: larger than the {} training digits of {}", batch, split_.train.size(), path);
  }
  Batch batch(int64_t step) override {
    const std::vector<int64_t> rows = digits_batch(split_.train, batch_, step, seed_);
    return {digits_.inputs(rows), digits_.targets(rows)};
  }
  std::optional<Batch> held_out() override { return Batch{digits_.inputs(split_.held_out), digits_.targets(split_.held_out)}; }
  std::string describe() const override {
    return fmt::format("{} training digits from {} ({} batches of {} per epoch)", split_.train.size(), path_,
                       split_.train.size() / batch_, batch_);
  }
  std::string describe_held_out() const override { return fmt::format("{} held-out digits", split_.held_out.size()); }

 private:
  std::string path_;
  Digits digits_;
  DigitsSplit split_;
  uint64_t seed_;
  int64_t batch_;
};

}  // namespace

std::unique_ptr<Dataset> file_dataset(const std::string& path, int64_t steps, int64_t in, int64_t out,
                                      bool classification) {
  return std::make_unique<FileDataset>(path, steps, in, out, classification);
}

std::unique_ptr<Dataset> synthetic_dataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification) {
  return std::make_unique<SyntheticDataset>(seed, batch, in, out, classification);
}

std::unique_ptr<Dataset> digits_dataset(const std::string& path, uint64_t seed, int64_t batch) {
  return std::make_unique<DigitsDataset>(path, seed, batch);
}

}  // namespace tinyddp::examples
