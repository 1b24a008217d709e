// ModuleList, ModuleDict, named_modules/modules/apply against PyTorch
// (fixtures/make_containers_fixture.py): a model of a list of Linear layers and a dict of heads
// has PyTorch's module and parameter names, loads PyTorch's state dict and gives its output
// (float32, 1e-6: a few ulp of the same products); the containers' own behaviour and errors;
// ParameterList and ParameterDict's names and repr.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/containers.h"
#include "tinyddp/nn/init.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

// The fixture's Net: two Linear layers in a ModuleList, two heads in a ModuleDict.
struct Net : Module {
  Net() : Module("Net") {
    layers = register_module("layers", std::make_shared<ModuleList>(std::vector<std::shared_ptr<Module>>{
                                           std::make_shared<Linear>(4, 8), std::make_shared<Linear>(8, 8)}));
    heads = register_module("heads",
                            std::make_shared<ModuleDict>(std::vector<std::pair<std::string, std::shared_ptr<Module>>>{
                                {"cls", std::make_shared<Linear>(8, 3)}, {"reg", std::make_shared<Linear>(8, 1)}}));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = input;
    for (const auto& layer : *layers) x = tensor::relu((*layer)(x));
    return tensor::cat({(*(*heads)["cls"])(x), (*(*heads)["reg"])(x)}, 1);
  }
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<ModuleDict> heads;
};

}  // namespace

TEST_CASE("ModuleList and ModuleDict give PyTorch's names; PyTorch's state dict loads and runs", "[nn][containers]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("containers_reference.json");
  auto net = std::make_shared<Net>();
  CHECK(net->named_modules().keys() == ref["named_modules"].get<std::vector<std::string>>());
  OrderedDict<Tensor> state;
  for (const nlohmann::json& entry : ref["state_dict"]) {
    const std::vector<int64_t> dims = entry["shape"].get<std::vector<int64_t>>();
    state.insert(entry["name"].get<std::string>(), tensor::from_vector(entry["values"].get<std::vector<float>>(),
                                                                       tensor::Shape(dims.begin(), dims.end())));
  }
  CHECK(net->state_dict().keys() == state.keys());
  net->load_state_dict(state);
  const Tensor x = tensor::from_vector(ref["input"].get<std::vector<float>>(), tensor::Shape{5, 4});
  const Tensor want = tensor::from_vector(ref["output"].get<std::vector<float>>(), tensor::Shape{5, 4});
  CHECK(tensor::allclose((*net)(x), want, 1e-6, 1e-6));
}

TEST_CASE("ModuleList and ModuleDict: indexing, types, replacement, errors", "[nn][containers]") {
  ModuleList list({std::make_shared<Linear>(2, 3), std::make_shared<ReLU>()});
  list.append(std::make_shared<Linear>(3, 1));
  CHECK(list.size() == 3);
  CHECK(list[-1].get() == list[2].get());
  CHECK(list.at<Linear>(0)->weight.sizes() == tensor::Shape{3, 2});
  CHECK(list.named_parameters().keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK_THROWS_WITH(list[3], Contains("ModuleList: index 3 is out of range for 3 modules"));
  CHECK_THROWS_WITH(list.at<Linear>(1), Contains("ModuleList: module 1 is a ReLU, not the type asked for"));
  CHECK_THROWS_WITH(list(tensor::zeros({1, 2})), Contains("ModuleList has no forward"));
  ModuleDict dict({{"a", std::make_shared<Linear>(2, 2)}, {"b", std::make_shared<Tanh>()}});
  const auto replacement = std::make_shared<Linear>(2, 5);
  dict.insert("a", replacement);  // replaced in place, keeping its position
  CHECK(dict.keys() == std::vector<std::string>{"a", "b"});
  CHECK(dict["a"].get() == replacement.get());
  CHECK_THROWS_WITH(dict["c"], Contains("ModuleDict: no module 'c' (keys: 'a', 'b')"));
  // A clone for DataParallel's replicas keeps the structure.
  const auto copy = std::dynamic_pointer_cast<ModuleList>(list.clone_structure());
  REQUIRE(copy != nullptr);
  CHECK(copy->named_parameters().keys() == list.named_parameters().keys());
}

TEST_CASE("named_modules, modules and apply walk the tree as PyTorch's", "[nn][containers]") {
  auto net = std::make_shared<Net>();
  // A module reached twice is listed once, under its first name.
  net->register_module("again", (*net->layers)[0]);
  CHECK(net->named_modules("model").keys() == std::vector<std::string>{"model", "model.layers", "model.layers.0",
                                                                       "model.layers.1", "model.heads",
                                                                       "model.heads.cls", "model.heads.reg"});
  CHECK(net->modules(false).size() == 6);
  // apply: children first, then the module itself (torch's order); an initialiser per layer.
  std::vector<std::string> order;
  net->apply([&](Module& m) {
    order.push_back(m.type_name());
    if (auto* linear = dynamic_cast<Linear*>(&m)) init::zeros_(linear->bias);
  });
  CHECK(order.front() == "Linear");
  CHECK(order.back() == "Net");
  CHECK(tensor::equal(net->heads->at<Linear>("cls")->bias, tensor::zeros({3})));
  Net on_stack;
  CHECK_THROWS_WITH(on_stack.named_modules(), Contains("named_modules: this Net is not held by a std::shared_ptr"));
  CHECK(on_stack.named_modules("", false).size() == 6);
}

TEST_CASE("Sequential: append, extend, negative indices and slices, as torch.nn.Sequential", "[nn][containers]") {
  tensor::manual_seed(3);
  auto seq = std::make_shared<Sequential>();
  seq->append(std::make_shared<Linear>(4, 8));
  seq->extend({std::make_shared<ReLU>(), std::make_shared<Linear>(8, 2), std::make_shared<Tanh>()});
  CHECK(seq->size() == 4);
  CHECK(seq->named_parameters().keys() == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK((*seq)[-1]->type_name() == "Tanh");
  CHECK((*seq)[-4].get() == (*seq)[0].get());
  CHECK_THROWS_WITH((*seq)[4], Contains("Sequential: index 4 is out of range for 4 modules"));
  CHECK_THROWS_WITH((*seq)[-5], Contains("Sequential: index -5 is out of range for 4 modules"));
  // seq[1:3] keeps the modules (shared) and their names; seq[:-1] and an empty slice.
  const auto middle = seq->slice(1, 3);
  CHECK(middle->named_children().keys() == std::vector<std::string>{"1", "2"});
  CHECK((*middle)[1].get() == (*seq)[2].get());
  CHECK(middle->named_parameters().keys() == std::vector<std::string>{"2.weight", "2.bias"});
  CHECK((*middle)[0]->type_name() == "ReLU");
  CHECK(seq->slice(0, -1)->size() == 3);
  CHECK(seq->slice(3, 1)->size() == 0);
  CHECK(seq->slice(-10, 10)->size() == 4);
  const Tensor x = tensor::randn({5, 4});
  CHECK(tensor::equal((*seq->slice(2, 4))((*seq->slice(0, 2))(x)), (*seq)(x)));
  CHECK(middle->clone_structure()->named_children().keys() == std::vector<std::string>{"1", "2"});
}

TEST_CASE("ParameterList and ParameterDict: PyTorch's names and repr, indexing, errors", "[nn][containers]") {
  // The fixture's Scaled: a ParameterList, a ParameterDict (in insertion order) and a Linear.
  struct Scaled : Module {
    Scaled() : Module("Scaled") {
      scales = register_module("scales", std::make_shared<ParameterList>(std::vector<Tensor>{
                                             tensor::ones({3, 4}), tensor::zeros({5}, tensor::kFloat64)}));
      gains = register_module("gains", std::make_shared<ParameterDict>(std::vector<std::pair<std::string, Tensor>>{
                                           {"encoder", tensor::ones({2})}, {"decoder", tensor::ones({1, 2})}}));
      register_module("lin", std::make_shared<Linear>(2, 2));
    }
    Tensor forward(const Tensor& x) override { return x; }
    std::shared_ptr<ParameterList> scales;
    std::shared_ptr<ParameterDict> gains;
  };
  const nlohmann::json want = testing::read_nn_json_fixture("containers_reference.json")["parameter_containers"];
  Scaled model;
  CHECK(model.repr() == want["repr"].get<std::string>());
  CHECK(model.named_parameters().keys() == want["names"].get<std::vector<std::string>>());
  // Registered as parameters: they require grad and an optimizer sees them.
  CHECK((*model.scales)[-1].requires_grad());
  CHECK(model.parameters().size() == 6);
  size_t n = 0;
  for (const Tensor& p : *model.scales) n += static_cast<size_t>(p.numel());
  CHECK(n == 17);
  model.gains->insert("encoder", tensor::zeros({2}));  // replaced in place, order kept
  CHECK(model.gains->keys() == std::vector<std::string>{"encoder", "decoder"});
  CHECK(tensor::equal((*model.gains)["encoder"], tensor::zeros({2})));
  CHECK(ParameterList().repr() == "ParameterList()");
  CHECK_THROWS_WITH((*model.scales)[2], Contains("ParameterList: index 2 is out of range for 2 parameters"));
  CHECK_THROWS_WITH((*model.gains)["bias"], Contains("ParameterDict: no parameter 'bias' (keys: encoder, decoder)"));
  CHECK_THROWS_WITH(model.scales->forward(tensor::ones({1})), Contains("ParameterList has no forward"));
  // clone_structure: the same names, shapes and dtypes.
  const auto copy = model.scales->clone_structure();
  CHECK(copy->repr() == model.scales->repr());
}
