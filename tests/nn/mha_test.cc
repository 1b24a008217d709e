// MultiheadAttention against PyTorch's (fixtures/make_mha_fixture.py): its initial weights after
// the same seed (out_proj drawn as a Linear, then xavier_uniform_ for in_proj_weight), its
// parameter names, and in float64 (1e-12: the same roundings up to summation order) a masked
// self-attention (causal bool attn_mask, key_padding_mask; output, averaged weights, every
// gradient) and a batch_first cross-attention (float mask, weights per head); errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/multihead_attention.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::doubles;

void check_close(const Tensor& got, const nlohmann::json& want) {
  CHECK(tensor::allclose(got, doubles(want, got.sizes()), 1e-12, 1e-12));
}

}  // namespace

TEST_CASE("MultiheadAttention equals PyTorch's: initial weights, names, masked self- and cross-attention",
          "[nn][attention][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("mha_reference.json");
  tensor::manual_seed(ref["init"]["seed"].get<uint64_t>());
  MultiheadAttention fresh(8, 2);
  CHECK(fresh.state_dict().keys() ==
        std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(tensor::allclose(fresh.in_proj_weight.detach(),
                         doubles(ref["init"]["in_proj_weight"], {24, 8}).to(tensor::kFloat32), 0, 0));
  CHECK(tensor::allclose(fresh.out_proj->weight.detach(),
                         doubles(ref["init"]["out_proj.weight"], {8, 8}).to(tensor::kFloat32), 0, 0));

  MultiheadAttention mha(8, 2);
  tinyddp::testing::load_float64_state(mha, ref["state"]);
  const nlohmann::json& c = ref["self"];
  const Tensor x = doubles(c["x"], {5, 3, 8}).requires_grad_();
  const Tensor causal = tensor::triu(tensor::ones({5, 5}), 1).to(tensor::kBool);
  std::vector<int64_t> padding;
  for (const bool b : c["padding"].get<std::vector<bool>>()) padding.push_back(b ? 1 : 0);
  const Tensor pad = tensor::from_vector(padding, tensor::Shape{3, 5}).to(tensor::kBool);
  const auto [y, w] = mha.forward(x, x, x, pad, true, causal);
  check_close(y, c["out"]);
  check_close(w, c["weights"]);
  y.backward(doubles(c["grad_out"], {5, 3, 8}));
  check_close(x.grad(), c["grad_x"]);
  for (const auto& [name, p] : mha.named_parameters()) {
    INFO(name);
    check_close(p.grad(), c["grads"][name]);
  }

  MultiheadAttention cross(8, 2, 0.0, true, /*batch_first=*/true);
  tinyddp::testing::load_float64_state(cross, ref["state"]);
  const nlohmann::json& d = ref["cross"];
  const Tensor q = doubles(d["q"], {2, 4, 8}).requires_grad_(), kv = doubles(d["kv"], {2, 6, 8}).requires_grad_();
  const auto [out, per_head] = cross.forward(q, kv, kv, Tensor(), true, doubles(d["mask"], {4, 6}), false);
  REQUIRE(per_head.sizes() == tensor::Shape{2, 2, 4, 6});
  check_close(out, d["out"]);
  check_close(per_head, d["weights"]);
  out.backward(doubles(d["grad_out"], {2, 4, 8}));
  check_close(q.grad(), d["grad_q"]);
  check_close(kv.grad(), d["grad_kv"]);
}

TEST_CASE("MultiheadAttention: gradcheck, unbatched input, errors", "[nn][attention]") {
  using Inputs = std::vector<Tensor>;
  tensor::manual_seed(1);
  auto mha = std::make_shared<MultiheadAttention>(4, 2);
  mha->to(tensor::kFloat64);
  tensor::Generator gen(2);
  const Tensor x = tensor::randn({3, 2, 4}, tensor::kFloat64, &gen).requires_grad_();
  CHECK(autograd::gradcheck([&](const Inputs& v) { return mha->forward(v[0], v[0], v[0]).first; }, {x}) == "");
  // An unbatched [L, E] query is the batch of one.
  const Tensor one = x.detach().narrow(1, 0, 1);
  CHECK(tensor::allclose(mha->forward(one.squeeze(1), one.squeeze(1), one.squeeze(1)).first,
                         mha->forward(one, one, one).first.squeeze(1), 1e-12, 1e-12));
  CHECK_THROWS_WITH(MultiheadAttention(6, 4), Contains("embed_dim (6) must be divisible by num_heads (4)"));
  CHECK_THROWS_WITH(
      mha->forward(x, x, tensor::randn({3, 2, 5}, tensor::kFloat64)),
      Contains(
          "expected query, key and value of sizes 4, 4 and 4 (embed_dim, kdim, vdim) in their last dim, got 4, 4, 5"));
  CHECK_THROWS_WITH(mha->forward(x, x, x, tensor::zeros({2, 2}, tensor::kBool)),
                    Contains("key_padding_mask of shape [2, 2] should be [2, 3]"));
  // PyTorch's layout for a module with an extra_repr and children: the extra line first, inside.
  CHECK(mha->repr().rfind("MultiheadAttention(\n  embed_dim=4, num_heads=2", 0) == 0);
}

TEST_CASE("MultiheadAttention with kdim, vdim, add_bias_kv and add_zero_attn equals PyTorch's",
          "[nn][attention][fixture]") {
  const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("mha_reference.json")["extras"];
  const auto make = [] { return MultiheadAttention(8, 2, 0.0, true, false, true, true, 5, 6); };
  tensor::manual_seed(ref["seed"].get<uint64_t>());
  MultiheadAttention fresh = make();
  CHECK(fresh.state_dict().keys() == ref["names"].get<std::vector<std::string>>());
  for (const auto& [name, t] : fresh.state_dict()) {
    INFO(name);
    CHECK(tensor::equal(t, doubles(ref["init"][name], t.sizes()).to(tensor::kFloat32)));
  }
  MultiheadAttention mha = make();
  tinyddp::testing::load_float64_state(mha, ref["state"]);
  const Tensor q = doubles(ref["q"], {4, 3, 8}).requires_grad_(), k = doubles(ref["k"], {6, 3, 5}).requires_grad_(),
               v = doubles(ref["v"], {6, 3, 6}).requires_grad_();
  std::vector<int64_t> padding;
  for (const bool b : ref["padding"].get<std::vector<bool>>()) padding.push_back(b ? 1 : 0);
  const Tensor pad = tensor::from_vector(padding, tensor::Shape{3, 6}).to(tensor::kBool);
  const Tensor attn_mask = tensor::triu(tensor::ones({4, 6}), 3).to(tensor::kBool);
  const auto [y, w] = mha.forward(q, k, v, pad, true, attn_mask);
  REQUIRE(w.sizes() == tensor::Shape{3, 4, 8});  // 6 keys, bias_k's and the zero one
  check_close(y, ref["out"]);
  check_close(w, ref["weights"]);
  y.backward(doubles(ref["grad_out"], {4, 3, 8}));
  check_close(q.grad(), ref["grad_q"]);
  check_close(k.grad(), ref["grad_k"]);
  check_close(v.grad(), ref["grad_v"]);
  for (const auto& [name, p] : mha.named_parameters()) {
    INFO(name);
    check_close(p.grad(), ref["grads"][name]);
  }
}

TEST_CASE("MultiheadAttention: attention dropout in training only", "[nn][attention]") {
  tensor::manual_seed(3);
  MultiheadAttention mha(4, 2, 0.5);
  const Tensor x = tensor::randn({5, 2, 4});
  const auto [trained, trained_weights] = mha.forward(x, x, x);
  mha.eval();
  const auto [evaluated, weights] = mha.forward(x, x, x);
  CHECK_FALSE(tensor::allclose(trained, evaluated));
  // In eval every row of weights sums to 1; in training the dropped ones are gone and the kept
  // scaled by 2, so the rows' sums vary.
  CHECK(tensor::allclose(tensor::sum(weights, {-1}), tensor::ones({2, 5})));
  CHECK_FALSE(tensor::allclose(tensor::sum(trained_weights, {-1}), tensor::ones({2, 5})));
}
