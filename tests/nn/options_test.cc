// The layers' *Options structs (nn/options.h): each layer built through its options, as a
// libtorch user writes it, has the repr PyTorch gives the same layer built with keyword
// arguments (fixtures/make_options_fixture.py), and the parameters of the same layer built
// positionally after the same seed; the options' defaults are the positional constructors';
// Embedding::from_pretrained (the other way a layer is made).
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

// The fixture's layers through their options, and the same layers positionally.
std::shared_ptr<Module> through_options(const std::string& name) {
  if (name == "conv2d") return std::make_shared<Conv2d>(Conv2dOptions(8, 16, 3).padding(1).bias(false));
  if (name == "conv2d_rect")
    return std::make_shared<Conv2d>(Conv2dOptions(4, 8, {3, 5}).stride(2).dilation({1, 2}).groups(2));
  if (name == "conv1d")
    return std::make_shared<Conv1d>(Conv1dOptions(4, 6, 5).stride(2).padding(2).groups(2).bias(false));
  if (name == "maxpool2d") return std::make_shared<MaxPool2d>(MaxPool2dOptions(3).stride(2).padding(1));
  if (name == "avgpool2d") return std::make_shared<AvgPool2d>(AvgPool2dOptions(2).count_include_pad(false));
  if (name == "batchnorm2d")
    return std::make_shared<BatchNorm2d>(BatchNormOptions(16).momentum(std::nullopt).affine(false));
  if (name == "batchnorm1d")
    return std::make_shared<BatchNorm1d>(BatchNormOptions(8).eps(1e-3).track_running_stats(false));
  if (name == "groupnorm") return std::make_shared<GroupNorm>(GroupNormOptions(4, 16).eps(1e-6).affine(false));
  if (name == "layernorm") return std::make_shared<LayerNorm>(LayerNormOptions({8, 4}).elementwise_affine(false));
  if (name == "lstm") {
    return std::make_shared<LSTM>(LSTMOptions(8, 16).num_layers(2).batch_first(true).dropout(0.1).bidirectional(true));
  }
  if (name == "gru") return std::make_shared<GRU>(GRUOptions(4, 8).bias(false));
  REQUIRE(name == "rnn");
  return std::make_shared<RNN>(RNNOptions(4, 8).nonlinearity("relu"));
}

std::shared_ptr<Module> positionally(const std::string& name) {
  if (name == "conv2d") return std::make_shared<Conv2d>(8, 16, 3, 1, 1, 1, 1, false);
  if (name == "conv2d_rect") return std::make_shared<Conv2d>(4, 8, tensor::Size2d{3, 5}, 2, 0, tensor::Size2d{1, 2}, 2);
  if (name == "conv1d") return std::make_shared<Conv1d>(4, 6, 5, 2, 2, 1, 2, false);
  if (name == "maxpool2d") return std::make_shared<MaxPool2d>(3, tensor::Size2d(2), 1);
  if (name == "avgpool2d") return std::make_shared<AvgPool2d>(2, std::nullopt, 0, false);
  if (name == "batchnorm2d") return std::make_shared<BatchNorm2d>(16, 1e-5, std::nullopt, false);
  if (name == "batchnorm1d") return std::make_shared<BatchNorm1d>(8, 1e-3, 0.1, true, false);
  if (name == "groupnorm") return std::make_shared<GroupNorm>(4, 16, 1e-6, false);
  if (name == "layernorm") return std::make_shared<LayerNorm>(tensor::Shape{8, 4}, 1e-5, false);
  if (name == "lstm") return std::make_shared<LSTM>(8, 16, 2, true, true, 0.1, true);
  if (name == "gru") return std::make_shared<GRU>(4, 8, 1, false);
  return std::make_shared<RNN>(4, 8, 1, "relu");
}

}  // namespace

TEST_CASE("layers built through their *Options have PyTorch's repr and the positional layer's parameters",
          "[nn][options][fixture]") {
  const nlohmann::json want = testing::read_nn_json_fixture("options_reference.json");
  for (const auto& [name, repr] : want.items()) {
    INFO(name);
    tensor::manual_seed(3);
    const auto a = through_options(name);
    tensor::manual_seed(3);
    const auto b = positionally(name);
    CHECK(a->repr() == repr.get<std::string>());
    CHECK(a->repr() == b->repr());
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    REQUIRE(pa.keys() == pb.keys());
    for (const auto& [key, p] : pa) CHECK(tensor::equal(p, pb.at(key)));
    CHECK(a->named_buffers().keys() == b->named_buffers().keys());
  }
  // RNN's nonlinearity (which PyTorch's repr leaves out) reaches the layer.
  CHECK(std::dynamic_pointer_cast<RNN>(through_options("rnn"))->mode == "RNN_RELU");
}

TEST_CASE("the options' defaults are the positional constructors' (PyTorch's)", "[nn][options]") {
  CHECK(Conv2d(Conv2dOptions(3, 4, 3)).repr() == Conv2d(3, 4, 3).repr());
  CHECK(Conv1d(Conv1dOptions(3, 4, 3)).repr() == Conv1d(3, 4, 3).repr());
  CHECK(MaxPool2d(MaxPool2dOptions(2)).repr() == MaxPool2d(2).repr());
  CHECK(AvgPool2d(AvgPool2dOptions(2)).repr() == AvgPool2d(2).repr());
  CHECK(BatchNorm2d(BatchNormOptions(4)).repr() == BatchNorm2d(4).repr());
  CHECK(GroupNorm(GroupNormOptions(2, 4)).repr() == GroupNorm(2, 4).repr());
  CHECK(LayerNorm(LayerNormOptions({4})).repr() == LayerNorm({4}).repr());
  CHECK(LSTM(LSTMOptions(3, 4)).repr() == LSTM(3, 4).repr());
  CHECK(RNN(RNNOptions(3, 4)).mode == "RNN_TANH");
  const MultiheadAttention mha(MultiheadAttentionOptions(16, 4).batch_first(true).kdim(8).vdim(12));
  CHECK(mha.batch_first);
  CHECK(mha.named_parameters().keys() ==
        MultiheadAttention(16, 4, 0.0, true, true, false, false, 8, 12).named_parameters().keys());
  // An option that is RNN's only is refused by the gated layers rather than ignored.
  CHECK_THROWS_WITH(LSTM(LSTMOptions(3, 4).nonlinearity("relu")),
                    Contains("LSTM: nonlinearity 'relu' is an option of RNN only"));
  CHECK_THROWS_WITH(GRU(GRUOptions(3, 4).nonlinearity("relu")), Contains("GRU: nonlinearity 'relu'"));
}

TEST_CASE("Embedding::from_pretrained: the given weights, frozen unless asked", "[nn][layers]") {
  const Tensor vectors = tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, tensor::Shape{3, 2});
  const auto frozen = Embedding::from_pretrained(vectors);
  CHECK(frozen->repr() == "Embedding(3, 2)");
  CHECK_FALSE(frozen->weight.requires_grad());
  const Tensor ids = tensor::from_vector(std::vector<int64_t>{2, 0}, tensor::Shape{2});
  CHECK(tensor::equal(frozen->forward(ids), tensor::from_vector(std::vector<float>{5, 6, 1, 2}, tensor::Shape{2, 2})));
  // As PyTorch's Parameter(embeddings): the same storage.
  CHECK(frozen->weight.data_ptr<float>() == vectors.data_ptr<float>());
  const auto trained = Embedding::from_pretrained(vectors.clone(), false);
  CHECK(trained->weight.requires_grad());
  CHECK(trained->parameters().size() == 1);
  trained->forward(ids).sum().backward();
  CHECK(tensor::equal(trained->weight.grad(),
                      tensor::from_vector(std::vector<float>{1, 1, 0, 0, 1, 1}, tensor::Shape{3, 2})));
  CHECK_THROWS_WITH(Embedding::from_pretrained(tensor::ones({4})),
                    Contains("Embedding.from_pretrained: embeddings must be 2-dimensional"));
}
