// 8-wide loaders of K/V cache elements as float32 (fused dequantization of
// ONNX Runtime's quantized KV cache) for the AVX2 GroupQueryAttention files (gqa_kernels_avx2.cpp,
// gqa_flash_avx2.cpp). Include it only from translation units built with -mavx2 -mfma; the float16
// cache loader needs -mf16c as well and is refused at compile time without it.
//
// Internal linkage throughout, for the reason gqa_avx2_math.h gives.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error "gqa_avx2_cache.h is for translation units built with -mavx2 -mfma only"
#endif

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gqa_block_format.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// Whether a cache type's elements are q * scale (float32 scales), rather than floats.
template <GqaCacheType kType>
constexpr bool kScaledCache =
    kType == GqaCacheType::kInt8 || kType == GqaCacheType::kInt4 ||
    kType == GqaCacheType::kFloat8E4M3Fn || kType == GqaCacheType::kFloat8E5M2;

// ggml's Q8_0/Q4_0 blocks (gqa_quant.h): elements [i, i + 8) as q * d, the block's float16 scale
// d widened (F16C: the AVX2 kernels decline block caches without it). i is a multiple of 8, so the
// elements lie in one block.
template <GqaCacheType kType>
inline __m256 LoadBlock8(const void* row, int64_t i) {
#if defined(__F16C__)
  const uint8_t* block = BlockOf(row, kType, i);
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(BlockScaleBits(block)));
  const int64_t j = i % kBlockElements;
  __m256i q;
  if constexpr (kType == GqaCacheType::kBlockQ8_0) {
    q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + j)));
  } else {
    static_assert(kType == GqaCacheType::kBlockQ4_0);
    // Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + j % 16));
    const __m128i nibbles =
        _mm_and_si128(j >= 16 ? _mm_srli_epi16(bytes, 4) : bytes, _mm_set1_epi8(0x0F));
    q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(nibbles), _mm256_set1_epi32(8));
  }
  return _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
#else
  static_assert(kType != kType, "block caches need -mf16c");
#endif
}

// Elements [i, i + 8) of the cache row at `row` as float32, before the scale: widened for float
// caches, q for integer ones, the decoded e4m3fn value for fp8, q * d for the block types (their
// scales are in the row). i is a multiple of 8.
template <GqaCacheType kType>
inline __m256 LoadCacheRaw8(const void* row, int64_t i) {
  if constexpr (IsBlockCache(kType)) {
    return LoadBlock8<kType>(row, i);
  } else if constexpr (kType == GqaCacheType::kFloat32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + i);
  } else if constexpr (kType == GqaCacheType::kFloat16) {
#if defined(__F16C__)
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + i)));
#else
    static_assert(kType != GqaCacheType::kFloat16, "float16 caches need -mf16c");
#endif
  } else if constexpr (kType == GqaCacheType::kBFloat16) {
    const __m128i bits =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  } else if constexpr (kType == GqaCacheType::kInt8) {
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + i));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  } else if constexpr (kType == GqaCacheType::kInt4) {
    // 4 bytes hold elements i..i+7; each byte goes to two lanes, the even one keeps the low nibble.
    int32_t packed;
    memcpy(&packed, static_cast<const uint8_t*>(row) + i / 2, sizeof packed);
    const __m128i pairs =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(packed),
                         _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_cvtepu8_epi32(pairs), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
        _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(nibbles, _mm256_set1_epi32(8)));
  } else if constexpr (kType == GqaCacheType::kFloat8E5M2) {
    // e5m2 (float16's top byte) to float32 bits without F16C: rebias normals (15 -> 127);
    // subnormals are mantissa * 2^-16; exponent 31 is an infinity (mantissa 0) or a NaN. As
    // Float8E5M2ToFloat, without arithmetic on float32 subnormals.
    const __m256i v = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + i)));
    const __m256i exponent = _mm256_and_si256(_mm256_srli_epi32(v, 2), _mm256_set1_epi32(0x1F));
    const __m256i mantissa = _mm256_and_si256(v, _mm256_set1_epi32(0x3));
    const __m256i normal =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(112)), 23),
                        _mm256_slli_epi32(mantissa, 21));
    const __m256i subnormal =
        _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(0x1p-16f)));
    __m256i bits =
        _mm256_blendv_epi8(normal, subnormal, _mm256_cmpeq_epi32(exponent, _mm256_setzero_si256()));
    const __m256i special =
        _mm256_or_si256(_mm256_set1_epi32(0x7F800000), _mm256_slli_epi32(mantissa, 21));
    bits = _mm256_blendv_epi8(bits, special, _mm256_cmpeq_epi32(exponent, _mm256_set1_epi32(0x1F)));
    bits =
        _mm256_or_si256(bits, _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24));
    return _mm256_castsi256_ps(bits);
  } else {
    static_assert(kType == GqaCacheType::kFloat8E4M3Fn);
    // e4m3fn to float32 bits: rebias normals (7 -> 127); subnormals are mantissa * 2^-9; S.1111.111
    // is NaN. As Float8E4M3FnToFloat, without arithmetic on float32 subnormals.
    const __m256i v = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + i)));
    const __m256i exponent = _mm256_and_si256(_mm256_srli_epi32(v, 3), _mm256_set1_epi32(0xF));
    const __m256i mantissa = _mm256_and_si256(v, _mm256_set1_epi32(0x7));
    const __m256i normal =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(120)), 23),
                        _mm256_slli_epi32(mantissa, 20));
    const __m256i subnormal =
        _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(0x1p-9f)));
    __m256i bits =
        _mm256_blendv_epi8(normal, subnormal, _mm256_cmpeq_epi32(exponent, _mm256_setzero_si256()));
    const __m256i is_nan =
        _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), _mm256_set1_epi32(0x7F));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), is_nan);
    bits =
        _mm256_or_si256(bits, _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24));
    return _mm256_castsi256_ps(bits);
  }
}

// Per-tensor scale broadcast, or the 8 per-channel scales of elements [i, i + 8).
inline __m256 Scale8(const float* scale, bool per_channel, int64_t i) {
  return per_channel ? _mm256_loadu_ps(scale + i) : _mm256_broadcast_ss(scale);
}

// Elements [i, i + 8) of a cache row as float32: widened, or q * scale (the product rounded to
// float32 before any accumulation, as a dequantized row would hold it).
template <GqaCacheType kType>
inline __m256 LoadCache8(const GqaCacheRow& row, int64_t i) {
  const __m256 raw = LoadCacheRaw8<kType>(row.data, i);
  if constexpr (kScaledCache<kType>) {
    return _mm256_mul_ps(raw, Scale8(row.scale, row.per_channel, i));
  } else {
    return raw;
  }
}

}  // namespace
}  // namespace attnrt::cpu
