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

TEST_CASE("Value: bool, int, float and string leaves; a dict's get, contains and set", "[nn][nested][kwargs]") {
  const Tensor a = tensor::full({2}, 1.0);
  Value kwargs = Value::dict({{"bias", a}, {"causal", true}, {"heads", 4}, {"scale", 0.5}, {"mode", "sum"}});
  CHECK(kwargs["causal"].as_bool());
  CHECK(kwargs["heads"].as_int() == 4);
  CHECK(kwargs["heads"].as_double() == 4.0);  // an int reads as a float, as Python's float(4)
  CHECK(kwargs["scale"].as_double() == 0.5);
  CHECK(kwargs["mode"].as_string() == "sum");
  CHECK(Value(int64_t{1} << 40).as_int() == (int64_t{1} << 40));
  CHECK(kwargs.describe() == "dict{bias: tensor [2], causal: true, heads: 4, scale: 0.5, mode: 'sum'}");
  // Only tensors are found and replaced; the other leaves stay.
  REQUIRE(kwargs.tensors().size() == 1);
  const Value doubled = kwargs.with_tensors({tensor::mul(a, 2.0)});
  CHECK(tensor::equal(doubled["bias"].tensor(), tensor::full({2}, 2.0)));
  CHECK(doubled["mode"].as_string() == "sum");
  CHECK(doubled["scale"].as_double() == 0.5);
  // get, contains, set (in place, or last).
  CHECK(kwargs.get("missing").is_none());
  CHECK(kwargs.get("missing", 3).as_int() == 3);
  CHECK(kwargs.get("heads", 3).as_int() == 4);
  CHECK(kwargs.contains("scale"));
  CHECK_FALSE(kwargs.contains("dropout"));
  kwargs.set("heads", 8);
  kwargs.set("dropout", 0.1);
  CHECK(kwargs.describe() == "dict{bias: tensor [2], causal: true, heads: 8, scale: 0.5, mode: 'sum', dropout: 0.1}");
  // Errors name what the value is.
  CHECK_THROWS_WITH(kwargs["mode"].as_int(), Contains("expected an int, got 'sum'"));
  CHECK_THROWS_WITH(kwargs["scale"].as_bool(), Contains("expected a bool, got 0.5"));
  CHECK_THROWS_WITH(kwargs["causal"].as_double(), Contains("expected a float, got true"));
  CHECK_THROWS_WITH(kwargs["heads"].as_string(), Contains("expected a string, got 8"));
  CHECK_THROWS_WITH(kwargs["heads"].tensor(), Contains("expected a tensor, got 8"));
  Value list = Value::list({1, 2});
  CHECK_THROWS_WITH(list.set("k", 1), Contains("set('k') on list[1, 2], not a dict"));
  CHECK_THROWS_WITH(list.get("k"), Contains("expected a dict, got list[1, 2]"));
}
