// dtype tests: sizes and names, float16/bfloat16 conversion against independent references
// (the compiler's _Float16, a double-precision rounding formula, PyTorch fixtures), and
// conversions between tensors of every dtype.
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/test_util.h"

using namespace tinyddp::tensor;
using tinyddp::testing::load_fixture;

namespace {

const char* kFixture = "tests/tensor/fixtures/torch_reference.txt";

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t gcc_half_bits(float value) {
  const _Float16 h = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// bfloat16 by the definition: of the two neighbouring bfloat16 values (truncation and one
// ulp up), pick the nearer in exact double arithmetic; on a tie, the one with an even mantissa.
uint16_t reference_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint16_t down = static_cast<uint16_t>(bits >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double x = value;
  const double dd = std::fabs(x - static_cast<double>(bfloat16_bits_to_float(down)));
  const float up_value = bfloat16_bits_to_float(up);
  const double du = std::isinf(up_value) ? std::ldexp(1.0, 128) - std::fabs(x)  // distance to 2^128
                                         : std::fabs(static_cast<double>(up_value) - x);
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1) == 0 ? down : up;
}

}  // namespace

TEST_CASE("element sizes, names and floating-point classes", "[dtype]") {
  CHECK(element_size(kFloat32) == 4);
  CHECK(element_size(kFloat64) == 8);
  CHECK(element_size(kFloat16) == 2);
  CHECK(element_size(kBFloat16) == 2);
  CHECK(element_size(kInt64) == 8);
  CHECK(element_size(kBool) == 1);
  CHECK(std::string(dtype_name(kBFloat16)) == "bfloat16");
  CHECK(is_floating_point(kFloat16));
  CHECK_FALSE(is_floating_point(kInt64));
  CHECK_FALSE(is_floating_point(kBool));
  CHECK(dtype_of<Half> == kFloat16);
}

TEST_CASE("half -> float is exact for all 65536 bit patterns", "[dtype][half]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    _Float16 h;
    const auto b16 = static_cast<uint16_t>(bits);
    std::memcpy(&h, &b16, 2);
    const float expected = static_cast<float>(h);
    const float got = half_bits_to_float(b16);
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(std::memcmp(&expected, &got, 4) == 0);
    }
  }
}

TEST_CASE("float -> half rounds to nearest even like the compiler's _Float16", "[dtype][half]") {
  // A stride through all float32 bit patterns (both signs, every exponent) ...
  for (uint64_t bits = 0; bits < (1ULL << 32); bits += 4093) {
    const float f = from_bits(static_cast<uint32_t>(bits));
    const uint16_t got = float_to_half_bits(f);
    if (std::isnan(f)) {
      REQUIRE((got & 0x7C00) == 0x7C00);
      REQUIRE((got & 0x03FF) != 0);
      continue;
    }
    REQUIRE(got == gcc_half_bits(f));
  }
  // ... and every float near the half rounding boundaries: exact ties in the normal and
  // subnormal range, overflow at 65520, underflow at 2^-25.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = half_bits_to_float(static_cast<uint16_t>(h));
    const float hi = half_bits_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid}) {
      REQUIRE(float_to_half_bits(f) == gcc_half_bits(f));
    }
  }
}

TEST_CASE("float16 edge cases by hand", "[dtype][half]") {
  CHECK(float_to_half_bits(65504.0f) == 0x7BFF);  // largest finite
  CHECK(float_to_half_bits(65519.0f) == 0x7BFF);
  CHECK(float_to_half_bits(65520.0f) == 0x7C00);  // halfway to 65536: ties to even -> inf
  CHECK(float_to_half_bits(-1e10f) == 0xFC00);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even (zero)
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp tie -> 2
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie -> even down
  CHECK(float_to_half_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // tie -> even up
  const uint16_t nan = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x3FF) != 0);
  CHECK(std::isnan(half_bits_to_float(nan)));
  CHECK(std::isinf(half_bits_to_float(0x7C00)));
}

TEST_CASE("float -> bfloat16 matches the rounding definition", "[dtype][bfloat16]") {
  for (uint64_t bits = 0; bits < (1ULL << 32); bits += 4093) {
    const float f = from_bits(static_cast<uint32_t>(bits));
    const uint16_t got = float_to_bfloat16_bits(f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bfloat16_bits_to_float(got)));
      continue;
    }
    if (std::isinf(f)) {
      REQUIRE(got == (f > 0 ? 0x7F80 : 0xFF80));
      continue;
    }
    REQUIRE(got == reference_bf16_bits(f));
  }
  // Exact ties: low 16 bits 0x8000 round to the even neighbour.
  CHECK(float_to_bfloat16_bits(from_bits(0x3F808000)) == 0x3F80);
  CHECK(float_to_bfloat16_bits(from_bits(0x3F818000)) == 0x3F82);
  CHECK(float_to_bfloat16_bits(from_bits(0x7F7FFFFF)) == 0x7F80);  // FLT_MAX rounds to inf
  CHECK(float_to_bfloat16_bits(from_bits(0x00000001)) == 0x0000);  // tiny subnormal -> 0
  CHECK(float_to_bfloat16_bits(from_bits(0x00018000)) == 0x0002);  // subnormal tie -> even
}

TEST_CASE("float16 and bfloat16 conversions match PyTorch", "[dtype][fixture]") {
  const auto fixture = load_fixture(kFixture);
  const auto& inputs = fixture.at("conv_inputs");
  const auto& half = fixture.at("conv_half_bits");
  const auto& bf16 = fixture.at("conv_bf16_bits");
  REQUIRE(inputs.size() == half.size());
  REQUIRE(inputs.size() == bf16.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << inputs[i]);
    CHECK(float_to_half_bits(static_cast<float>(inputs[i])) == static_cast<uint16_t>(half[i]));
    CHECK(float_to_bfloat16_bits(static_cast<float>(inputs[i])) == static_cast<uint16_t>(bf16[i]));
  }
  // The same through tensors.
  std::vector<float> values(inputs.begin(), inputs.end());
  const Tensor h = from_vector(values).to(kFloat16);
  const std::vector<Half> hv = h.to_vector<Half>();
  for (size_t i = 0; i < hv.size(); ++i) CHECK(hv[i].bits == static_cast<uint16_t>(half[i]));
}

TEST_CASE("to(dtype) converts between every pair of dtypes", "[dtype]") {
  const Tensor base = tensor({-2.0, -0.5, 0.0, 1.0, 3.75, 100.0});
  for (DType from : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool}) {
    const Tensor src = base.to(from);
    for (DType to : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool}) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      const Tensor dst = src.to(to);
      REQUIRE(dst.dtype() == to);
      const std::vector<double> before = src.to(kFloat64).to_vector<double>();
      const std::vector<double> after = dst.to(kFloat64).to_vector<double>();
      for (size_t i = 0; i < before.size(); ++i) {
        double expected = before[i];
        if (to == kInt64) expected = std::trunc(expected);
        if (to == kBool) expected = expected != 0 ? 1 : 0;
        if (to == kFloat16) expected = half_bits_to_float(float_to_half_bits(static_cast<float>(expected)));
        if (to == kBFloat16) expected = bfloat16_bits_to_float(float_to_bfloat16_bits(static_cast<float>(expected)));
        CHECK(after[i] == expected);
      }
    }
  }
  CHECK(tensor({1.5}).to(kInt64).item<int64_t>() == 1);
  CHECK(tensor({-1.5}).to(kInt64).item<int64_t>() == -1);  // truncation toward zero, as C and PyTorch
  const Tensor same = base.to(kFloat32);
  CHECK(same.is_same(base));  // no copy when the dtype already matches
}

TEST_CASE("libtorch's other dtype spellings name the same dtypes", "[dtype]") {
  STATIC_REQUIRE(kFloat == kFloat32);
  STATIC_REQUIRE(kDouble == kFloat64);
  STATIC_REQUIRE(kHalf == kFloat16);
  STATIC_REQUIRE(kLong == kInt64);
  CHECK(zeros({2}, TensorOptions(kLong)).dtype() == kInt64);
  CHECK(std::string(dtype_name(kDouble)) == "float64");
}
