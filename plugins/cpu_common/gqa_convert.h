// Scalar conversions between float32 and the narrow element types of GroupQueryAttention tensors
// (ONNX Runtime's data types and quantized caches): float16 and bfloat16 rounded to nearest even,
// as F16C's VCVTPS2PH and ONNX Runtime's MLFloat16 round; float8 e4m3fn saturated to ±448, as the
// CUDA reference stores an fp8 cache. Baseline-ISA code: bit operations and C library calls only,
// and no arithmetic on float32 subnormals, so a caller's DAZ/FTZ setting cannot change a result.
//
// Everything has internal linkage: these functions are compiled into the AVX2 file too, and an
// external inline copy built with -mavx2 could be the one the linker keeps for baseline callers.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Exact. A signaling NaN comes back quiet with its payload, as VCVTPH2PS returns it.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) {
    return BitsToFloat(sign | (mantissa != 0 ? 0x7FC00000u : 0x7F800000u) | (mantissa << 13));
  }
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, a normal float32 computed exactly.
  return BitsToFloat(sign | FloatBits(static_cast<float>(mantissa) * 0x1p-24f));
}

// Round to nearest even; overflow gives infinity, NaN stays NaN (quieted, top payload bits kept),
// bit for bit what VCVTPS2PH with _MM_FROUND_TO_NEAREST_INT gives.
inline uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (a >= 0x38800000u) {  // normal half (>= 2^-14): drop 13 mantissa bits, ties to even
    const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // Subnormal half: units of 2^-24. The scaling is exact, nearbyintf rounds ties to even, and
  // 1024 units is the smallest normal's encoding.
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(nearbyintf(BitsToFloat(a) * 0x1p24f)));
}

inline float BFloat16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN (quieted, top payload bits kept).
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// e4m3fn: bias 7, no infinities, S.1111.111 is NaN.
inline float Float8E4M3FnToFloat(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v >> 3) & 0xFu;
  const uint32_t mantissa = v & 0x7u;
  if (exponent == 0xFu && mantissa == 0x7u) return BitsToFloat(sign | 0x7FC00000u);
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 120u) << 23) | (mantissa << 20));
  return BitsToFloat(sign | FloatBits(static_cast<float>(mantissa) * 0x1p-9f));
}

// Saturating: |x| >= 448 (infinity included) gives ±448; NaN gives NaN; else round to nearest even.
inline uint8_t FloatToFloat8E4M3Fn(float f) {
  const uint32_t u = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);
  if (a < 0x3C800000u) {  // below 2^-6: subnormal units of 2^-9; 8 units encode 2^-6 itself
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(nearbyintf(BitsToFloat(a) * 512.0f)));
  }
  const uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);  // keep 3 mantissa bits, ties to even
  return static_cast<uint8_t>(sign | ((rounded >> 20) - (120u << 3)));
}

// e5m2: float16's top byte (bias 15, two mantissa bits; infinities and NaNs as float16's).
inline float Float8E5M2ToFloat(uint8_t v) { return HalfToFloat(static_cast<uint16_t>(v << 8)); }

// Saturating, as the float8_e4m3fn writer: |x| >= 57344 (infinity included) gives ±57344; NaN gives
// NaN; else round to nearest even (subnormals below 2^-14 in units of 2^-16).
inline uint8_t FloatToFloat8E5M2(float f) {
  const uint32_t u = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (a >= 0x47600000u) return static_cast<uint8_t>(sign | 0x7Bu);
  if (a < 0x38800000u) {  // below 2^-14: subnormal units of 2^-16; 4 units encode 2^-14 itself
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(nearbyintf(BitsToFloat(a) * 65536.0f)));
  }
  const uint32_t rounded = a + 0xFFFFFu + ((a >> 21) & 1u);  // keep 2 mantissa bits, ties to even
  return static_cast<uint8_t>(sign | ((rounded >> 21) - (112u << 2)));
}

// Address of element `index` of an array of `element_bytes`-byte elements.
inline const void* ElementAddress(const void* base, size_t element_bytes, int64_t index) {
  return static_cast<const unsigned char*>(base) + static_cast<size_t>(index) * element_bytes;
}
inline void* ElementAddress(void* base, size_t element_bytes, int64_t index) {
  return static_cast<unsigned char*>(base) + static_cast<size_t>(index) * element_bytes;
}

// Element i of a T row.
inline float LoadElement(const void* row, GqaFloatType type, int64_t i) {
  switch (type) {
    case GqaFloatType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(row)[i]);
    case GqaFloatType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(row)[i]);
    case GqaFloatType::kFloat32:
      break;
  }
  return static_cast<const float*>(row)[i];
}

// x rounded to T's precision (identity for float32).
inline float RoundToType(float x, GqaFloatType type) {
  switch (type) {
    case GqaFloatType::kFloat16:
      return HalfToFloat(FloatToHalf(x));
    case GqaFloatType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(x));
    case GqaFloatType::kFloat32:
      break;
  }
  return x;
}

// dst[0, n) = float(src[0, n)) for a T row.
inline void WidenRow(const void* src, GqaFloatType type, float* dst, int64_t n) {
  switch (type) {
    case GqaFloatType::kFloat32:
      memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GqaFloatType::kFloat16:
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(static_cast<const uint16_t*>(src)[i]);
      return;
    case GqaFloatType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
      }
      return;
  }
}

// dst[0, n) = T(src[0, n)), rounded to nearest even.
inline void NarrowRow(const float* src, GqaFloatType type, void* dst, int64_t n) {
  switch (type) {
    case GqaFloatType::kFloat32:
      memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GqaFloatType::kFloat16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = FloatToHalf(src[i]);
      return;
    case GqaFloatType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(src[i]);
      return;
  }
}

}  // namespace
}  // namespace attnrt::cpu
