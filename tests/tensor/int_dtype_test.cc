// The int32 and uint8 dtypes against PyTorch (fixtures/make_int_dtype_fixtures.py writes
// int_dtype_reference.txt): wrapping arithmetic, promotion (with each other, the floats, 0-dim
// tensors and scalars), conversions from floats, reductions into int64, comparisons, matrix
// products, integer indices and masks. Every value is an integer or a float that both sides
// compute with one rounding, so results must match exactly, and each result's dtype must be
// PyTorch's. Then what is not arithmetic: requires_grad refused, printing, safetensors.
#include <cstdio>

#include "tests/test_util.h"
#include "tinyddp/nn/safetensors.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp::tensor;
using Catch::Contains;

namespace {

const std::map<std::string, std::vector<double>>& reference() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/int_dtype_reference.txt");
  return values;
}

const std::vector<double>& entry(const std::string& name) {
  const auto it = reference().find(name);
  if (it == reference().end()) throw std::runtime_error("int_dtype_reference.txt has no entry " + name);
  return it->second;
}

// `got` has PyTorch's values and dtype for case `name`.
void check_case(const std::string& name, const Tensor& got) {
  INFO(name << ": " << got);
  const std::vector<double>& want_dtype = entry(name + "_dtype");
  REQUIRE(want_dtype.size() == 1);
  CHECK(dtype_name(got.dtype()) == std::string(dtype_name(static_cast<DType>(static_cast<int>(want_dtype[0])))));
  CHECK(got.to(kFloat64).reshape({-1}).to_vector<double>() == entry(name + "_out"));
}

Tensor ints(const std::vector<int64_t>& values, DType dtype) { return from_vector<int64_t>(values).to(dtype); }

struct Inputs {
  Tensor u8 = ints({0, 1, 3, 100, 200, 255}, kUInt8);
  Tensor v8 = ints({5, 2, 7, 100, 100, 1}, kUInt8);
  Tensor i32 = ints({-7, 3, 2147483647, -2147483648LL, 100, 0}, kInt32);
  Tensor j32 = ints({2, -3, 1, -1, 7, 5}, kInt32);
  Tensor i64 = ints({1, -2, 3, 4, -5, 6}, kInt64);
  Tensor f32 = from_vector<float>({0.5f, -1.25f, 2.0f, 3.5f, -0.75f, 1.0f});
};

}  // namespace

TEST_CASE("int32 and uint8: element sizes, names, libtorch's spellings", "[dtype][int]") {
  CHECK(element_size(kInt32) == 4);
  CHECK(element_size(kUInt8) == 1);
  CHECK(dtype_name(kInt32) == std::string("int32"));
  CHECK(dtype_name(kUInt8) == std::string("uint8"));
  CHECK(kInt == kInt32);
  CHECK(kByte == kUInt8);
  CHECK(dtype_of<int32_t> == kInt32);
  CHECK(dtype_of<uint8_t> == kUInt8);
  CHECK(is_integral(kUInt8, false));
  CHECK(is_integral(kInt32, false));
  CHECK_FALSE(is_integral(kBool, false));
  CHECK(is_integral(kBool, true));
  CHECK_FALSE(is_floating_point(kInt32));
}

TEST_CASE("promote_types follows torch.promote_types over every pair", "[dtype][int]") {
  // Independent of the implementation's ranks: the table torch.promote_types gives.
  CHECK(promote_types(kUInt8, kInt32) == kInt32);
  CHECK(promote_types(kInt32, kUInt8) == kInt32);
  CHECK(promote_types(kUInt8, kInt64) == kInt64);
  CHECK(promote_types(kInt32, kInt64) == kInt64);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK(promote_types(kInt64, kFloat16) == kFloat16);
  CHECK(promote_types(kInt32, kBFloat16) == kBFloat16);
  CHECK(promote_types(kUInt8, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kBFloat16, kFloat64) == kFloat64);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool, kInt32, kUInt8}) {
    CHECK(promote_types(d, d) == d);
    for (DType e : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool, kInt32, kUInt8}) {
      CHECK(promote_types(d, e) == promote_types(e, d));
    }
  }
}

TEST_CASE("int32 and uint8 arithmetic wraps and promotes as PyTorch's", "[dtype][int][fixture]") {
  const Inputs in;
  check_case("add_u8", in.u8 + in.v8);
  check_case("sub_u8", in.u8 - in.v8);
  check_case("mul_u8", in.u8 * in.v8);
  check_case("add_i32", in.i32 + in.j32);
  check_case("mul_i32", in.i32 * in.j32);
  check_case("sub_alpha_i32", sub(in.i32, in.j32, 3.0));
  check_case("u8_i32", in.u8 + in.j32);
  check_case("i32_i64", in.i32 + in.i64);
  check_case("u8_f32", in.u8 * in.f32);
  check_case("i32_f16", in.i32.abs().clamp(std::nullopt, 1000.0) + ones({6}, kFloat16));
  check_case("i32_bf16", in.j32 * full({6}, 0.5, kBFloat16));
  check_case("u8_zero_dim_i64", in.u8 + scalar_tensor(300.0, kInt64));
  check_case("i32_zero_dim_f64", in.j32 + scalar_tensor(0.25, kFloat64));
  check_case("f32_zero_dim_f64", in.f32 + scalar_tensor(0.1, kFloat64));
  check_case("u8_plus_300", in.u8 + 300.0);
  check_case("u8_minus_5", in.u8 - 5.0);
  check_case("u8_times_2_5", in.u8 * 2.5);
  check_case("i32_div_2", in.j32 / 2.0);
  check_case("i32_div_i32", in.i32 / in.j32);
  check_case("u8_maximum_i32", maximum(in.u8, in.j32));
  check_case("pow_u8", in.u8.pow(2.0));
  check_case("pow_i32_tensor", in.j32.abs().pow(ints({0, 1, 2, 3, 1, 2}, kInt32)));
  check_case("neg_u8", -in.u8);
  check_case("abs_i32", in.i32.abs());
  check_case("exp_u8", exp(in.u8.slice(0, 0, 3)));
  check_case("sqrt_i32", sqrt(in.j32.abs()));
  check_case("clamp_u8", in.u8.clamp(5.0, 200.0));
  check_case("where_u8", where(in.u8 > 50.0, in.u8, in.v8));
  check_case("index_add_u8", index_add(in.u8, 0, ints({5, 5}, kInt32), in.u8.slice(0, 4, 6)));
}

TEST_CASE("conversions to int32 and uint8 truncate and wrap as PyTorch's", "[dtype][int][fixture]") {
  const Tensor floats = from_vector<float>({-1.0f, 300.0f, 2.7f, -2.7f, 255.9f, 0.0f});
  check_case("f32_to_u8", floats.to(kUInt8));
  check_case("f32_to_i32", floats.to(kInt32));
  check_case("i64_to_u8", ints({-1, 256, 257, 511, -256, 7}, kInt64).to(kUInt8));
  check_case("i64_to_i32", ints({1LL << 31, -(1LL << 31) - 1, 5, -5, (1LL << 32) + 3, 0}, kInt64).to(kInt32));
  const Inputs in;
  check_case("u8_to_bool", in.u8.to(kBool));
  check_case("u8_to_f16", in.u8.to(kFloat16));
  CHECK(in.i32.to_vector<int32_t>() == std::vector<int32_t>{-7, 3, 2147483647, -2147483647 - 1, 100, 0});
  CHECK(in.u8.to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 3, 100, 200, 255});
  CHECK(in.u8.select(0, 5).item<int64_t>() == 255);
  CHECK(from_vector<uint8_t>({7, 9}).dtype() == kUInt8);
  CHECK(equal(in.i32, in.i32.to(kInt64)));
}

TEST_CASE("reductions of int32 and uint8 sum into int64, extremes keep the dtype", "[dtype][int][fixture]") {
  const Inputs in;
  check_case("sum_u8", in.u8.sum());
  check_case("sum_i32", ints({2147483647, 2147483647, 5}, kInt32).sum());
  check_case("sum_dim_u8", in.u8.view({2, 3}).sum(1));
  check_case("prod_i32", prod(in.j32));
  check_case("cumsum_u8", cumsum(in.u8, 0));
  check_case("max_u8", max(in.u8));
  check_case("min_i32", min(in.i32));
  check_case("argmax_u8", argmax(in.u8));
  check_case("amin_dim_i32", amin(in.i32.view({2, 3}), {1}));
  CHECK_THROWS_WITH(in.u8.mean(), Contains("mean: could not infer output dtype"));
}

TEST_CASE("comparisons and matrix products of int32 and uint8", "[dtype][int][fixture]") {
  const Inputs in;
  const Tensor first = in.u8.slice(0, 0, 2);
  check_case("eq_u8_f32", first.to(kFloat32).sub(0.5) < first);
  check_case("lt_u8_scalar", in.u8 < 100.5);
  check_case("ge_i32_u8", in.j32 >= in.u8);
  const Tensor a = ints({1, 2, 3, 4}, kInt32).view({2, 2}), b = ints({100, 2, 3, 200}, kUInt8).view({2, 2});
  check_case("mm_i32", matmul(a, a));
  check_case("mm_u8", matmul(b, b));
}

TEST_CASE("int32 positions and uint8 masks index as int64 and bool ones", "[dtype][int][fixture]") {
  using namespace indexing;
  const Tensor x = arange(12, kFloat32).view({3, 4});
  check_case("index_i32", x.index({ints({2, 0}, kInt32)}));
  check_case("index_u8_mask", x.index({ints({1, 0, 1}, kUInt8)}));
  check_case("index_select_i32", x.index_select(1, ints({3, 1}, kInt32)));
  check_case("embedding_i32", embedding(ints({2, 1}, kInt32).view({1, 2}), x));
  check_case("bincount_u8", bincount(ints({1, 3, 3, 0}, kUInt8)));
  CHECK_THROWS_WITH(x.index({from_vector<float>({1.0f})}),
                    Contains("must be int64, int32, bool or uint8, got float32"));
  CHECK_THROWS_WITH(gather(x, 1, ints({0, 1, 2}, kInt32).view({3, 1})), Contains("gather: expected an int64 index"));
}

TEST_CASE("int32 and uint8 tensors: no gradients, printed and saved as PyTorch's", "[dtype][int]") {
  const Tensor u = ints({3, 250}, kUInt8);
  CHECK_THROWS_WITH(u.requires_grad_(), Contains("floating"));
  CHECK(u.str() == "tensor([  3, 250], dtype=torch.uint8)");
  CHECK(ints({-5, 7}, kInt32).str() == "tensor([-5,  7], dtype=torch.int32)");
  const std::string path = "int_dtype_test.safetensors";
  tinyddp::nn::OrderedDict<Tensor> state;
  state.insert("bytes", u);
  state.insert("ints", ints({-2147483647 - 1, 5}, kInt32));
  tinyddp::nn::save_safetensors(path, state);
  const auto loaded = tinyddp::nn::load_safetensors(path).tensors;
  std::remove(path.c_str());
  CHECK(loaded.at("bytes").dtype() == kUInt8);
  CHECK(equal(loaded.at("bytes"), u));
  CHECK(loaded.at("ints").dtype() == kInt32);
  CHECK(loaded.at("ints").to_vector<int32_t>() == std::vector<int32_t>{-2147483647 - 1, 5});
}

TEST_CASE("in-place arithmetic with other dtypes computes in the result type and casts as PyTorch's",
          "[dtype][int][inplace]") {
  // Values from PyTorch 1.13: the result cast into the tensor written (can_cast allows it).
  const Tensor u = ints({250}, kUInt8);
  u.add_(ints({10}, kInt32));
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{4});
  const Tensor x = from_vector<float>({1.5f, 2.5f});
  x.add_(ints({1, 2}, kInt64));
  CHECK(x.to_vector<float>() == std::vector<float>{2.5f, 4.5f});
  const Tensor f = from_vector<float>({1.0f, 2.0f});
  f.mul_(from_vector<double>({3.0, 0.1}));  // computed in float64, rounded once into float32
  CHECK(f.to_vector<float>() == std::vector<float>{3.0f, static_cast<float>(2.0 * 0.1)});
  CHECK_THROWS_WITH(ints({1, 2}, kInt64).mul_(2.5),
                    Contains("mul_: result type float32 can't be cast to the desired output type int64"));
  CHECK_THROWS_WITH(ints({1}, kBool).add_(ints({1}, kInt64)),
                    Contains("add_: result type int64 can't be cast to the desired output type bool"));
  // The other in-place ops refuse the same (their result computed first): an integer's sqrt_
  // is float32, as PyTorch's; pow_ by a whole number and clamp_ keep the integers.
  CHECK_THROWS_WITH(ints({1, 4}, kInt64).sqrt_(),
                    Contains("sqrt_: result type float32 can't be cast to the desired output type int64"));
  CHECK_THROWS_WITH(ints({1, 4}, kUInt8).exp_(),
                    Contains("exp_: result type float32 can't be cast to the desired output type uint8"));
  const Tensor squares = ints({3, -2}, kInt32);
  squares.pow_(2.0);
  CHECK(squares.to_vector<int32_t>() == std::vector<int32_t>{9, 4});
  squares.clamp_(std::nullopt, 5.0);
  CHECK(squares.to_vector<int32_t>() == std::vector<int32_t>{5, 4});
  const Tensor half_values = from_vector<float>({1.0f, 2.0f}).to(kFloat16);
  half_values.addcmul_(from_vector<float>({1.0f, 1.0f}), from_vector<float>({0.5f, 0.5f}));  // float32 into half
  CHECK(half_values.to(kFloat32).to_vector<float>() == std::vector<float>{1.5f, 2.5f});
  CHECK(can_cast(kInt32, kUInt8));
  CHECK(can_cast(kBool, kFloat32));
  CHECK_FALSE(can_cast(kFloat32, kBool));
  CHECK_FALSE(can_cast(kFloat16, kInt32));
}
