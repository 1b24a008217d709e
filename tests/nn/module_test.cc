// Module tests: registration and dotted names in PyTorch's order, the DDP tutorial's ToyModel and
// Sequential naming, state_dict / load_state_dict with their errors (and the module left
// unchanged), tied weights (listed and saved once), zero_grad, train/eval, to(dtype) keeping
// tensor handles, repr.
#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tensor::Shape;

namespace {
struct Block : Module {
  Block() : Module("Block") {
    scale = register_parameter("scale", tensor::ones({2}));
    running = register_buffer("running", tensor::zeros({2}));
    inner = register_module("inner", std::make_shared<Linear>(2, 2));
  }
  Tensor scale, running;
  std::shared_ptr<Linear> inner;
};
}  // namespace

TEST_CASE("parameters and buffers are named with dots, depth first, in registration order", "[nn][module]") {
  tensor::manual_seed(0);
  ToyModel toy;
  CHECK(toy.named_parameters().keys() ==
        std::vector<std::string>{"net1.weight", "net1.bias", "net2.weight", "net2.bias"});
  CHECK(toy.parameters().size() == 4);
  CHECK(toy.net1->weight.sizes() == Shape{10, 10});
  CHECK(toy.net2->weight.sizes() == Shape{5, 10});
  CHECK(toy.named_parameters().at("net2.bias").is_same(toy.net2->bias));
  CHECK(toy.children().size() == 3);
  for (const Tensor& p : toy.parameters()) CHECK(p.requires_grad());

  const auto seq = mlp({4, 8, 8, 3});
  CHECK(seq->named_parameters().keys() ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});
  CHECK(seq->size() == 5);
  CHECK((*seq)[1]->type_name() == "ReLU");
  CHECK_THROWS_WITH((*seq)[5], Contains("Sequential: index 5 is out of range for 5 modules"));

  Block block;
  CHECK(block.named_parameters().keys() == std::vector<std::string>{"scale", "inner.weight", "inner.bias"});
  CHECK(block.named_buffers().keys() == std::vector<std::string>{"running"});
  CHECK_FALSE(block.running.requires_grad());
  // state_dict: each module's parameters, then its buffers, then its children.
  CHECK(block.state_dict().keys() == std::vector<std::string>{"scale", "running", "inner.weight", "inner.bias"});
  CHECK(block.named_parameters(false).keys() == std::vector<std::string>{"scale"});
}

TEST_CASE("registration errors", "[nn][module][errors]") {
  Module m("Custom");
  m.register_parameter("w", tensor::zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", tensor::zeros({2})),
                    Contains("register_parameter: 'w' is already registered in Custom"));
  CHECK_THROWS_WITH(m.register_buffer("a.b", tensor::zeros({2})), Contains("invalid name 'a.b'"));
  CHECK_THROWS_WITH(m.register_parameter("x", Tensor()), Contains("parameter 'x' is an undefined tensor"));
  const Tensor leaf = tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(m.register_parameter("y", tensor::mul(leaf, 2.0)),
                    Contains("must be a leaf (it was produced by MulBackward)"));
  CHECK_THROWS_WITH(m.forward(tensor::zeros({1})), Contains("Custom: forward(const Tensor&) is not implemented"));
  CHECK_THROWS_WITH(mlp({3}), Contains("mlp: need at least an input and an output width"));
  Linear linear(3, 2);
  CHECK_THROWS_WITH(linear(tensor::zeros({4, 5})),
                    Contains("Linear: expected input with last dimension 3 (in_features), got shape [4, 5]"));
}

TEST_CASE("load_state_dict copies in place and reports every problem at once", "[nn][module][state_dict]") {
  tensor::manual_seed(0);
  ToyModel a;
  tensor::manual_seed(1);
  ToyModel b;
  const Tensor weight_handle = b.net1->weight;
  b.load_state_dict(a.state_dict());
  CHECK(tensor::equal(b.net1->weight, a.net1->weight));
  CHECK(b.net1->weight.is_same(weight_handle));  // same tensor, new values
  CHECK_FALSE(b.net1->weight.shares_storage(a.net1->weight));

  tensor::manual_seed(2);
  ToyModel c;
  const OrderedDict<Tensor> before = c.state_dict();
  std::vector<Tensor> snapshot;
  for (const auto& [name, t] : before) snapshot.push_back(t.clone());
  OrderedDict<Tensor> bad;
  bad.insert("net1.weight", tensor::zeros({10, 10}));
  bad.insert("net1.bias", tensor::zeros({7}));
  bad.insert("net3.weight", tensor::zeros({1}));
  try {
    c.load_state_dict(bad);
    FAIL("load_state_dict accepted a bad state dict");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Contains("error(s) loading the state dict of ToyModel (the module is unchanged)"));
    CHECK_THAT(message, Contains("missing key(s): \"net2.weight\", \"net2.bias\""));
    CHECK_THAT(message, Contains("unexpected key(s): \"net3.weight\""));
    CHECK_THAT(message, Contains("size mismatch for net1.bias (checkpoint [7], model [10])"));
  }
  size_t i = 0;
  for (const auto& [name, t] : c.state_dict()) CHECK(tensor::equal(t, snapshot[i++]));  // untouched, even net1.weight
  // Non-strict loading ignores missing/unexpected keys but still refuses mis-shaped ones.
  OrderedDict<Tensor> partial;
  partial.insert("net2.bias", tensor::ones({5}));
  partial.insert("extra", tensor::ones({1}));
  c.load_state_dict(partial, /*strict=*/false);
  CHECK(tensor::equal(c.net2->bias, tensor::ones({5})));
}

TEST_CASE("a DDP state dict and a plain model: the error says so; the prefix comes off", "[nn][module][state_dict]") {
  // DistributedDataParallel registers the model as its child "module", as PyTorch's does; a
  // Module holding a ToyModel there has the same state dict names.
  tensor::manual_seed(0);
  auto inner = std::make_shared<ToyModel>();
  Module wrapper("DistributedDataParallel");
  wrapper.register_module("module", inner);
  tensor::manual_seed(1);
  ToyModel plain;
  const auto error_of = [](Module& into, const OrderedDict<Tensor>& state) -> std::string {
    try {
      into.load_state_dict(state);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  };
  OrderedDict<Tensor> saved = wrapper.state_dict();
  CHECK_THAT(error_of(plain, saved),
             Contains("every unexpected key is a missing one with \"module.\" in front: the state dict was saved "
                      "from DistributedDataParallel") &&
                 Contains("nn::consume_prefix_in_state_dict_if_present(state, \"module.\")"));
  CHECK_THAT(error_of(wrapper, plain.state_dict()),
             Contains("every missing key is an unexpected one with \"module.\" in front") &&
                 Contains("Load it into ddp.module() instead"));
  consume_prefix_in_state_dict_if_present(saved, "module.");
  CHECK(saved.keys() == plain.state_dict().keys());
  plain.load_state_dict(saved);
  CHECK(tensor::equal(plain.net1->weight, inner->net1->weight));
  // Keys that differ otherwise get no such hint.
  OrderedDict<Tensor> other = inner->state_dict();
  other.insert("module.extra", tensor::ones({1}));
  CHECK_THAT(error_of(plain, other), !Contains("module.\" in front"));
}

TEST_CASE("zero_grad, train/eval and dtype conversion", "[nn][module]") {
  tensor::manual_seed(0);
  ToyModel model;
  const Tensor loss = mse_loss(model(tensor::randn({3, 10})), tensor::zeros({3, 5}));
  loss.backward();
  CHECK(model.net1->weight.grad().defined());
  model.zero_grad(/*set_to_none=*/false);
  CHECK(tensor::equal(model.net1->weight.grad(), tensor::zeros({10, 10})));
  model.zero_grad();
  CHECK_FALSE(model.net1->weight.grad().defined());
  CHECK(model.is_training());
  model.eval();
  CHECK_FALSE(model.net1->is_training());
  model.train();
  CHECK(model.net2->is_training());
  const Tensor handle = model.net1->weight;
  const Tensor before = handle.clone();
  model.to(tensor::kFloat64);
  CHECK(handle.dtype() == tensor::kFloat64);  // the same handle now holds float64 data
  CHECK(model.net1->weight.is_same(handle));
  CHECK(tensor::allclose(handle.to(tensor::kFloat32), before));
  CHECK(model(tensor::randn({2, 10}, tensor::kFloat64)).dtype() == tensor::kFloat64);
  CHECK_THROWS_WITH(model.to(tensor::kInt64), Contains("Module::to: expected a floating-point dtype, got int64"));
}

TEST_CASE("repr prints the module tree like PyTorch", "[nn][module]") {
  tensor::manual_seed(0);
  ToyModel model;
  CHECK(model.repr() ==
        "ToyModel(\n"
        "  (net1): Linear(in_features=10, out_features=10, bias=True)\n"
        "  (relu): ReLU()\n"
        "  (net2): Linear(in_features=10, out_features=5, bias=True)\n"
        ")");
}

namespace {
// A language model's tied embedding and head, as GPT has them.
struct Tied : Module {
  Tied() : Module("Tied") {
    wte = register_module("wte", std::make_shared<Embedding>(5, 3));
    head = register_module("head", std::make_shared<Linear>(3, 5, false));
    head->weight = head->replace_parameter("weight", wte->weight);
  }
  std::shared_ptr<Embedding> wte;
  std::shared_ptr<Linear> head;
};
}  // namespace

TEST_CASE("a tied weight is one parameter: listed, saved and given a gradient once", "[nn][module][tied]") {
  tensor::manual_seed(0);
  Tied model;
  CHECK(model.named_parameters().keys() == std::vector<std::string>{"wte.weight"});
  CHECK(model.state_dict().keys() == std::vector<std::string>{"wte.weight"});
  CHECK(model.tied_names() == std::vector<std::pair<std::string, std::string>>{{"head.weight", "wte.weight"}});
  CHECK(model.head->named_parameters().keys() == std::vector<std::string>{"weight"});
  CHECK_THROWS_WITH(model.head->replace_parameter("bias", tensor::zeros({5})),
                    Contains("replace_parameter: Linear has no parameter 'bias'"));

  // Both uses feed the one .grad: d/dW of sum(head(wte(ids))) is the sum of the two uses' gradients.
  const Tensor ids = tensor::tensor({1, 3, 1}, tensor::kInt64);
  tensor::sum(model.head->forward(model.wte->forward(ids))).backward();
  const Tensor w = model.wte->weight.detach().clone().requires_grad_();
  const Tensor a = w.detach().clone().requires_grad_();
  tensor::sum(tensor::matmul(tensor::embedding(ids, a), w.t())).backward();
  CHECK(tensor::allclose(model.wte->weight.grad(), tensor::add(w.grad(), a.grad()), 1e-6, 1e-6));

  // PyTorch's state dicts carry the head under its own name too: accepted, the last name wins.
  OrderedDict<Tensor> torch_style;
  torch_style.insert("wte.weight", tensor::zeros({5, 3}));
  torch_style.insert("head.weight", tensor::ones({5, 3}));
  model.load_state_dict(torch_style);
  CHECK(tensor::equal(model.head->weight, tensor::ones({5, 3})));
  OrderedDict<Tensor> head_only;
  head_only.insert("head.weight", tensor::full({5, 3}, 2.0));
  model.load_state_dict(head_only);  // either name supplies the tensor
  CHECK(tensor::equal(model.wte->weight, tensor::full({5, 3}, 2.0)));
  OrderedDict<Tensor> wrong;
  wrong.insert("wte.weight", tensor::zeros({5, 3}));
  wrong.insert("head.weight", tensor::zeros({4, 3}));
  CHECK_THROWS_WITH(model.load_state_dict(wrong),
                    Contains("size mismatch for head.weight (checkpoint [4, 3], model [5, 3])"));
  CHECK_THROWS_WITH(model.load_state_dict({}), Contains("missing key(s): \"wte.weight\""));
}

TEST_CASE("a stand-in is what parameters() lists; the module keeps computing with its own tensor",
          "[nn][module][stand_in]") {
  tensor::manual_seed(0);
  Block block;
  const Tensor shard = tensor::full({1}, 7.0).requires_grad_();  // as fully_shard's half of `scale`
  block.set_parameter_stand_in("scale", shard);
  CHECK(block.named_parameters().keys() ==
        std::vector<std::string>{"scale", "inner.weight", "inner.bias"});  // the names stay
  CHECK(block.named_parameters().at("scale").is_same(shard));
  CHECK(block.parameters()[0].is_same(shard));
  CHECK(block.named_registered_parameters().at("scale").is_same(block.scale));
  CHECK(block.state_dict().at("scale").sizes() == Shape{2});  // the registered tensors
  CHECK(is_placeholder(block.scale));
  CHECK(is_stand_in(shard));
  CHECK(!is_placeholder(shard));
  CHECK(!is_stand_in(block.scale));
  CHECK(!is_placeholder(block.inner->weight));
  // zero_grad reaches the stand-in, not the registered tensor.
  shard.mutable_grad() = tensor::ones({1});
  block.scale.mutable_grad() = tensor::ones({2});
  block.zero_grad();
  CHECK(!shard.grad().defined());
  CHECK(block.scale.grad().defined());
  // An optimizer steps what parameters() gives; a placeholder is refused, naming what to do.
  CHECK_NOTHROW(SGD(block.parameters(), SGDOptions(0.1)));
  CHECK_THROWS_WITH(SGD(block.named_registered_parameters().values(), SGDOptions(0.1)),
                    Contains("SGD: parameter 0 is a placeholder that fully_shard left in its module") &&
                        Contains("build the optimizer from model.parameters() after fully_shard"));
  CHECK_THROWS_WITH(clip_grad_norm_(block.parameters(), 1.0),
                    Contains("clip_grad_norm_: parameter 0 is a shard") && Contains("ddp::clip_sharded_grad_norm_"));
  CHECK_THROWS_WITH(block.set_parameter_stand_in("nope", shard),
                    Contains("set_parameter_stand_in: Block has no parameter 'nope'"));
  // Replacing the parameter drops its stand-in.
  const Tensor fresh = tensor::zeros({2});
  block.replace_parameter("scale", fresh);
  CHECK(block.parameters()[0].is_same(fresh));
}

TEST_CASE("get_submodule, get_parameter, get_buffer and requires_grad_, as torch's", "[nn][module]") {
  tensor::manual_seed(0);
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{std::make_shared<Block>()});
  CHECK(model->get_submodule("").get() == model.get());
  CHECK(model->get_submodule("0.inner")->type_name() == "Linear");
  CHECK(model->get_parameter("0.inner.weight").is_same(model->named_parameters().at("0.inner.weight")));
  CHECK(model->get_parameter("0.scale").sizes() == Shape{2});
  CHECK(model->get_buffer("0.running").sizes() == Shape{2});
  CHECK_THROWS_WITH(model->get_submodule("0.outer"),
                    Contains("get_submodule('0.outer'): Block has no attribute `outer`"));
  CHECK_THROWS_WITH(model->get_parameter("0.inner.scale"),
                    Contains("get_parameter('0.inner.scale'): Linear has no parameter `scale`"));
  CHECK_THROWS_WITH(model->get_buffer("0.scale"), Contains("get_buffer('0.scale'): Block has no buffer `scale`"));
  Module& same = model->requires_grad_(false);  // frozen
  CHECK(&same == model.get());
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.requires_grad());
  model->requires_grad_();
  for (const Tensor& p : model->parameters()) CHECK(p.requires_grad());
}
