// The models of //examples:train (models.h): the toy model, the MLP and the digits CNN (with
// PyTorch's layer names), built from the command line's choice.
#include "examples/models.h"

#include "examples/digits.h"
#include "tinyddp/nn/batchnorm.h"
#include "tinyddp/nn/checkpoint.h"
#include "tinyddp/nn/conv.h"

namespace tinyddp::examples {

std::shared_ptr<nn::Sequential> digits_cnn(double dropout) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1),
      std::make_shared<nn::BatchNorm2d>(32), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dropout>(dropout),
      std::make_shared<nn::Linear>(2 * 2 * 32, kDigitsClasses)});
}

BuiltModel build_model(const TrainConfig& config, const tensor::Device& device, bool classification, bool digits) {
  tensor::manual_seed(config.seed);
  BuiltModel m;
  if (config.model == "toy") {
    m.module = std::make_shared<nn::ToyModel>();
  } else if (config.model == "cnn") {
    m.module = digits_cnn(config.dropout);
    m.in = kDigitsPixels;
    m.out = kDigitsClasses;
    m.sample = {1, 8, 8};
  } else {
    const std::vector<int64_t> widths = !config.widths.empty() ? config.widths
                                        : digits ? std::vector<int64_t>{kDigitsPixels, 128, kDigitsClasses}
                                                 : std::vector<int64_t>{784, 256, 10};
    TDDP_CHECK(widths.size() >= 2, "--widths needs at least two numbers, got {}", widths.size());
    TDDP_CHECK(!digits || (widths.front() == kDigitsPixels && widths.back() == kDigitsClasses),
               "--dataset digits: the widths must start with {} (8x8 pixels) and end with {} (classes), got {}",
               kDigitsPixels, kDigitsClasses, fmt::join(widths, ","));
    m.module = nn::mlp(widths);
    m.in = widths.front();
    m.out = widths.back();
    m.sample = {m.in};
  }
  TDDP_CHECK(!classification || m.out >= 2, "--loss ce needs at least 2 output classes, the model has {}", m.out);
  if (!config.init.empty()) nn::load_state_dict(*m.module, config.init);
  if (config.dtype == "float64") m.module->to(tensor::kFloat64);  // initialised in float32, as PyTorch's .double()
  m.module->to(device);
  return m;
}

}  // namespace tinyddp::examples
