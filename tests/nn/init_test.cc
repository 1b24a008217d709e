// nn::init against torch.nn.init (fixtures/make_init_fixture.py): after the same seed each
// initialiser puts the same numbers in the tensor. uniform_ and the normals in float64 are
// the same operations on the same draws (a few ulp); float32 normals round the same Box-Muller
// values (PyTorch computes them in float in its batched path): 2 ulp of float32. trunc_normal_
// goes through erfinv, which torch computes in the tensor's dtype with its own approximation:
// a few float32 ulp. Then calculate_gain, the fans, and the errors.
#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/nn/init.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = tinyddp::testing::read_nn_json_fixture("init_reference.json");
  return j;
}

// The call the fixture's case `name` makes.
void initialise(const std::string& name, const Tensor& t) {
  if (name == "uniform") init::uniform_(t, -0.3, 0.7);
  if (name == "normal_small") init::normal_(t, 0.5, 2.0);
  if (name == "normal_batched") init::normal_(t, -1.0, 0.1);
  if (name == "normal_f64") init::normal_(t, 0.0, 3.0);
  if (name == "xavier_uniform") init::xavier_uniform_(t, init::calculate_gain("relu"));
  if (name == "xavier_normal") init::xavier_normal_(t);
  if (name == "kaiming_uniform_linear") init::kaiming_uniform_(t, std::sqrt(5.0));
  if (name == "kaiming_uniform_fan_out") init::kaiming_uniform_(t, 0.0, "fan_out", "relu");
  if (name == "kaiming_normal") init::kaiming_normal_(t, 0.0, "fan_in", "relu");
  if (name == "trunc_normal") init::trunc_normal_(t, 0.1, 0.5, -0.4, 0.8);
  if (name == "trunc_normal_f64") init::trunc_normal_(t);
  if (name == "constant") init::constant_(t, 0.25);
}

}  // namespace

TEST_CASE("nn::init draws torch.nn.init's numbers from the same seed", "[nn][init][fixture]") {
  for (const nlohmann::json& c : reference()["cases"]) {
    const std::string name = c["name"];
    INFO(name);
    const std::vector<int64_t> dims = c["shape"].get<std::vector<int64_t>>();
    const tensor::DType dtype = c["dtype"] == "float64" ? tensor::kFloat64 : tensor::kFloat32;
    tensor::manual_seed(c["seed"].get<uint64_t>());
    const Tensor t = tensor::empty(tensor::Shape(dims.begin(), dims.end()), dtype).requires_grad_();  // a parameter
    initialise(name, t);
    const std::vector<double> want = c["values"].get<std::vector<double>>();
    const std::vector<double> got = t.detach().to(tensor::kFloat64).reshape({-1}).to_vector<double>();
    REQUIRE(got.size() == want.size());
    const double ulp = dtype == tensor::kFloat64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
    const double ulps = name.rfind("trunc_normal", 0) == 0 ? 8 : (name.rfind("normal", 0) == 0 ? 2 : 1);
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << ": " << got[i] << " against torch's " << want[i]);
      CHECK(std::fabs(got[i] - want[i]) <= ulps * ulp * std::max(1.0, std::fabs(want[i])));
    }
    CHECK(t.requires_grad());
    CHECK_FALSE(t.grad_fn());  // filled without recording a graph
  }
}

TEST_CASE("calculate_gain and the fans as torch's; bad arguments are named", "[nn][init]") {
  for (const nlohmann::json& g : reference()["gains"]) {
    const std::string nonlinearity = g["nonlinearity"];
    const double param = g["param"].is_null() ? 0.01 : g["param"].get<double>();
    INFO(nonlinearity << " " << param);
    CHECK(std::fabs(init::calculate_gain(nonlinearity, param) - g["gain"].get<double>()) <= 1e-15);
  }
  CHECK(init::calculate_fan_in_and_fan_out(tensor::empty({6, 4, 3, 3})) == std::pair<int64_t, int64_t>{36, 54});
  CHECK_THROWS_WITH(init::calculate_fan_in_and_fan_out(tensor::empty({5})),
                    Contains("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"));
  CHECK_THROWS_WITH(init::kaiming_uniform_(tensor::empty({2, 2}), 0.0, "fan_avg"),
                    Contains("mode fan_avg not supported, please use one of fan_in, fan_out"));
  CHECK_THROWS_WITH(init::calculate_gain("swish"), Contains("calculate_gain: unsupported nonlinearity swish"));
}
