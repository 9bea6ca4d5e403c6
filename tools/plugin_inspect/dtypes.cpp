#include "dtypes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "errors.h"

namespace plugin_inspect {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal or zero: mantissa * 2^-24.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

uint16_t float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (magnitude < 6.103515625e-05f) {
    // Subnormal half: round magnitude / 2^-24 to nearest even.
    const float scaled = std::nearbyint(std::ldexp(magnitude, 24));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled));
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even.
  uint32_t abs_bits = bits & 0x7fffffffu;
  const uint32_t round = 0xfffu + ((abs_bits >> 13) & 1u);
  abs_bits += round;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>((abs_bits >> 13) - (112u << 10)));
}

float bfloat_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bfloat(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t round = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round) >> 16);
}

template <class T>
T load(const void* data, std::size_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return value;
}

template <class T>
void store(void* data, std::size_t i, T value) {
  std::memcpy(static_cast<char*>(data) + i * sizeof(T), &value, sizeof(T));
}

template <class T>
T saturate(double value) {
  if (std::isnan(value)) return T{0};
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  return static_cast<T>(std::clamp(std::nearbyint(value), lo, hi));
}

}  // namespace

attnrt_dtype query_dtype_from_name(std::string_view name) {
  if (name == "float32") return kFloat32;
  if (name == "float16") return kFloat16;
  if (name == "bfloat16") return kBFloat16;
  throw UsageError("--dtype: unknown query dtype '" + std::string(name) +
                   "' (expected float32, float16 or bfloat16)");
}

attnrt_dtype cache_dtype_from_name(std::string_view name) {
  if (name == "float32") return kFloat32;
  if (name == "float16") return kFloat16;
  if (name == "bfloat16") return kBFloat16;
  if (name == "int8") return kInt8;
  if (name == "uint8") return kUInt8;
  throw UsageError("--cache-dtype: unknown KV cache dtype '" + std::string(name) +
                   "' (expected float32, float16, bfloat16, int8 or uint8)");
}

std::string dtype_name(attnrt_dtype dtype) {
  const std::string name = attnrt_dtype_name(dtype);
  if (name != "unknown") return name;
  return "dtype(code=" + std::to_string(dtype.code) + ",bits=" + std::to_string(dtype.bits) + ")";
}

std::size_t element_size(attnrt_dtype dtype) { return std::max<std::size_t>(1, dtype.bits / 8); }

bool is_floating(attnrt_dtype dtype) {
  return dtype.code == ATTNRT_DTYPE_CODE_FLOAT || dtype.code == ATTNRT_DTYPE_CODE_BFLOAT;
}

double load_element(const void* data, attnrt_dtype dtype, std::size_t i) {
  if (same_dtype(dtype, kFloat32)) return load<float>(data, i);
  if (same_dtype(dtype, kFloat16)) return half_to_float(load<uint16_t>(data, i));
  if (same_dtype(dtype, kBFloat16)) return bfloat_to_float(load<uint16_t>(data, i));
  if (same_dtype(dtype, kInt8)) return load<int8_t>(data, i);
  if (same_dtype(dtype, kUInt8)) return load<uint8_t>(data, i);
  if (same_dtype(dtype, kInt32)) return load<int32_t>(data, i);
  if (same_dtype(dtype, kInt64)) return static_cast<double>(load<int64_t>(data, i));
  throw ToolError("cannot read elements of dtype " + dtype_name(dtype));
}

void store_element(void* data, attnrt_dtype dtype, std::size_t i, double value) {
  if (same_dtype(dtype, kFloat32)) return store<float>(data, i, static_cast<float>(value));
  if (same_dtype(dtype, kFloat16))
    return store<uint16_t>(data, i, float_to_half(static_cast<float>(value)));
  if (same_dtype(dtype, kBFloat16))
    return store<uint16_t>(data, i, float_to_bfloat(static_cast<float>(value)));
  if (same_dtype(dtype, kInt8)) return store<int8_t>(data, i, saturate<int8_t>(value));
  if (same_dtype(dtype, kUInt8)) return store<uint8_t>(data, i, saturate<uint8_t>(value));
  if (same_dtype(dtype, kInt32)) return store<int32_t>(data, i, saturate<int32_t>(value));
  if (same_dtype(dtype, kInt64)) return store<int64_t>(data, i, static_cast<int64_t>(value));
  throw ToolError("cannot write elements of dtype " + dtype_name(dtype));
}

}  // namespace plugin_inspect
