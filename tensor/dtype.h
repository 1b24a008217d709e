// Element types: DType, the 16-bit storage types Half and BFloat16 with exact
// round-to-nearest-even conversion from float32, and the C++ type <-> DType mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tinyddp::tensor {

// New dtypes go at the end: the numbering is shared with the CUDA kernels (cuda/dtypes.cuh).
enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool, kInt32, kUInt8 };

// Short names, as torch::kFloat32 etc.
inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kUInt8 = DType::kUInt8;
// libtorch's other spellings of the same dtypes (torch::kFloat is torch::kFloat32, ...).
inline constexpr DType kFloat = kFloat32;
inline constexpr DType kDouble = kFloat64;
inline constexpr DType kHalf = kFloat16;
inline constexpr DType kLong = kInt64;
inline constexpr DType kInt = kInt32;
inline constexpr DType kByte = kUInt8;

size_t element_size(DType dtype);
// "float32", "float64", "float16", "bfloat16", "int64", "bool", "int32", "uint8" (PyTorch's names
// without "torch.").
const char* dtype_name(DType dtype);
bool is_floating_point(DType dtype);
// uint8, int32, int64, and bool when include_bool (as c10::isIntegralType).
bool is_integral(DType dtype, bool include_bool);
// The dtype two operands combine in, as torch.promote_types: bool < uint8 < int32 < int64 <
// the floats; float16 with bfloat16 gives float32; an integer with a float gives the float.
DType promote_types(DType a, DType b);
// As torch.can_cast: whether a result of dtype `from` may be written into a tensor of dtype
// `to` (in-place ops): not a float into an integer, nor anything but bool into bool.
bool can_cast(DType from, DType to);
// float16 or bfloat16: the dtypes whose arithmetic happens in float32, rounded back.
bool is_16bit_float(DType dtype);

// IEEE binary16 <-> float32. float_to_half_bits rounds to nearest, ties to even; overflow gives
// inf, NaN stays NaN (quiet, sign kept), subnormals are exact.
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
// bfloat16 (the top half of a float32) <-> float32, same rounding rules. Inline and
// branch-free, so that loops converting whole tensors (autocast's casts) vectorise.
inline uint16_t float_to_bfloat16_bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  // Rounding the low 16 bits may carry into the exponent; a carry into inf is correct. NaN is
  // quieted, its sign and top payload bits kept.
  const uint32_t rounded = (x + 0x7FFF + ((x >> 16) & 1)) >> 16, quiet_nan = (x >> 16) | 0x0040;
  return static_cast<uint16_t>((x & 0x7FFFFFFF) > 0x7F800000 ? quiet_nan : rounded);
}
inline float bfloat16_bits_to_float(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &x, sizeof(value));
  return value;
}

// 16-bit storage types. Arithmetic happens in float: the implicit conversions make
// `float x = h;` and `Half h = 1.5f;` work, rounding exactly as above.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float value) : bits(float_to_half_bits(value)) {}  // NOLINT: implicit by design
  operator float() const { return half_bits_to_float(bits); }
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float value) : bits(float_to_bfloat16_bits(value)) {}  // NOLINT: implicit by design
  operator float() const { return bfloat16_bits_to_float(bits); }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

// C++ element type -> DType (dtype_of<float> == kFloat32).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = kFloat64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = kFloat16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = kBFloat16;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = kInt32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = kUInt8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = kBool;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace tinyddp::tensor
