// The scores of gqa.flash.amx's short (decode) tiles on AMX-BF16: the transposed product
// S^T = K Q^T, whose A tiles are K rows as they lie in the cache (16 keys x 32 bfloat16 elements,
// read in place from a bfloat16 cache) or e4m3fn rows decoded into bfloat16 by byte-table lookups
// (gqa_e4m3fn_tables.h; every e4m3fn value is a bfloat16 value), and whose B tiles are the query
// rows transposed into pairs once per call (16 pairs of elements x up to 16 rows). The short-tile
// kernel of gqa.flash.avx512 spends most of a decode step's scores on horizontal sums, one per
// score; here a tile product gives 16 keys x every query row of the tile at once.
//
// Numerics. A bfloat16 query element times a bfloat16 (or decoded e4m3fn) key element is exact in
// float32, and TDPBF16PS sums the products in float32 (docs/gqa-semantics.md, bfloat16 queries):
// the float32 dot product of the other flash kernels with the sums in another order, so these
// scores are not gqa.flash.avx512's bits. An e4m3fn score is <q, c> times (scale * k_scale), the
// scale applied once to the sum rather than to every element (gqa.flash.avx512 folds it into the
// query). Each score is one key's dot product over the whole head, whatever keys share its tile
// (the row of a tile does not change its sum: checked on the hardware), so a split of the keys
// into several calls gives the same bits, as GqaFlashOps requires of short tiles. What the tile
// product does not do like float32 arithmetic: it reads bfloat16 subnormals as zero. A query that
// holds one (or a float32 element that is no bfloat16 value) takes gqa.flash.avx512's scores for
// the whole call; a bfloat16 key row that holds one is scored alone by gqa.flash.avx512 (decoded
// e4m3fn values are never subnormal), so whether a key is scored here depends on that key alone.
// Partial sums below FLT_MIN are flushed, as in the tall tiles (gqa_flash_amx.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mfma -mamx-tile -mamx-bf16 -mavx512vbmi; reached only
// through gqa.flash.amx, whose supports() checks all of them. Calls only intrinsics and its own
// internal functions, never std:: inline or template code (see gqa_flash_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (Clang would warn that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#include <stdint.h>

#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || \
    !(defined(__AMX_BF16__) || defined(__AMXBF16__)) || !defined(__AVX512VBMI__)
#error "gqa_flash_amx_decode.cpp is built with -mamx-tile -mamx-bf16 -mavx512vbmi"
#endif

#include "gqa_amx_tiles.h"
#include "gqa_avx512_math.h"
#include "gqa_e4m3fn_tables.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"

namespace attnrt::cpu {
namespace {

// Keys of one A tile, and of one pass (two A tiles, two accumulator tiles).
constexpr int64_t kTileKeys = 16;
constexpr int64_t kPassKeys = 32;
// Elements of a head one A tile (and one B tile of query pairs) covers.
constexpr int64_t kTileElements = 32;

// The largest magnitude of an e4m3fn value.
constexpr float kE4M3FnMax = 448.0f;

// qt[i * 16 + r] = pair i (elements 2i and 2i + 1) of query row r as bfloat16, for i < h / 2 and
// r < rows; 0 for rows [rows, 16): the B tiles, one per 32 elements. False when an element is no
// bfloat16 value or a subnormal one, or one whose magnitude exceeds `largest` (an infinity too).
bool PackQueryPairs(const float* q, int64_t rows, int64_t h, float largest, uint32_t* qt) {
  __mmask16 bad = 0;
  const __m512 limit = _mm512_set1_ps(largest);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  for (int64_t d = 0; d < h; d += kTileElements) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int64_t i = 0; i < 16; ++i) {
      if (i >= rows) {
        r[i] = _mm512_setzero_ps();
        continue;
      }
      const __m512i lo = _mm512_castps_si512(_mm512_loadu_ps(q + i * h + d));
      const __m512i hi = _mm512_castps_si512(_mm512_loadu_ps(q + i * h + d + 16));
      bad = static_cast<__mmask16>(bad | NotBFloat16Normal(lo) | NotBFloat16Normal(hi));
      // |x| > largest (a NaN compares false: it stays, and makes its scores NaN as it should).
      bad = static_cast<__mmask16>(
          bad |
          _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_and_si512(lo, magnitude)), limit,
                             _CMP_GT_OQ) |
          _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_and_si512(hi, magnitude)), limit,
                             _CMP_GT_OQ));
      r[i] = _mm512_castsi512_ps(HighHalves(lo, hi));
    }
    Transpose16x16(r);
#pragma GCC unroll 16
    for (int64_t i = 0; i < 16; ++i) {
      _mm512_store_si512(qt + (d / 2 + i) * 16, _mm512_castps_si512(r[i]));
    }
  }
  return bad == 0;
}

// Word k of the first (second) register: the bfloat16 bits of code k (32 + k), k < 32, from the
// low-byte and high-byte lookups (VPERMT2B: index 64 + k picks byte k of the second table).
struct alignas(64) WordIndex {
  uint8_t index[64];
};

constexpr WordIndex MakeWords(int half) {
  WordIndex x{};
  for (int k = 0; k < 32; ++k) {
    x.index[2 * k] = static_cast<uint8_t>(32 * half + k);
    x.index[2 * k + 1] = static_cast<uint8_t>(64 + 32 * half + k);
  }
  return x;
}

constexpr WordIndex kWords[2] = {MakeWords(0), MakeWords(1)};

// One step of the prefetch range per this many key rows read.
constexpr int64_t kPrefetchRows = 4;

// out[j * h + d] = the bfloat16 bits of code d of row j, for j < n; rows [n, kPassKeys) zero.
void DecodeRowsBFloat16(const Tables& t, const unsigned char* data, size_t row_bytes, int64_t n,
                        int64_t h, uint16_t* out, Prefetcher& ahead) {
  const __m512i words0 = _mm512_load_si512(kWords[0].index);
  const __m512i words1 = _mm512_load_si512(kWords[1].index);
  for (int64_t j = 0; j < kPassKeys; ++j) {
    uint16_t* o = out + j * h;
    if (j >= n) {
      for (int64_t d = 0; d < h; d += 32) _mm512_storeu_si512(o + d, _mm512_setzero_si512());
      continue;
    }
    if (j % kPrefetchRows == 0) ahead.Step();
    const unsigned char* row = data + static_cast<size_t>(j) * row_bytes;
    int64_t d = 0;
    for (; d + 64 <= h; d += 64) {
      const CodeBytes b = LookUp(t, _mm512_loadu_si512(row + d));
      _mm512_storeu_si512(o + d, _mm512_permutex2var_epi8(b.low, words0, b.high));
      _mm512_storeu_si512(o + d + 32, _mm512_permutex2var_epi8(b.low, words1, b.high));
    }
    if (d < h) {  // 32 codes left (h is a multiple of 32)
      const CodeBytes b = LookUp(t, _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row + d));
      _mm512_storeu_si512(o + d, _mm512_permutex2var_epi8(b.low, words0, b.high));
    }
  }
}

// scores[r * ld + j] = (column r of the accumulator rows c[j * 16 ..] * k_scale) * scale, for
// r < rows and j < n (n <= 16).
void StoreScores(const float* c, int64_t rows, int64_t n, float k_scale, float scale, float* scores,
                 int64_t ld) {
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(c + i * 16);
  Transpose16x16(r);
  const __m512 ks = _mm512_set1_ps(k_scale);
  const __m512 s = _mm512_set1_ps(scale);
  const __mmask16 mask = Mask16(n);
  for (int64_t i = 0; i < rows; ++i) {
    _mm512_mask_storeu_ps(scores + i * ld, mask, _mm512_mul_ps(s, _mm512_mul_ps(r[i], ks)));
  }
}

}  // namespace

bool GqaAmxScoresShort(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
                       float scale, float* scores, int64_t ld, const void* prefetch,
                       size_t prefetch_bytes) {
  if (rows < 1 || rows > kGqaAmxShortRows || keys < 1 || h % kTileElements != 0 ||
      h > kGqaAmxShortMaxHead || k.type != GqaCacheType::kFloat8E4M3Fn || k.scale == nullptr ||
      k.per_channel) {
    return false;
  }
  // The scale multiplies the sum, not each element as in gqa.flash.avx512; so that this changes
  // nothing but rounding, the sum must neither overflow where the scaled one would not (the query
  // at most FLT_MAX / (448 h) in magnitude: no sum of h products reaches FLT_MAX), nor lose
  // flushed partial sums (below FLT_MIN) that a large scale would have made visible (|k_scale| at
  // most 2^64: a flushed part stays below h 2^-62 after it), and the scale must be a normal finite
  // number (0, a subnormal, an infinity or NaN take gqa.flash.avx512's products).
  const float k_scale = k.scale[0];
  uint32_t bits;
  __builtin_memcpy(&bits, &k_scale, sizeof bits);
  const uint32_t exponent = bits >> 23 & 0xFF;
  if (exponent == 0 || exponent > 127 + 64) return false;
  alignas(64) uint32_t qt[kGqaAmxShortMaxHead / 2 * 16];
  const float largest = 3.40282347e38f / (kE4M3FnMax * static_cast<float>(h));
  if (!PackQueryPairs(q, rows, h, largest, qt)) return false;
  const Tables tables = LoadTables();
  alignas(64) uint16_t rows_bf16[kPassKeys * kGqaAmxShortMaxHead];
  alignas(64) float c[kPassKeys * 16];
  Prefetcher ahead(prefetch, prefetch_bytes, (keys + kPrefetchRows - 1) / kPrefetchRows);
  const auto* data = static_cast<const unsigned char*>(k.data);
  const size_t stride = static_cast<size_t>(h) * sizeof(uint16_t);
  const auto* a0 = reinterpret_cast<const unsigned char*>(rows_bf16);
  const unsigned char* a1 = a0 + kTileKeys * stride;
  LoadTileConfig();
  for (int64_t j0 = 0; j0 < keys; j0 += kPassKeys) {
    const int64_t n = keys - j0 < kPassKeys ? keys - j0 : kPassKeys;
    DecodeRowsBFloat16(tables, data + static_cast<size_t>(j0) * k.row_bytes, k.row_bytes, n, h,
                       rows_bf16, ahead);
    const bool two = n > kTileKeys;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t d = 0; d < h; d += kTileElements) {
      _tile_loadd(4, qt + d / 2 * 16, 64);
      _tile_loadd(2, a0 + 2 * d, stride);
      _tile_dpbf16ps(0, 2, 4);
      if (two) {
        _tile_loadd(3, a1 + 2 * d, stride);
        _tile_dpbf16ps(1, 3, 4);
      }
    }
    _tile_stored(0, c, 64);
    StoreScores(c, rows, two ? kTileKeys : n, k_scale, scale, scores + j0, ld);
    if (two) {
      _tile_stored(1, c + kTileKeys * 16, 64);
      StoreScores(c + kTileKeys * 16, rows, n - kTileKeys, k_scale, scale, scores + j0 + kTileKeys,
                  ld);
    }
  }
  _tile_release();
  return true;
}

}  // namespace attnrt::cpu
