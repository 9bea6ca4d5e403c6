// 16-wide loaders of K/V cache elements as float32 (fused dequantization of ONNX Runtime's
// quantized KV cache) for the AVX-512 GroupQueryAttention files (gqa_kernels_avx512.cpp,
// gqa_flash_avx512.cpp, gqa_flash_avx512_pv.cpp). Include it only from translation units built
// with -mavx512f -mavx512bw -mavx512vl -mfma. Float16 caches use VCVTPH2PS (an AVX512F
// instruction), no F16C.
//
// Every loader takes a lane mask that is either all 16 lanes or the low 8 (head sizes are
// multiples of 8): the masked-off lanes read no memory and come back 0.
//
// Internal linkage throughout, for the reason gqa_avx2_math.h gives.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__FMA__)
#error \
    "gqa_avx512_cache.h is for translation units built with -mavx512f -mavx512bw -mavx512vl -mfma"
#endif

#include <immintrin.h>
#include <stdint.h>

#include "gqa_block_format.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// Whether a cache type's elements are q * scale (float32 scales), rather than floats.
template <GqaCacheType kType>
constexpr bool kScaledCache16 =
    kType == GqaCacheType::kInt8 || kType == GqaCacheType::kInt4 ||
    kType == GqaCacheType::kFloat8E4M3Fn || kType == GqaCacheType::kFloat8E5M2;

constexpr __mmask16 kAllLanes = 0xFFFF;

// ggml's Q8_0/Q4_0 blocks (gqa_quant.h): elements [i, i + 16) (lanes of mask) as q * d, the
// block's float16 scale d widened. i is a multiple of 16 (head sizes of block caches are multiples
// of 32), so the elements lie in one block.
template <GqaCacheType kType>
inline __m512 LoadBlock16(const void* row, int64_t i, __mmask16 mask) {
  const uint8_t* block = BlockOf(row, kType, i);
  const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(BlockScaleBits(block))));
  const int64_t j = i % kBlockElements;
  __m512i q;
  if constexpr (kType == GqaCacheType::kBlockQ8_0) {
    q = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, block + 2 + j));
  } else {
    static_assert(kType == GqaCacheType::kBlockQ4_0);
    // Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    const __m128i bytes = _mm_maskz_loadu_epi8(mask, block + 2 + j % 16);
    const __m128i nibbles =
        _mm_and_si128(j >= 16 ? _mm_srli_epi16(bytes, 4) : bytes, _mm_set1_epi8(0x0F));
    q = _mm512_maskz_sub_epi32(mask, _mm512_cvtepu8_epi32(nibbles), _mm512_set1_epi32(8));
  }
  return _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
}

// Elements [i, i + 16) (lanes of `mask`) of the cache row at `row` as float32, before the scale:
// widened for float caches, q for integer ones, the decoded e4m3fn/e5m2 value for fp8, q * d for
// the block types (their scales are in the row). i is a multiple of 8.
template <GqaCacheType kType>
inline __m512 LoadCacheRaw16(const void* row, int64_t i, __mmask16 mask) {
  if constexpr (IsBlockCache(kType)) {
    return LoadBlock16<kType>(row, i, mask);
  } else if constexpr (kType == GqaCacheType::kFloat32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + i);
  } else if constexpr (kType == GqaCacheType::kFloat16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + i));
  } else if constexpr (kType == GqaCacheType::kBFloat16) {
    const __m256i bits = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else if constexpr (kType == GqaCacheType::kInt8) {
    const __m128i bytes = _mm_maskz_loadu_epi8(mask, static_cast<const int8_t*>(row) + i);
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
  } else if constexpr (kType == GqaCacheType::kInt4) {
    // 8 bytes hold elements i..i+15 (4 for a half mask), the even element in the low nibble.
    // Nibbles split and interleave back into element order in 16 bytes (128-bit operations),
    // then one sign extension to 16 lanes.
    const __mmask16 byte_mask = mask == kAllLanes ? 0xFF : 0x0F;
    const __m128i packed =
        _mm_maskz_loadu_epi8(byte_mask, static_cast<const uint8_t*>(row) + i / 2);
    const __m128i low_nibbles = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
    const __m128i high_nibbles = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
    const __m128i q = _mm_sub_epi8(_mm_unpacklo_epi8(low_nibbles, high_nibbles), _mm_set1_epi8(8));
    // Masked-off lanes would decode to -8: zero them as the other types are.
    return _mm512_maskz_cvtepi32_ps(mask, _mm512_cvtepi8_epi32(q));
  } else if constexpr (kType == GqaCacheType::kFloat8E5M2) {
    // e5m2 is float16's top byte: one shift and one float16 conversion (infinities and NaNs kept).
    const __m256i v =
        _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(row) + i));
    return _mm512_cvtph_ps(_mm256_slli_epi16(v, 8));
  } else {
    static_assert(kType == GqaCacheType::kFloat8E4M3Fn);
    // e4m3fn's bits shifted into float16's places are the value times 2^-8 exactly (exponent bias
    // 7 -> 15, float16 subnormals included: code m with exponent 0 is m * 2^-17), so one float16
    // conversion and one product by 2^8 (exact) decode it. S.1111.111 is NaN: float16's quiet NaN
    // of that sign, which converts to float32's 0x7FC00000 and keeps its bits through the product.
    const __m256i v =
        _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mask, static_cast<const uint8_t*>(row) + i));
    const __m256i magnitude = _mm256_and_si256(v, _mm256_set1_epi16(0x7F));
    const __m256i sign = _mm256_slli_epi16(_mm256_xor_si256(v, magnitude), 8);
    const __m256i half =
        _mm256_mask_blend_epi16(_mm256_cmpeq_epi16_mask(magnitude, _mm256_set1_epi16(0x7F)),
                                _mm256_or_si256(_mm256_slli_epi16(magnitude, 7), sign),
                                _mm256_or_si256(_mm256_set1_epi16(0x7E00), sign));
    return _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
  }
}

// Per-tensor scale broadcast, or the per-channel scales of elements [i, i + 16) (lanes of mask).
inline __m512 Scale16(const float* scale, bool per_channel, int64_t i, __mmask16 mask) {
  return per_channel ? _mm512_maskz_loadu_ps(mask, scale + i) : _mm512_set1_ps(*scale);
}

// Elements [i, i + 16) (lanes of mask) of a cache row as float32: widened, or q * scale (the
// product rounded to float32 before any accumulation, as a dequantized row would hold it).
template <GqaCacheType kType>
inline __m512 LoadCache16(const GqaCacheRow& row, int64_t i, __mmask16 mask) {
  const __m512 raw = LoadCacheRaw16<kType>(row.data, i, mask);
  if constexpr (kScaledCache16<kType>) {
    return _mm512_mul_ps(raw, Scale16(row.scale, row.per_channel, i, mask));
  } else {
    return raw;
  }
}

}  // namespace
}  // namespace attnrt::cpu
