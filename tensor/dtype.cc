// DType properties and the float16/bfloat16 conversions (bit-exact, round to nearest even).
#include "tinyddp/tensor/dtype.h"

#include <cstring>

#include "tinyddp/base/error.h"

namespace tinyddp::tensor {

size_t element_size(DType dtype) {
  switch (dtype) {
    case kFloat32: return 4;
    case kFloat64: return 8;
    case kFloat16: return 2;
    case kBFloat16: return 2;
    case kInt64: return 8;
    case kBool: return 1;
    case kInt32: return 4;
    case kUInt8: return 1;
  }
  throw Error(fmt::format("element_size: unknown dtype {}", static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kInt32: return "int32";
    case kUInt8: return "uint8";
  }
  return "unknown";
}

bool is_floating_point(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16;
}

bool is_16bit_float(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }

bool is_integral(DType dtype, bool include_bool) {
  return dtype == kUInt8 || dtype == kInt32 || dtype == kInt64 || (include_bool && dtype == kBool);
}

namespace {
// The rank of each dtype in promotion among its kind: bool, then the integers by width, then
// the floats (the two 16-bit ones share a rank and meet in float32).
int promotion_rank(DType dtype) {
  switch (dtype) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kInt32: return 2;
    case kInt64: return 3;
    case kFloat16:
    case kBFloat16: return 4;
    case kFloat32: return 5;
    case kFloat64: return 6;
  }
  return -1;
}
}  // namespace

bool can_cast(DType from, DType to) {
  if (is_floating_point(from) && is_integral(to, true)) return false;
  return from == kBool || to != kBool;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_16bit_float(a) && is_16bit_float(b)) return kFloat32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Shifts `value` right by `shift` bits, rounding the dropped bits to nearest, ties to even.
uint32_t shift_right_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t dropped = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((dropped > half || (dropped == half && (kept & 1))) ? 1 : 0);
}

}  // namespace

// float32: 1 sign, 8 exponent (bias 127), 23 mantissa bits.
// float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite 65504.
uint16_t float_to_half_bits(float value) {
  const uint32_t x = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t magnitude = x & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) {  // NaN: quiet it, keep the top payload bits.
    return sign | 0x7E00 | static_cast<uint16_t>((magnitude >> 13) & 0x3FF);
  }
  // 65520 is halfway between 65504 (odd mantissa) and 65536: ties to even round it up to inf.
  if (magnitude >= 0x477FF000) return sign | 0x7C00;
  const int exponent = static_cast<int>(magnitude >> 23);  // biased, float32
  if (exponent >= 113) {                                   // normal in float16 (>= 2^-14)
    const uint32_t rebased = ((static_cast<uint32_t>(exponent - 112)) << 23) | (magnitude & 0x7FFFFF);
    // A carry out of the mantissa moves into the exponent, which is the right result.
    return sign | static_cast<uint16_t>(shift_right_round_even(rebased, 13));
  }
  // Subnormal in float16: the value is k * 2^-24. With the implicit bit m = 1.f * 2^23 and
  // value = m * 2^(exponent - 150), k = m >> (126 - exponent).
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t mantissa = (magnitude & 0x7FFFFF) | 0x800000;
  return sign | static_cast<uint16_t>(shift_right_round_even(mantissa, 126 - exponent));
}

float half_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000 | (mantissa << 13));  // inf/NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);  // +-0
  // Subnormal: normalise the mantissa so its leading one becomes the implicit bit.
  int shift = 0;
  while ((mantissa & 0x400) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  const uint32_t float_exponent = static_cast<uint32_t>(113 - shift);
  return bits_float(sign | (float_exponent << 23) | ((mantissa & 0x3FF) << 13));
}

}  // namespace tinyddp::tensor
