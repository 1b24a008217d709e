// F::scaled_dot_product_attention, F::interpolate (and Upsample), F::adaptive_max_pool2d,
// F::instance_norm (and InstanceNorm1d/2d) and cross_entropy with class-probability targets, against PyTorch
// (fixtures/make_functional_fixtures.py): forwards and gradients in float64, a float64
// gradcheck of each, PyTorch's errors and reprs, and on a GPU against the CPU.
#include <functional>

#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/nn.h"
#include "tinyddp/tensor/cuda.h"

using namespace tinyddp;
using tensor::Shape;
using tensor::Tensor;
using V = std::vector<Tensor>;
using Catch::Contains;
namespace F = tinyddp::nn::functional;

namespace {
const testing::Fixture& fixture() {
  static const testing::Fixture f("tests/nn/fixtures/functional_reference.txt");
  return f;
}

// The fixture's bool mask: query i may see key j when (i + 2 j) % 3 != 0, query 1 none.
Tensor bool_mask(int64_t length, int64_t source) {
  std::vector<float> allowed;
  for (int64_t i = 0; i < length; ++i) {
    for (int64_t j = 0; j < source; ++j) allowed.push_back(i != 1 && (i + 2 * j) % 3 != 0 ? 1.0f : 0.0f);
  }
  return tensor::from_vector(allowed, Shape{length, source}).to(tensor::kBool);
}

F::InterpolateFuncOptions scale(std::vector<double> factors, std::string mode = "nearest") {
  return F::InterpolateFuncOptions().scale_factor(std::move(factors)).mode(std::move(mode));
}
F::InterpolateFuncOptions size(std::vector<int64_t> sizes, std::string mode = "nearest") {
  return F::InterpolateFuncOptions().size(std::move(sizes)).mode(std::move(mode));
}
}  // namespace

TEST_CASE("F::scaled_dot_product_attention matches PyTorch 2's definition, masks and gradients too",
          "[nn][functional][attention]") {
  const auto& f = fixture();
  const std::vector<std::pair<std::string, Shape>> qkv = {
      {"q", {2, 2, 3, 4}}, {"k", {2, 2, 5, 4}}, {"v", {2, 2, 5, 3}}};
  f.check_case("sdpa", qkv, {2, 2, 3, 3}, [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2]); });
  f.check_case("sdpa_scale", qkv, {2, 2, 3, 3},
               [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0.0, false, 0.3); });
  // a fully masked query row comes out zeros, its gradients zeros (not NaN)
  f.check_case("sdpa_bool_mask", qkv, {2, 2, 3, 3},
               [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], bool_mask(3, 5)); });
  auto with_mask = qkv;
  with_mask.push_back({"m", {3, 5}});
  f.check_case("sdpa_float_mask", with_mask, {2, 2, 3, 3},
               [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], v[3]); });
  f.check_case("sdpa_causal", qkv, {2, 2, 3, 3},
               [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0.0, true); });
  f.check_case("sdpa_causal_square", {{"q", {2, 4, 3}}, {"k", {2, 4, 3}}, {"v", {2, 4, 2}}}, {2, 4, 2},
               [](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0.0, true); });

  const Tensor q = tensor::zeros({2, 3, 4});
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q, q, bool_mask(3, 3), 0.0, true),
                    Contains("Explicit attn_mask should not be set when is_causal=True"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, tensor::zeros({2, 3, 5}), q),
                    Contains("query [..., L, E], key [..., S, E] and value [..., S, Ev] do not fit"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q.to(tensor::kFloat64), q),
                    Contains("Expected query, key, and value to have the same dtype"));
  // dropout falls on the attention weights, drawn from the generator given
  const Tensor a = tensor::randn({2, 3, 4}), b = tensor::randn({2, 3, 4}), c = tensor::randn({2, 3, 4});
  tensor::Generator g1(3), g2(3);
  const Tensor weights = tensor::softmax(tensor::mul(tensor::matmul(a, b.transpose(-2, -1)), 0.5), -1);
  CHECK(tensor::allclose(F::scaled_dot_product_attention(a, b, c, Tensor(), 0.5, false, std::nullopt, &g1),
                         tensor::matmul(tensor::dropout(weights, 0.5, true, &g2), c), 1e-6, 1e-6));
}

TEST_CASE("F::interpolate matches PyTorch in every mode, gradients too; Upsample prints as PyTorch's",
          "[nn][functional][interpolate]") {
  const auto& f = fixture();
  const std::vector<std::pair<std::string, Shape>> x4 = {{"x", {1, 2, 3, 4}}};
  const auto check = [&](const std::string& name, const std::vector<std::pair<std::string, Shape>>& in,
                         const Shape& out, const F::InterpolateFuncOptions& o) {
    INFO(name);
    f.check_case(name, in, out, [o](const V& v) { return F::interpolate(v[0], o); });
  };
  check("interp_nearest_x2", x4, {1, 2, 6, 8}, scale({2.0}));
  check("interp_nearest_size", x4, {1, 2, 5, 7}, size({5, 7}));
  check("interp_nearest_scale", x4, {1, 2, 5, 2}, scale({1.7, 0.6}));
  check("interp_nearest_exact", x4, {1, 2, 5, 3}, size({5, 3}, "nearest-exact"));
  check("interp_bilinear", x4, {1, 2, 6, 6}, scale({2.0, 1.5}, "bilinear").align_corners(false));
  check("interp_bilinear_corners", x4, {1, 2, 5, 7}, size({5, 7}, "bilinear").align_corners(true));
  check("interp_bilinear_down", x4, {1, 2, 2, 3}, size({2, 3}, "bilinear"));
  check("interp_linear", {{"x", {2, 3, 4}}}, {2, 3, 10}, scale({2.5}, "linear"));
  check("interp_linear_recompute", {{"x", {2, 3, 7}}}, {2, 3, 9}, scale({1.3}, "linear").recompute_scale_factor(true));
  check("interp_trilinear", {{"x", {1, 2, 2, 3, 3}}}, {1, 2, 3, 4, 5},
        size({3, 4, 5}, "trilinear").align_corners(true));
  check("interp_area", {{"x", {1, 2, 4, 6}}}, {1, 2, 2, 2}, size({2, 2}, "area"));
  check("interp_bicubic", x4, {1, 2, 6, 6}, scale({2.0, 1.5}, "bicubic"));
  check("interp_bicubic_corners", x4, {1, 2, 5, 7}, size({5, 7}, "bicubic").align_corners(true));
  check("interp_bicubic_down", {{"x", {1, 2, 5, 7}}}, {1, 2, 2, 3}, size({2, 3}, "bicubic"));
  const std::vector<std::pair<std::string, Shape>> x9 = {{"x", {1, 2, 9, 11}}};
  check("interp_aa_bilinear_down", x9, {1, 2, 4, 5}, size({4, 5}, "bilinear").antialias(true));
  check("interp_aa_bicubic_down", x9, {1, 2, 3, 4}, size({3, 4}, "bicubic").antialias(true));
  check("interp_aa_bilinear_mixed", x9, {1, 2, 13, 5}, size({13, 5}, "bilinear").antialias(true));
  check("interp_aa_bicubic_scale", x9, {1, 2, 3, 7}, scale({0.4, 0.7}, "bicubic").antialias(true));
  check("interp_aa_bilinear_corners", x9, {1, 2, 4, 6}, size({4, 6}, "bilinear").antialias(true).align_corners(true));
  check("interp_aa_bicubic_rows_kept", x9, {1, 2, 9, 4}, size({9, 4}, "bicubic").antialias(true));
  // float32: PyTorch's float64 result within float32 rounding (weights and sums in float32).
  const Tensor x32 = f.value("interp_aa_bicubic_down_x", {1, 2, 9, 11}).to(tensor::kFloat32);
  const Tensor y32 = F::interpolate(x32, size({3, 4}, "bicubic").antialias(true));
  CHECK(y32.dtype() == tensor::kFloat32);
  CHECK(tensor::allclose(y32.to(tensor::kFloat64), f.value("interp_aa_bicubic_down_out", {1, 2, 3, 4}), 1e-5, 1e-5));

  const Tensor x = tensor::zeros({1, 1, 2, 2});
  CHECK_THROWS_WITH(F::interpolate(x, F::InterpolateFuncOptions()),
                    Contains("either size or scale_factor should be defined"));
  CHECK_THROWS_WITH(F::interpolate(x, size({3}).scale_factor({2.0})),
                    Contains("only one of size or scale_factor should be defined"));
  CHECK_THROWS_WITH(F::interpolate(x, size({3}, "linear")), Contains("Got 4D input, but linear mode needs 3D input"));
  CHECK_THROWS_WITH(F::interpolate(x, size({3}).align_corners(true)),
                    Contains("align_corners option can only be set with the interpolating modes"));
  CHECK_THROWS_WITH(F::interpolate(x, size({3, 3, 3})),
                    Contains("Input and output must have the same number of spatial dimensions"));
  CHECK_THROWS_WITH(F::interpolate(x.squeeze(0), size({3}, "bicubic")),
                    Contains("Got 3D input, but bicubic mode needs 4D input"));
  CHECK_THROWS_WITH(F::interpolate(x, size({3}).antialias(true)),
                    Contains("Anti-alias option is only supported for bilinear and bicubic modes"));

  nn::Upsample up(nn::UpsampleOptions().scale_factor({2.0}));
  CHECK(up.repr() == "Upsample(scale_factor=2.0, mode='nearest')");
  CHECK(up.clone_structure()->repr() == up.repr());
  CHECK(nn::Upsample(nn::UpsampleOptions().size({3, 4}).mode("bilinear")).repr() ==
        "Upsample(size=(3, 4), mode='bilinear')");
  CHECK(tensor::equal(up(x), F::interpolate(x, scale({2.0}))));
  CHECK_THROWS_WITH(nn::Upsample(), Contains("either size or scale_factor should be defined"));
}

TEST_CASE("F::instance_norm and InstanceNorm1d/2d match PyTorch, running statistics too",
          "[nn][functional][instance_norm]") {
  const auto& f = fixture();
  f.check_case("instance_norm_1d", {{"x", {2, 3, 5}}}, {2, 3, 5}, [](const V& v) { return F::instance_norm(v[0]); });
  f.check_case("instance_norm_2d", {{"x", {2, 3, 4, 4}}, {"w", {3}}, {"b", {3}}}, {2, 3, 4, 4},
               [](const V& v) { return F::instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]); });

  nn::InstanceNorm2d norm(nn::InstanceNormOptions(3).momentum(0.3).affine(true).track_running_stats(true));
  norm.to(tensor::kFloat64);
  const Tensor x = f.value("instance_norm_running_x", {2, 3, 4, 5});
  norm(x);
  const double tol = 1e-12;
  CHECK(tensor::allclose(norm.running_mean, f.value("instance_norm_running_mean", {3}), tol, tol));
  CHECK(tensor::allclose(norm.running_var, f.value("instance_norm_running_var", {3}), tol, tol));
  norm.eval();
  CHECK(tensor::allclose(norm(x), f.value("instance_norm_running_eval", {2, 3, 4, 5}), tol, tol));
  CHECK(norm.num_batches_tracked.item<int64_t>() == 0);  // as PyTorch's: instance norm counts nothing

  // unbatched inputs, PyTorch's reprs and state-dict names, errors
  nn::InstanceNorm1d plain(4);
  const Tensor seq = tensor::randn({4, 6});
  CHECK(tensor::allclose(plain(seq), F::instance_norm(seq.unsqueeze(0)).squeeze(0), 1e-6, 1e-6));
  CHECK(plain.repr() == "InstanceNorm1d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
  CHECK(norm.clone_structure()->repr() ==
        "InstanceNorm2d(3, eps=1e-05, momentum=0.3, affine=True, track_running_stats=True)");
  CHECK(norm.state_dict().keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(plain.named_parameters().size() == 0);
  CHECK_THROWS_WITH(plain(tensor::zeros({2, 4, 1})), Contains("Expected more than 1 spatial element when training"));
  CHECK_THROWS_WITH(nn::InstanceNorm2d(3)(tensor::zeros({2, 3})),
                    Contains("InstanceNorm2d: expected 3D (unbatched) or 4D (batched) input, got shape [2, 3]"));
  CHECK_THROWS_WITH(nn::InstanceNorm2d(3, 1e-5, 0.1, true)(tensor::zeros({2, 4, 3, 3})),
                    Contains("expected input's size at dim=1 to match num_features (3), but got: 4."));
  // a BatchNorm is not an instance norm: convert_sync_batchnorm's test
  CHECK(dynamic_cast<nn::BatchNorm*>(static_cast<nn::Module*>(&norm)) == nullptr);
}

TEST_CASE("cross_entropy takes class probabilities for targets, as PyTorch's", "[nn][loss]") {
  const auto& f = fixture();
  f.check_case("ce_probs", {{"x", {3, 4}}, {"t", {3, 4}}}, {},
               [](const V& v) { return nn::cross_entropy(v[0], v[1]); });
  f.check_case("ce_probs_weight_smooth", {{"x", {3, 4}}, {"t", {3, 4}}, {"w", {4}}}, {},
               [](const V& v) { return nn::cross_entropy(v[0], v[1], -100, "mean", 0.2, v[2]); });
  f.check_case("ce_probs_positions", {{"x", {2, 4, 3}}, {"t", {2, 4, 3}}}, {2, 3},
               [](const V& v) { return nn::cross_entropy(v[0], v[1], -100, "none"); });
  f.check_case("ce_probs_sum", {{"x", {2, 4, 3}}, {"t", {2, 4, 3}}}, {},
               [](const V& v) { return nn::cross_entropy(v[0], v[1], -100, "sum", 0.1); });
  f.check_case("ce_probs_1d", {{"x", {5}}, {"t", {5}}}, {}, [](const V& v) { return nn::cross_entropy(v[0], v[1]); });
  const Tensor logits = tensor::zeros({2, 3});
  CHECK_THROWS_WITH(nn::cross_entropy(logits, tensor::zeros({2, 3}), 1),
                    Contains("ignore_index is not supported for floating point target"));
  CHECK_THROWS_WITH(nn::cross_entropy(logits, tensor::zeros({2, 4})),
                    Contains("class probabilities of the logits' shape [2, 3]; got float32 targets of shape [2, 4]"));
}

TEST_CASE("the new F:: ops pass gradcheck", "[nn][functional]") {
  tensor::Generator g(5);
  const auto random = [&](const Shape& shape) {
    return tensor::randn(shape, tensor::TensorOptions(tensor::kFloat64), &g).requires_grad_();
  };
  CHECK(
      autograd::gradcheck([](const V& v) { return F::scaled_dot_product_attention(v[0], v[1], v[2], bool_mask(3, 4)); },
                          {random({2, 3, 2}), random({2, 4, 2}), random({2, 4, 3})}) == "");
  CHECK(autograd::gradcheck(
            [](const V& v) {
              return F::interpolate(v[0], scale({1.5, 2.0}, "bilinear"));
            },
            {random({1, 2, 3, 3})}) == "");
  CHECK(autograd::gradcheck([](const V& v) { return F::interpolate(v[0], size({5}, "nearest-exact")); },
                            {random({1, 2, 3})}) == "");
  for (const char* mode : {"bilinear", "bicubic"}) {
    CHECK(autograd::gradcheck(
              [mode](const V& v) {
                return F::interpolate(v[0], size({3, 7}, mode).antialias(true));
              },
              {random({1, 2, 8, 5})}) == "");
  }
  CHECK(autograd::gradcheck(
            [](const V& v) {
              return F::adaptive_max_pool2d(v[0], {2, 3});
            },
            {random({1, 2, 3, 4})}) == "");
  CHECK(autograd::gradcheck([](const V& v) { return F::instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]); },
                            {random({2, 3, 4}), random({3}), random({3})}) == "");
  CHECK(autograd::gradcheck(
            [](const V& v) { return nn::cross_entropy(v[0], tensor::softmax(v[1], 1), -100, "mean", 0.1); },
            {random({3, 4}), random({3, 4})}) == "");
}

TEST_CASE("CUDA: attention, interpolate, instance_norm and probability cross_entropy match the CPU",
          "[nn][functional][cuda]") {
  if (!tensor::cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << tensor::cuda::unavailable_reason());
  const auto opts = tensor::TensorOptions(tensor::kFloat64);
  const Tensor q = tensor::randn({2, 3, 4}, opts), k = tensor::randn({2, 5, 4}, opts),
               v = tensor::randn({2, 5, 2}, opts);
  testing::expect_matches_cpu(
      {q, k, v},
      [](const V& t) { return F::scaled_dot_product_attention(t[0], t[1], t[2], bool_mask(3, 5).to(t[0].device())); },
      "sdpa bool mask", 1e-12);
  testing::expect_matches_cpu(
      {q, q, v.narrow(1, 0, 3)},
      [](const V& t) { return F::scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.0, true); }, "sdpa causal",
      1e-12);
  const Tensor x = tensor::randn({1, 2, 3, 4}, opts);
  testing::expect_matches_cpu(
      {x},
      [](const V& t) {
        return F::interpolate(t[0], scale({2.0, 1.5}, "bilinear"));
      },
      "bilinear", 1e-12);
  testing::expect_matches_cpu(
      {x},
      [](const V& t) {
        return F::interpolate(t[0], size({5, 7}));
      },
      "nearest", 1e-12);
  testing::expect_matches_cpu(
      {x},
      [](const V& t) {
        return F::interpolate(t[0], size({5, 7}, "bicubic").align_corners(true));
      },
      "bicubic", 1e-12);
  const Tensor big = tensor::randn({2, 3, 17, 12}, opts);
  testing::expect_matches_cpu(
      {big},
      [](const V& t) {
        return F::interpolate(t[0], size({5, 20}, "bicubic").antialias(true));
      },
      "bicubic antialias", 1e-12);
  testing::expect_matches_cpu(
      {big.to(tensor::kFloat32)},
      [](const V& t) {
        return F::interpolate(t[0], scale({0.3, 0.5}, "bilinear").antialias(true));
      },
      "bilinear antialias, float32", 1e-5);
  testing::expect_matches_cpu(
      {x}, [](const V& t) { return F::instance_norm(t[0]); }, "instance_norm", 1e-12);
  testing::expect_matches_cpu(
      {x},
      [](const V& t) {
        return F::adaptive_max_pool2d(t[0], {2, 3});
      },
      "adaptive_max_pool2d", 1e-12);
  testing::expect_matches_cpu(
      {x, tensor::rand({1, 2, 3, 4}, opts)}, [](const V& t) { return nn::cross_entropy(t[0], t[1]); },
      "cross_entropy probs", 1e-12);
}

TEST_CASE("F::adaptive_max_pool2d and AdaptiveMaxPool2d match PyTorch, ties and overlapping cells too",
          "[nn][functional][pool]") {
  const auto& f = fixture();
  f.check_case("amp_divides", {{"x", {2, 3, 4, 6}}}, {2, 3, 2, 3}, [](const V& v) {
    return F::adaptive_max_pool2d(v[0], {2, 3});
  });
  f.check_case("amp_overlap", {{"x", {1, 2, 5, 7}}}, {1, 2, 3, 4}, [](const V& v) {
    return F::adaptive_max_pool2d(v[0], {3, 4});
  });
  f.check_case("amp_ties", {{"x", {2, 3, 3}}}, {2, 2, 2},
               [](const V& v) { return F::adaptive_max_pool2d(tensor::relu(v[0]), 2); });
  for (const auto& [c, size, shape, out] : {std::tuple<std::string, tensor::Size2d, tensor::Shape, tensor::Shape>{
                                                "amp_indices_divides", {2, 3}, {2, 3, 4, 6}, {2, 3, 2, 3}},
                                            {"amp_indices_overlap", {3, 4}, {2, 5, 7}, {2, 3, 4}}}) {
    INFO(c);
    const Tensor x = f.value(c + "_x", shape);
    const auto [values, indices] = F::adaptive_max_pool2d_with_indices(x, size);
    CHECK(indices.dtype() == tensor::kInt64);
    CHECK(tensor::equal(indices, f.value(c + "_indices", out, tensor::kInt64)));
    CHECK(tensor::equal(values, F::adaptive_max_pool2d(x, size)));
  }
  CHECK(nn::AdaptiveMaxPool2d({3, 2}).repr() == "AdaptiveMaxPool2d(output_size=(3, 2))");
  CHECK(nn::AdaptiveMaxPool2d(4).clone_structure()->repr() == "AdaptiveMaxPool2d(output_size=4)");
  CHECK_THROWS_WITH(F::adaptive_max_pool2d(tensor::zeros({2, 3}), 1), Contains("expected a 3-D or 4-D input"));
}
