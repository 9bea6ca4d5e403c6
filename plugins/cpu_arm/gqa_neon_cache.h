// 8-wide loaders of K/V cache elements as float32 (fused dequantization of
// ONNX Runtime's quantized KV cache) for the NEON GroupQueryAttention files (gqa_kernels_neon.cpp,
// gqa_flash_neon.cpp): the NEON counterpart of cpu_x86's gqa_avx2_cache.h, element for element the
// same values. Advanced SIMD is part of the AArch64 baseline, so these need no extra compile flag;
// float16 rows use the baseline FCVTL conversion (no FEAT_FP16 arithmetic).
//
// Internal linkage throughout, for the reason gqa_pipeline.h gives.
#pragma once

#if !defined(__aarch64__)
#error "gqa_neon_cache.h is for AArch64 translation units"
#endif

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "gqa_block_format.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// Eight float32 lanes: elements [i, i + 4) in lo, [i + 4, i + 8) in hi.
struct F32x8 {
  float32x4_t lo;
  float32x4_t hi;
};

// Whether a cache type's elements are q * scale (float32 scales), rather than floats.
template <GqaCacheType kType>
constexpr bool kScaledCache =
    kType == GqaCacheType::kInt8 || kType == GqaCacheType::kInt4 ||
    kType == GqaCacheType::kFloat8E4M3Fn || kType == GqaCacheType::kFloat8E5M2;

inline F32x8 Int16ToFloat(int16x8_t w) {
  return {vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), vcvtq_f32_s32(vmovl_high_s16(w))};
}

// e4m3fn to float32 bits: rebias normals (7 -> 127); subnormals are mantissa * 2^-9; S.1111.111 is
// NaN. As Float8E4M3FnToFloat, without arithmetic on float32 subnormals.
inline float32x4_t Float8E4M3FnToFloat4(uint32x4_t v) {
  const uint32x4_t exponent = vandq_u32(vshrq_n_u32(v, 3), vdupq_n_u32(0xF));
  const uint32x4_t mantissa = vandq_u32(v, vdupq_n_u32(0x7));
  const uint32x4_t normal =
      vorrq_u32(vshlq_n_u32(vaddq_u32(exponent, vdupq_n_u32(120)), 23), vshlq_n_u32(mantissa, 20));
  const uint32x4_t subnormal = vreinterpretq_u32_f32(vmulq_n_f32(vcvtq_f32_u32(mantissa), 0x1p-9f));
  uint32x4_t bits = vbslq_u32(vceqq_u32(exponent, vdupq_n_u32(0)), subnormal, normal);
  const uint32x4_t is_nan = vceqq_u32(vandq_u32(v, vdupq_n_u32(0x7F)), vdupq_n_u32(0x7F));
  bits = vbslq_u32(is_nan, vdupq_n_u32(0x7FC00000), bits);
  bits = vorrq_u32(bits, vshlq_n_u32(vandq_u32(v, vdupq_n_u32(0x80)), 24));
  return vreinterpretq_f32_u32(bits);
}

// ggml's Q8_0/Q4_0 blocks (gqa_quant.h): elements [i, i + 8) as q * d, the block's float16 scale
// d widened with FCVTL. i is a multiple of 8, so the elements lie in one block.
template <GqaCacheType kType>
inline F32x8 LoadBlock8(const void* row, int64_t i) {
  const uint8_t* block = BlockOf(row, kType, i);
  const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(BlockScaleBits(block))));
  const int64_t j = i % kBlockElements;
  F32x8 x;
  if constexpr (kType == GqaCacheType::kBlockQ8_0) {
    x = Int16ToFloat(vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(block + 2 + j))));
  } else {
    static_assert(kType == GqaCacheType::kBlockQ4_0);
    // Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    const uint8x8_t bytes = vld1_u8(block + 2 + j % 16);
    const uint8x8_t nibbles = j >= 16 ? vshr_n_u8(bytes, 4) : vand_u8(bytes, vdup_n_u8(0xF));
    x = Int16ToFloat(vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(nibbles)), vdupq_n_s16(8)));
  }
  return {vmulq_f32(x.lo, d), vmulq_f32(x.hi, d)};
}

// Elements [i, i + 8) of the cache row at `row` as float32, before the scale: widened for float
// caches, q for integer ones, the decoded e4m3fn value for fp8, q * d for the block types (their
// scales are in the row). i is a multiple of 8.
template <GqaCacheType kType>
inline F32x8 LoadCacheRaw8(const void* row, int64_t i) {
  if constexpr (IsBlockCache(kType)) {
    return LoadBlock8<kType>(row, i);
  } else if constexpr (kType == GqaCacheType::kFloat32) {
    const float* p = static_cast<const float*>(row) + i;
    return {vld1q_f32(p), vld1q_f32(p + 4)};
  } else if constexpr (kType == GqaCacheType::kFloat16) {
    const float16x8_t x = vreinterpretq_f16_u16(vld1q_u16(static_cast<const uint16_t*>(row) + i));
    return {vcvt_f32_f16(vget_low_f16(x)), vcvt_high_f32_f16(x)};
  } else if constexpr (kType == GqaCacheType::kBFloat16) {
    const uint16x8_t bits = vld1q_u16(static_cast<const uint16_t*>(row) + i);
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(bits), 16)),
            vreinterpretq_f32_u32(vshll_high_n_u16(bits, 16))};
  } else if constexpr (kType == GqaCacheType::kInt8) {
    return Int16ToFloat(vmovl_s8(vld1_s8(static_cast<const int8_t*>(row) + i)));
  } else if constexpr (kType == GqaCacheType::kInt4) {
    // 4 bytes hold elements i..i+7; element 2k is the low nibble of byte k, 2k+1 the high one.
    uint32_t packed;
    memcpy(&packed, static_cast<const uint8_t*>(row) + i / 2, sizeof packed);
    const uint8x8_t bytes = vreinterpret_u8_u32(vdup_n_u32(packed));
    const uint8x8_t nibbles = vzip1_u8(vand_u8(bytes, vdup_n_u8(0xF)), vshr_n_u8(bytes, 4));
    return Int16ToFloat(vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(nibbles)), vdupq_n_s16(8)));
  } else if constexpr (kType == GqaCacheType::kFloat8E5M2) {
    // e5m2 is float16's top byte: one shift and one float16 conversion (infinities and NaNs kept).
    const float16x8_t h =
        vreinterpretq_f16_u16(vshll_n_u8(vld1_u8(static_cast<const uint8_t*>(row) + i), 8));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
  } else {
    static_assert(kType == GqaCacheType::kFloat8E4M3Fn);
    const uint16x8_t v = vmovl_u8(vld1_u8(static_cast<const uint8_t*>(row) + i));
    return {Float8E4M3FnToFloat4(vmovl_u16(vget_low_u16(v))),
            Float8E4M3FnToFloat4(vmovl_high_u16(v))};
  }
}

// Per-tensor scale broadcast, or the 8 per-channel scales of elements [i, i + 8).
inline F32x8 Scale8(const float* scale, bool per_channel, int64_t i) {
  if (per_channel) return {vld1q_f32(scale + i), vld1q_f32(scale + i + 4)};
  const float32x4_t s = vdupq_n_f32(scale[0]);
  return {s, s};
}

// Elements [i, i + 8) of a cache row as float32: widened, or q * scale (the product rounded to
// float32 before any accumulation, as a dequantized row would hold it).
template <GqaCacheType kType>
inline F32x8 LoadCache8(const void* row, const float* scale, bool per_channel, int64_t i) {
  const F32x8 raw = LoadCacheRaw8<kType>(row, i);
  if constexpr (kScaledCache<kType>) {
    const F32x8 s = Scale8(scale, per_channel, i);
    return {vmulq_f32(raw.lo, s.lo), vmulq_f32(raw.hi, s.hi)};
  } else {
    return raw;
  }
}

}  // namespace
}  // namespace attnrt::cpu
