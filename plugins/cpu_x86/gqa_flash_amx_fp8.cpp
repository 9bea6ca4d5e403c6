// gqa.flash.amx's block operations over e4m3fn K/V caches (vLLM's default fp8 KV cache format):
// every code decoded by byte-table lookups (AVX512-VBMI's VPERMI2B/VPERMT2B, 64 codes in
// 7 instructions) into a float32 piece of rows in L1, which gqa.flash.avx512's float32 operations
// then read. gqa.flash.amx sends its e4m3fn decode tiles here (bench/README.md: 1.2-1.4x
// gqa.flash.avx512 on a decode step); e5m2 codes decode with two instructions in registers, and
// prompt tiles decode while they transpose, so those keep gqa.flash.avx512's operations. Built with
// -mavx512f -mavx512bw -mavx512vl -mfma -mavx512vbmi; reached only through gqa.flash.amx, whose
// supports() checks all of them (every CPU with AMX-BF16 has AVX512-VBMI).
//
// Why: gqa.flash.avx512 decodes each code where it is used (the code's bits shifted into
// float16's places, VCVTPH2PS, a product by 2^8, a blend for NaN: about 11 instructions per 16
// codes), which made half of a float8 decode step (bench/README.md). The tables give the same
// float32 values in under 2 instructions per 16 codes.
//
// Where gqa.flash.amx does not score a decode tile on tiles (gqa_flash_amx_decode.cpp: a query
// that holds no bfloat16 values, a per-channel scale, a head size that is no multiple of 32 or
// above 256), its scores come from here, and so does every P·V of an e4m3fn decode tile (a
// per-tensor scale of 1 skips the products, which change no value). Same bits as
// gqa.flash.avx512 on every such problem (but the sign of a NaN output, which the
// order of a NaN's operands in the float32 loops decides): a decoded value is exact (every e4m3fn
// value is a bfloat16 value: the tables hold its bfloat16 bits, NaN as VCVTPH2PS widens it), a
// dequantized element is that value times its scale rounded to float32 (LoadCache16's product), and
// the scores of short tiles fold the scale into the query rows as gqa.flash.avx512's ScoresShort
// does, then run the same float32 kernel over the decoded codes.
//
// Calls only intrinsics and its own internal functions and templates, never std:: inline or
// template code (see gqa_flash_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (Clang would warn that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#include <stdint.h>

#if !defined(__AVX512VBMI__)
#error "gqa_flash_amx_fp8.cpp is built with -mavx512vbmi"
#endif

#include "gqa_avx512_cache.h"
#include "gqa_avx512_math.h"
#include "gqa_e4m3fn_tables.h"
#include "gqa_flash.h"
#include "gqa_flash_avx512_rows.h"
#include "gqa_kernels.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// The decoded piece of K or V rows: at most kPieceKeys rows of h floats (h <= kGqaFp8VbmiMaxHead:
// at least 16 rows).
constexpr int64_t kPieceFloats = 8192;
constexpr int64_t kPieceKeys = 64;

// Output vector s of a 64-code group: byte 4i + 2 of lane i is byte 16s + i of the low-byte
// lookup (index 16s + i), byte 4i + 3 that of the high-byte one (index 64 + 16s + i); bytes 0 and 1
// are zeroed by the mask. One VPERMT2B per 16 values, in order.
struct alignas(64) ByteIndex {
  uint8_t index[64];
};

constexpr ByteIndex MakeInterleave(int s) {
  ByteIndex x{};
  for (int i = 0; i < 16; ++i) {
    x.index[4 * i + 2] = static_cast<uint8_t>(16 * s + i);
    x.index[4 * i + 3] = static_cast<uint8_t>(64 + 16 * s + i);
  }
  return x;
}

constexpr ByteIndex kInterleave[4] = {MakeInterleave(0), MakeInterleave(1), MakeInterleave(2),
                                      MakeInterleave(3)};
constexpr uint64_t kHighHalves = 0xCCCCCCCCCCCCCCCCull;

// Byte 4i + b (b < 4) of a 16-code piece reads code i: each code in every byte of its lane.
constexpr ByteIndex MakeSpread() {
  ByteIndex x{};
  for (int i = 0; i < 64; ++i) x.index[i] = static_cast<uint8_t>(i / 4);
  return x;
}

constexpr ByteIndex kSpread = MakeSpread();

// The 64 codes at `codes` as float32 values: out[s] holds codes 16s .. 16s + 15.
__attribute__((always_inline)) inline void Decode64(const Tables& t, const uint8_t* codes,
                                                    __m512 out[4]) {
  const CodeBytes b = LookUp(t, _mm512_loadu_si512(codes));
  for (int s = 0; s < 4; ++s) {
    out[s] = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(
        kHighHalves, b.low, _mm512_load_si512(kInterleave[s].index), b.high));
  }
}

// The codes [0, 16) at `codes` (lanes of `mask`; the others read nothing and come back 0).
__attribute__((always_inline)) inline __m512 Decode16(const Tables& t, const uint8_t* codes,
                                                      __mmask16 mask) {
  const __m512i x = _mm512_permutexvar_epi8(
      _mm512_load_si512(kSpread.index), _mm512_castsi128_si512(_mm_maskz_loadu_epi8(mask, codes)));
  const __m512i low = _mm512_maskz_permutex2var_epi8(0x4444444444444444ull, t.low0, x, t.low1);
  const __m512i high = _mm512_maskz_permutex2var_epi8(0x8888888888888888ull, t.high0, x, t.high1);
  // (low | high) | (x & sign bit): byte 3 of x is the code, its bit 7 the sign.
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_or_si512(low, high), x, _mm512_set1_epi32(static_cast<int>(0x80000000u)), 0xF8));
}

// out[j * h + d] = element d of row j (j < n, d < h): the decoded code times its scale (rounded
// to float32), or the code's value alone when scale is NULL.
void DecodeRows(const Tables& t, const unsigned char* data, size_t row_bytes, int64_t n, int64_t h,
                const float* scale, bool per_channel, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const unsigned char* row = data + static_cast<size_t>(j) * row_bytes;
    if (j + 8 < n) _mm_prefetch(reinterpret_cast<const char*>(row + 8 * row_bytes), _MM_HINT_T0);
    float* o = out + j * h;
    int64_t d = 0;
    for (; d + 64 <= h; d += 64) {
      __m512 x[4];
      Decode64(t, row + d, x);
      for (int s = 0; s < 4; ++s) {
        if (scale != nullptr) {
          x[s] = _mm512_mul_ps(x[s], Scale16(scale, per_channel, d + 16 * s, Mask16(16)));
        }
        _mm512_storeu_ps(o + d + 16 * s, x[s]);
      }
    }
    for (; d < h; d += 16) {
      const __mmask16 mask = Mask16(h - d);
      __m512 x = Decode16(t, row + d, mask);
      if (scale != nullptr) x = _mm512_mul_ps(x, Scale16(scale, per_channel, d, mask));
      _mm512_mask_storeu_ps(o + d, mask, x);
    }
  }
}

int64_t PieceKeys(int64_t h) {
  return kPieceFloats / h < kPieceKeys ? kPieceFloats / h : kPieceKeys;
}

// This piece's share [b0, b1) of a prefetch range spread over `keys` keys.
const void* PieceShare(const void* prefetch, size_t bytes, int64_t j0, int64_t n, int64_t keys,
                       size_t* share) {
  const size_t b0 = bytes * static_cast<size_t>(j0) / static_cast<size_t>(keys);
  const size_t b1 = bytes * static_cast<size_t>(j0 + n) / static_cast<size_t>(keys);
  *share = b1 - b0;
  return prefetch == nullptr ? nullptr : static_cast<const unsigned char*>(prefetch) + b0;
}

// Decodes keys [0, keys) of kv a piece at a time into float32 rows (times their scale when
// `scaled`) and calls f(j0, n, rows, prefetch, prefetch_bytes) on each: the piece's first key, its
// length, its rows as a float32 GqaFlashKv, and its share of the prefetch range.
template <class F>
void ForEachPiece(const GqaFlashKv& kv, int64_t keys, int64_t h, bool scaled, const void* prefetch,
                  size_t prefetch_bytes, const F& f) {
  const Tables t = LoadTables();
  // A per-tensor scale of 1 (vLLM's default) changes no value: the products are skipped.
  const bool unit = kv.scale != nullptr && !kv.per_channel && kv.scale[0] == 1.0f;
  const float* row_scale = scaled && !unit ? kv.scale : nullptr;
  alignas(64) float piece[kPieceFloats];
  const GqaFlashKv rows_f32{piece, static_cast<size_t>(h) * sizeof(float), GqaCacheType::kFloat32,
                            nullptr, false};
  const int64_t step = PieceKeys(h);
  const auto* data = static_cast<const unsigned char*>(kv.data);
  for (int64_t j0 = 0; j0 < keys; j0 += step) {
    const int64_t n = keys - j0 < step ? keys - j0 : step;
    DecodeRows(t, data + static_cast<size_t>(j0) * kv.row_bytes, kv.row_bytes, n, h, row_scale,
               kv.per_channel, piece);
    size_t share = 0;
    const void* ahead = PieceShare(prefetch, prefetch_bytes, j0, n, keys, &share);
    f(j0, n, rows_f32, ahead, share);
  }
}

}  // namespace

void GqaFp8DequantizeVbmi(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  DecodeRows(LoadTables(), static_cast<const unsigned char*>(kv.data), kv.row_bytes, keys, h,
             kv.scale, kv.per_channel, out);
}

void GqaFp8ScoresVbmi(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
                      float scale, float* scores, int64_t ld, const void* prefetch,
                      size_t prefetch_bytes) {
  // Short tiles: <q, c * s> as <q * s, c>, as gqa.flash.avx512's ScoresShort.
  const bool fold = rows <= kTallRows && rows * h <= kFoldedQueryFloats;
  alignas(64) float folded[kFoldedQueryFloats];
  if (fold) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t d = 0; d < h; d += 16) {
        const __mmask16 mask = Mask16(h - d);
        _mm512_mask_storeu_ps(folded + r * h + d, mask,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, q + r * h + d),
                                            Scale16(k.scale, k.per_channel, d, mask)));
      }
    }
  }
  ForEachPiece(
      k, keys, h, !fold, prefetch, prefetch_bytes,
      [&](int64_t j0, int64_t n, const GqaFlashKv& piece, const void* ahead, size_t share) {
        kGqaFlashOpsAvx512.scores(fold ? folded : q, rows, piece, n, h, scale, scores + j0, ld,
                                  ahead, share);
      });
}

void GqaFp8AccumulateVbmi(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v,
                          int64_t keys, int64_t h, float* acc, const void* prefetch,
                          size_t prefetch_bytes) {
  ForEachPiece(
      v, keys, h, true, prefetch, prefetch_bytes,
      [&](int64_t j0, int64_t n, const GqaFlashKv& piece, const void* ahead, size_t share) {
        kGqaFlashOpsAvx512.accumulate(p + j0, rows, ld, piece, n, h, acc, ahead, share);
      });
}

}  // namespace attnrt::cpu
