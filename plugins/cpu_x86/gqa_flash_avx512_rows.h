// What gqa.flash.avx512's two files share: gqa_flash_avx512.cpp (the scores, the other row
// operations and the operations table) and gqa_flash_avx512_pv.cpp (P·V). Include it only from
// those files, which are built with -mavx512f -mavx512bw -mavx512vl -mfma.
//
// Quantized K/V rows (int8, int4, fp8 e4m3fn) are dequantized 16 elements at a time in registers
// (gqa_avx512_cache.h) right where they are used; float16 rows are widened with VCVTPH2PS.
//
// Internal linkage throughout, for the reason gqa_avx2_math.h gives, except the P·V entry point
// the operations table names: an ordinary function, defined once, in gqa_flash_avx512_pv.cpp.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__FMA__)
#error "gqa_flash_avx512_rows.h is for files built with -mavx512f -mavx512bw -mavx512vl -mfma"
#endif

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_avx512_cache.h"
#include "gqa_avx512_math.h"
#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// gqa.flash.avx512's P·V (GqaFlashOps::accumulate).
void GqaFlashAccumulateAvx512(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v,
                              int64_t keys, int64_t h, float* acc, const void* prefetch,
                              size_t prefetch_bytes);

namespace {

constexpr __mmask16 kLow8 = 0x00FF;
// Tiles taller than this take the transposed-K score kernel and P·V's 6-row register blocks; the
// driver hands blocks of at most this many rows over without dequantizing them first (its
// kFusedRows), and those are decode tiles, where the K rows are read once and a transpose would
// only add work.
constexpr int64_t kTallRows = 8;
// Short tiles of a quantized K fold its scale into the query rows when rows * h fits this many
// floats (ScoresShort; gqa_flash_amx_fp8.cpp folds the same rows, for the same bits).
constexpr int64_t kFoldedQueryFloats = 4096;

// The K or V rows of a block for cache type kType: row j at data + j * row_bytes. Scale(d, mask)
// is the dequantization scale of elements [d, d + 16), loaded once per 16 columns for all rows of
// a register block; Load(j, d, scale, mask) is elements [d, d + 16) of row j as float32 (q * scale
// for quantized types, the naive kernel's LoadCache16 value). mask: all 16 lanes or the low 8.
//
// kUnscaled: Load returns q (the scale is applied elsewhere: ScoresShort folds it into the query).
// kSplit (int4, unscaled, h a multiple of 32): the short-tile score kernel reads 32 elements at a
// time as two vectors, the even elements and the odd ones, against a query stored in that order.
template <GqaCacheType kType, bool kPerChannel, bool kUnscaled = false, bool kSplit = false>
struct KvRows {
  static constexpr GqaCacheType kCacheType = kType;
  static constexpr bool kSplitNibbles = kSplit;
  static constexpr bool kScaled = kScaledCache16<kType> && !kUnscaled;
  static constexpr bool kPerChannelScales = kPerChannel && kScaled;
  const unsigned char* data;
  size_t row_bytes;
  const float* scale;

  __m512 Scale(int64_t d, __mmask16 mask) const {
    if constexpr (!kScaled) {
      return _mm512_setzero_ps();  // unused
    } else if constexpr (kPerChannel) {
      return _mm512_maskz_loadu_ps(mask, scale + d);
    } else {
      return _mm512_set1_ps(*scale);
    }
  }
  __m512 Load(int64_t j, int64_t d, __m512 s, __mmask16 mask) const {
    const __m512 raw = LoadCacheRaw16<kType>(data + static_cast<size_t>(j) * row_bytes, d, mask);
    if constexpr (kScaled) {
      return _mm512_mul_ps(raw, s);
    } else {
      return raw;
    }
  }
  KvRows Offset(int64_t j) const {
    return {data + static_cast<size_t>(j) * row_bytes, row_bytes, scale};
  }
};

// The 16 int4 codes as float32 values (code - 8), looked up by VPERMPS with the code in a lane's
// low four bits; times a per-tensor scale, the entries are exactly the products LoadCache16 rounds.
inline __m512 Int4Table() {
  return _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f, 1.0f, 2.0f,
                        3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
}

// The int4 kernels hold 32 consecutive elements as two vectors: the 16 even elements (low
// nibbles) and the 16 odd ones (high nibbles).
// Elements [0, 32) held as lo = [0, 16) and hi = [16, 32) -> even and odd.
__attribute__((always_inline)) inline void SplitEvenOdd(__m512 lo, __m512 hi, __m512* even,
                                                        __m512* odd) {
  const __m512i even_index =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  *even = _mm512_permutex2var_ps(lo, even_index, hi);
  *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_index, _mm512_set1_epi32(1)), hi);
}

// The 32 int4 elements of the 16 bytes at `bytes`, even and odd, as table[code] (Int4Table(), or
// it times a per-tensor scale).
__attribute__((always_inline)) inline void LoadInt4EvenOdd(const unsigned char* bytes, __m512 table,
                                                           __m512* even, __m512* odd) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  *even = _mm512_permutexvar_ps(x, table);
  *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table);
}

// Calls f(rows) with the KvRows of `kv`'s cache type and scale kind.
template <class F>
void WithKvRows(const GqaFlashKv& kv, F&& f) {
  const auto* data = static_cast<const unsigned char*>(kv.data);
  switch (kv.type) {
    case GqaCacheType::kFloat32:
      return f(KvRows<GqaCacheType::kFloat32, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kFloat16:
      return f(KvRows<GqaCacheType::kFloat16, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kBFloat16:
      return f(KvRows<GqaCacheType::kBFloat16, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kInt8:
      if (kv.per_channel) return f(KvRows<GqaCacheType::kInt8, true>{data, kv.row_bytes, kv.scale});
      return f(KvRows<GqaCacheType::kInt8, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kInt4:
      if (kv.per_channel) return f(KvRows<GqaCacheType::kInt4, true>{data, kv.row_bytes, kv.scale});
      return f(KvRows<GqaCacheType::kInt4, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kFloat8E4M3Fn:
      if (kv.per_channel) {
        return f(KvRows<GqaCacheType::kFloat8E4M3Fn, true>{data, kv.row_bytes, kv.scale});
      }
      return f(KvRows<GqaCacheType::kFloat8E4M3Fn, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kFloat8E5M2:
      if (kv.per_channel) {
        return f(KvRows<GqaCacheType::kFloat8E5M2, true>{data, kv.row_bytes, kv.scale});
      }
      return f(KvRows<GqaCacheType::kFloat8E5M2, false>{data, kv.row_bytes, kv.scale});
    case GqaCacheType::kBlockQ8_0:
      return f(KvRows<GqaCacheType::kBlockQ8_0, false>{data, kv.row_bytes, nullptr});
    case GqaCacheType::kBlockQ4_0:
      return f(KvRows<GqaCacheType::kBlockQ4_0, false>{data, kv.row_bytes, nullptr});
  }
}

}  // namespace
}  // namespace attnrt::cpu
