// nn::Value, the nested outputs a forward may return: kinds, accessors and their errors, the
// depth-first order of tensors() (a dict's in insertion order) and with_tensors, which puts
// replacements back in the same places; a module's forward_nested by default; hooks that see
// and replace the tensors of a nested output.
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/layers.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

TEST_CASE("Value: nested tensors, found depth first and replaced in place", "[nn][nested]") {
  const Tensor a = tensor::full({1}, 1.0), b = tensor::full({2}, 2.0), c = tensor::full({3}, 3.0);
  const Value v = Value::list({a, Value::dict({{"z", b}, {"y", Value::list({c, Value()})}})});
  CHECK(v.is_list());
  CHECK(v.size() == 2);
  CHECK(v[1]["y"][0].tensor().numel() == 3);
  CHECK(v[1]["y"][1].is_none());
  const std::vector<Tensor> found = v.tensors();
  REQUIRE(found.size() == 3);
  CHECK((found[0].numel() == 1 && found[1].numel() == 2 && found[2].numel() == 3));  // z before y: insertion order
  const Value doubled = v.with_tensors({tensor::mul(a, 2.0), tensor::mul(b, 2.0), tensor::mul(c, 2.0)});
  CHECK(tensor::equal(doubled[1]["z"].tensor(), tensor::full({2}, 4.0)));
  CHECK(tensor::equal(doubled[1]["y"][0].tensor(), tensor::full({3}, 6.0)));
  CHECK(doubled[1]["y"][1].is_none());
  CHECK(v.describe() == "list[tensor [1], dict{z: tensor [2], y: list[tensor [3], none]}]");
  CHECK_THROWS_WITH(v.tensor(), Contains("Value: expected a tensor, got list[tensor [1]"));
  CHECK_THROWS_WITH(v[1]["x"], Contains("Value: no key 'x' in dict{z: tensor [2]"));
  CHECK_THROWS_WITH(v[2], Contains("index 2 is out of range for a list of 2"));
  CHECK_THROWS_WITH(v.with_tensors({a}), Contains("too few replacements"));
  CHECK_THROWS_WITH(Value::dict({{"k", a}, {"k", b}}), Contains("duplicate key 'k'"));
}

namespace {

// x -> {"out": lin(x), "extra": [lin(x) * 2]}
struct Nested : Module {
  std::shared_ptr<Linear> lin;
  Nested() : Module("Nested") { lin = register_module("lin", std::make_shared<Linear>(2, 2)); }
  Value forward_nested(const std::vector<Tensor>& in) override {
    const Tensor y = (*lin)(in.at(0));
    return Value::dict({{"out", y}, {"extra", Value::list({tensor::mul(y, 2.0)})}});
  }
};

}  // namespace

TEST_CASE("forward_nested: by default forward's output; hooks see and replace a nested output's tensors",
          "[nn][nested][hooks]") {
  auto linear = std::make_shared<Linear>(2, 2);
  const Tensor x = tensor::ones({1, 2});
  CHECK(tensor::equal(linear->call_nested({x}).tensor(), linear->forward(x)));
  auto nested = std::make_shared<Nested>();
  size_t seen = 0;
  nested->register_forward_hook([&](Module&, const Tensors&, const Tensors& out) -> std::optional<Tensors> {
    seen = out.size();
    return Tensors{out[0], tensor::zeros_like(out[1])};
  });
  const Value out = nested->call_nested({x});
  CHECK(seen == 2);
  CHECK(tensor::equal(out["out"].tensor(), nested->lin->forward(x)));
  CHECK(tensor::equal(out["extra"][0].tensor(), tensor::zeros({1, 2})));
}
