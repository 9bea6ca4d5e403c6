// gqa.flash.amx: gqa.flash.avx512's block operations with the scores and P·V of tall tiles
// (prompts) on AMX-BF16 (TDPBF16PS: a 16x16 float32 tile += a 16x32 bfloat16 tile times a 32x16
// one). Built with -mamx-tile -mamx-bf16 (besides -mavx512f -mavx512bw -mavx512vl -mfma), as is
// gqa_flash_amx_decode.cpp; reached only after the kernel's supports() saw all of them and
// AVX512-VBMI usable (CPUID, OS-enabled opmask/ZMM and tile state in XCR0, and the process's
// permission to use the tile data, which Linux grants on request) and the problem is a bfloat16
// query with a bfloat16 cache, or any query with a float8 cache. Float8: e4m3fn decode tiles are
// scored on tiles where their query rows are bfloat16 values (gqa_flash_amx_decode.cpp), else, and
// for their P·V, decoded by gqa_flash_amx_fp8.cpp; every other float8 operation is
// gqa.flash.avx512's, but for prompt tiles over a dequantized copy whose values are all bfloat16
// values (a scale of 1.0 or another power of two, for instance): its K rows with a bfloat16 query,
// and its V rows with any query, take the tile products.
//
// Why AMX rather than AVX512_BF16's VDPBF16PS: on the Sapphire Rapids-class cores this was written
// on, VDPBF16PS retires one instruction per two cycles (32 multiply-adds per instruction), half the
// multiply-add rate of two float32 FMA ports, while TDPBF16PS reached about 1100 GMAC/s on one
// core, about 10x the FMA ports (bench/README.md).
//
// Numerics (docs/gqa-semantics.md, bfloat16 queries). A bfloat16 query element times a bfloat16 key
// element is exact in float32 (8-bit significands) and TDPBF16PS accumulates the products in
// float32, rounding to nearest even: the float32 dot product of the other flash kernels with the
// sums in another order. What it does not do like float32 arithmetic: it reads subnormal inputs as
// zero and flushes subnormal results to zero. So a tile whose query holds a bfloat16 subnormal, or
// a chunk of keys that holds one, is scored by gqa.flash.avx512's float32 kernel instead (a
// subnormal times a large value can be a normal product, and Inf times a subnormal must stay Inf);
// partial sums below FLT_MIN in magnitude, which are flushed, are the only difference left (at most
// head_size * 2^-126 per score before the scale). The operations check what they are given rather
// than trust the problem: a query element or a float32 key element that is no bfloat16 value takes
// the float32 kernel too.
//
// The scores of a tall tile: the query rows packed once per call as pairs of bfloat16 (the A
// tiles: 16 rows x 16 pairs, zero-padded to whole tiles), the K block in chunks of 32 keys, each
// transposed into pairs (the B tiles: 32-bit lane j of row i = elements 2i and 2i + 1 of key j, a
// 16x16 transpose of 32-bit words), then 32 rows x 32 keys of scores in four accumulator tiles per
// pass over the pairs; the tiles are stored, scaled and copied into the score block.
//
// P·V keeps float32 probabilities: p = hi + mid + lo exactly, each part a bfloat16 value (the high
// half of p's bits, of the rest, and the last 8 bits), so three tile products against bfloat16 V
// give p * v exactly, summed in float32. V is packed 32 keys at a time into pairs of keys per
// column (the B tiles), the probabilities into their three parts (the A tiles), and each 16-row
// tile of the accumulator is loaded, added to and stored back. A chunk whose probabilities are all
// bfloat16 values (p_precision INPUT rounds them so: vLLM's default configuration) has two zero
// parts, and takes one tile product instead of three. What the split cannot do exactly is
// left to float32 FMAs: a chunk of V holding a subnormal (read as zero), an infinity or a NaN
// (Inf * p must stay Inf when a part of p is 0, and 0 * Inf NaN). A part of p below FLT_MIN (p
// below about 2^-103) is flushed: an error below 2^-126 * |v| per key. Heads that are not a
// multiple of 32 (or above 256) widen each piece of V to float32 once (exact) into a buffer in L1
// and run gqa.flash.avx512's register-blocked P·V on it: the same bits as gqa.flash.avx512. Short
// tiles (decode: memory-bound) and every other operation are gqa.flash.avx512's, unchanged, but for
// e4m3fn decode tiles (gqa_flash_amx_decode.cpp, gqa_flash_amx_fp8.cpp).
//
// Calls only intrinsics and its own internal functions, never std:: inline or template code (see
// gqa_flash_avx512.cpp).
// GCC 12's AVX-512 intrinsics start masked and widening operations from _mm512_undefined_*()
// values, which -Wmaybe-uninitialized reports at the header's lines (GCC bug 105593); the
// diagnostics are silenced for the header's lines only, not for this file's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (Clang would warn that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#include <stdint.h>

// GCC names the features __AMX_TILE__ / __AMX_BF16__, Clang __AMXTILE__ / __AMXBF16__.
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || \
    !(defined(__AMX_BF16__) || defined(__AMXBF16__))
#error "gqa_flash_amx.cpp is built with -mamx-tile -mamx-bf16"
#endif

#include "gqa_amx_tiles.h"
#include "gqa_avx512_math.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// As gqa.flash.avx512: tiles taller than this are prompts (the transposed-K score kernel); shorter
// ones are decode tiles, which gqa.flash.avx512 runs.
constexpr int64_t kTallRows = 8;
static_assert(kGqaAmxShortRows == kTallRows, "the tile scores of decode tiles take the short ones");
// Stack buffers, 32 KiB each: the transposed key chunk (H/2 pairs, rounded up to 16, x 32 keys:
// H <= 512), the query tile as pairs (row groups of up to kQueryWords / (H/2) rows, rounded to
// tiles), the widened V piece (kWideKeys keys of H <= 512 floats: at least 16 keys).
constexpr int64_t kPairWords = 8192;
constexpr int64_t kQueryWords = 8192;
constexpr int64_t kWideFloats = 8192;
constexpr int64_t kWideKeys = 64;

// 32 float32 values from x (bits), the lanes at or past n zero.
inline void LoadFloats32(const void* x, int64_t n, __m512i* lo, __m512i* hi) {
  const auto* f = static_cast<const float*>(x);
  *lo = _mm512_castps_si512(_mm512_maskz_loadu_ps(Mask16(n), f));
  *hi = _mm512_castps_si512(_mm512_maskz_loadu_ps(Mask16(n - 16), f + 16));
}

// qp[r * hpp + i] = elements 2i and 2i + 1 of query row r as bfloat16, for r < rows and
// i < h / 2; 0 for the padding up to rows_p rows of hpp pairs. False when an element is no
// bfloat16 value or a subnormal one.
bool PackQuery(const float* q, int64_t rows, int64_t rows_p, int64_t h, int64_t hpp, uint32_t* qp) {
  for (int64_t i = 0; i < rows_p * hpp; i += 16) {
    _mm512_store_si512(qp + i, _mm512_setzero_si512());
  }
  __mmask16 bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < h; d += 32) {
      __m512i lo, hi;
      LoadFloats32(q + r * h + d, h - d, &lo, &hi);
      bad = static_cast<__mmask16>(bad | NotBFloat16Normal(lo) | NotBFloat16Normal(hi));
      _mm512_mask_storeu_epi32(qp + r * hpp + d / 2, Mask16((h - d) / 2), HighHalves(lo, hi));
    }
  }
  return bad == 0;
}

// Whether the h float32 values at `row` are all bfloat16 values, none subnormal: a cheap look at
// one row before a chunk is packed.
bool FloatRowIsBFloat16(const unsigned char* row, int64_t h) {
  __mmask16 bad = 0;
  for (int64_t d = 0; d < h; d += 32) {
    __m512i lo, hi;
    LoadFloats32(row + 4 * d, h - d, &lo, &hi);
    bad = static_cast<__mmask16>(bad | NotBFloat16Normal(lo) | NotBFloat16Normal(hi));
  }
  return bad == 0;
}

// kt[i * kc + j] = pair i (elements 2i, 2i + 1) of key j of `k` as bfloat16, for i < hp = h / 2
// and j < kc; 0 for keys j >= n. Rows of bfloat16, or float32 ones (a paged block's float32 copy)
// packed to bfloat16. True when a key holds a bfloat16 subnormal, or a float32 element that is no
// bfloat16 value (kt is then incomplete).
template <bool kFloatRows>
bool TransposePairs(const unsigned char* data, size_t row_bytes, int64_t n, int64_t h, uint32_t* kt,
                    int64_t kc) {
  const int64_t hp = h / 2;
  __mmask32 bad = 0;
  for (int64_t g = 0; g < kc; g += 16) {
    for (int64_t i0 = 0; i0 < hp; i0 += 16) {
      const __mmask16 mask = Mask16(hp - i0);
      __m512 r[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        if (g + k >= n) {
          r[k] = _mm512_setzero_ps();
          continue;
        }
        const unsigned char* row = data + static_cast<size_t>(g + k) * row_bytes;
        if constexpr (kFloatRows) {
          __m512i lo, hi;
          LoadFloats32(row + 8 * i0, 2 * (hp - i0), &lo, &hi);
          bad |= NotBFloat16Normal(lo) | NotBFloat16Normal(hi);
          r[k] = _mm512_castsi512_ps(HighHalves(lo, hi));
        } else {
          const __m512i x = _mm512_maskz_loadu_epi32(mask, row + 4 * i0);
          bad |= SubnormalBFloat16(x);
          r[k] = _mm512_castsi512_ps(x);
        }
      }
      Transpose16x16(r);
      const int64_t pairs = hp - i0 < 16 ? hp - i0 : 16;
      for (int64_t i = 0; i < pairs; ++i) {
        _mm512_store_si512(kt + (i0 + i) * kc + g, _mm512_castps_si512(r[i]));
      }
    }
  }
  return bad != 0;
}

// Prefetches issued while a chunk's scores are computed, one step per block of rows: the driver's
// range (this block's V rows) and the K rows of the next chunk (into L1).
struct TallPrefetch {
  Prefetcher& v;
  Prefetcher k_next;
  void Step() {
    v.Step();
    k_next.Step();
  }
};

// Tiles: accumulators 0-3 (rows r0 and r0 + 16 x keys 0-15 and 16-31), query rows 4-5, keys 6-7.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTilePairs = 16;
constexpr int64_t kChunkKeys = 32;

// The scores of one chunk of (at most) 32 keys whose pairs are kt (hpp x 32 words): rows
// [0, rows) of qp (rows_p rows of hpp pairs, zero-padded to whole tiles), keys j < n, written
// scaled to out (row stride ld).
void ScoreChunk(const uint32_t* qp, int64_t rows, int64_t rows_p, int64_t hpp, const uint32_t* kt,
                float scale, float* out, int64_t ld, int64_t n, TallPrefetch& ahead) {
  alignas(64) float tile[2 * kTileRows * kChunkKeys];
  const __m512 vs = _mm512_set1_ps(scale);
  const size_t q_stride = static_cast<size_t>(hpp) * sizeof(uint32_t);
  const size_t k_stride = kChunkKeys * sizeof(uint32_t);
  const size_t c_stride = kChunkKeys * sizeof(float);
  for (int64_t r0 = 0; r0 < rows_p; r0 += 2 * kTileRows) {
    ahead.Step();
    const bool two = r0 + kTileRows < rows_p;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint32_t* a0 = qp + r0 * hpp;
    const uint32_t* a1 = a0 + kTileRows * hpp;
    for (int64_t i = 0; i < hpp; i += kTilePairs) {
      _tile_loadd(4, a0 + i, q_stride);
      _tile_loadd(6, kt + i * kChunkKeys, k_stride);
      _tile_loadd(7, kt + i * kChunkKeys + 16, k_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if (two) {
        _tile_loadd(5, a1 + i, q_stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, tile, c_stride);
    _tile_stored(1, tile + 16, c_stride);
    if (two) {
      _tile_stored(2, tile + kTileRows * kChunkKeys, c_stride);
      _tile_stored(3, tile + kTileRows * kChunkKeys + 16, c_stride);
    }
    const int64_t end = rows - r0 < 2 * kTileRows ? rows - r0 : 2 * kTileRows;
    const __mmask16 lo = Mask16(n), hi = Mask16(n - 16);
    for (int64_t r = 0; r < end; ++r) {
      float* o = out + (r0 + r) * ld;
      const float* t = tile + r * kChunkKeys;
      _mm512_mask_storeu_ps(o, lo, _mm512_mul_ps(vs, _mm512_load_ps(t)));
      _mm512_mask_storeu_ps(o + 16, hi, _mm512_mul_ps(vs, _mm512_load_ps(t + 16)));
    }
  }
}

// x rounded up to a multiple of m.
int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The tall-tile scores of `rows` query rows (q, and qp as pairs: rows_p x hpp) against the
// bfloat16 (or bfloat16-valued float32) rows of k.
void ScoresTall(const float* q, const uint32_t* qp, int64_t rows, int64_t rows_p, int64_t hpp,
                const GqaFlashKv& k, int64_t keys, int64_t h, float scale, float* scores,
                int64_t ld, Prefetcher& v_ahead) {
  alignas(64) uint32_t kt[kPairWords];
  // Pairs [h / 2, hpp) of every key stay 0.
  for (int64_t i = h / 2; i < hpp; ++i) {
    _mm512_store_si512(kt + i * kChunkKeys, _mm512_setzero_si512());
    _mm512_store_si512(kt + i * kChunkKeys + 16, _mm512_setzero_si512());
  }
  const int64_t row_steps = (rows_p + 2 * kTileRows - 1) / (2 * kTileRows);
  const auto* data = static_cast<const unsigned char*>(k.data);
  const bool float_rows = k.type == GqaCacheType::kFloat32;
  for (int64_t j0 = 0; j0 < keys; j0 += kChunkKeys) {
    const int64_t n = keys - j0 < kChunkKeys ? keys - j0 : kChunkKeys;
    const unsigned char* rows_j0 = data + static_cast<size_t>(j0) * k.row_bytes;
    const int64_t next = keys - j0 - n < kChunkKeys ? keys - j0 - n : kChunkKeys;
    TallPrefetch ahead{v_ahead,
                       Prefetcher(rows_j0 + static_cast<size_t>(n) * k.row_bytes,
                                  static_cast<size_t>(next) * k.row_bytes, row_steps, true)};
    // A float32 chunk whose first row already holds no bfloat16 values (the dequantized copy of a
    // quantized cache, scales other than 1) goes to float32 before any packing.
    const bool subnormal =
        float_rows ? !FloatRowIsBFloat16(rows_j0, h) ||
                         TransposePairs<true>(rows_j0, k.row_bytes, n, h, kt, kChunkKeys)
                   : TransposePairs<false>(rows_j0, k.row_bytes, n, h, kt, kChunkKeys);
    if (subnormal) {
      const GqaFlashKv chunk{rows_j0, k.row_bytes, k.type, k.scale, k.per_channel};
      kGqaFlashOpsAvx512.scores(q, rows, chunk, n, h, scale, scores + j0, ld, nullptr, 0);
      for (int64_t s = 0; s < row_steps; ++s) ahead.Step();
      continue;
    }
    ScoreChunk(qp, rows, rows_p, hpp, kt, scale, scores + j0, ld, n, ahead);
  }
}

// e4m3fn K/V rows of a short (decode) tile: decoded by table lookups (gqa_flash_amx_fp8.cpp).
// Tall tiles keep gqa.flash.avx512's operations, which decode while they transpose K or block P·V
// (a decoded piece is a store and a load more per element there: 0.85x), and so do e5m2 rows,
// whose in-register decode is one shift and VCVTPH2PS.
bool DecodedE4M3Fn(const GqaFlashKv& kv, int64_t rows, int64_t h) {
  return kv.type == GqaCacheType::kFloat8E4M3Fn && rows <= kTallRows && h <= kGqaFp8VbmiMaxHead;
}

void Scores(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const void* prefetch, size_t prefetch_bytes) {
  // Decode tiles it takes (it checks the rows, cache type, head size, scale and query itself).
  if (GqaAmxScoresShort(q, rows, k, keys, h, scale, scores, ld, prefetch, prefetch_bytes)) return;
  if (DecodedE4M3Fn(k, rows, h)) {
    return GqaFp8ScoresVbmi(q, rows, k, keys, h, scale, scores, ld, prefetch, prefetch_bytes);
  }
  const bool pairs = k.type == GqaCacheType::kBFloat16 || k.type == GqaCacheType::kFloat32;
  const int64_t hpp = RoundUp(h / 2, kTilePairs);
  if (rows <= kTallRows || !pairs || hpp * kChunkKeys > kPairWords) {
    return kGqaFlashOpsAvx512.scores(q, rows, k, keys, h, scale, scores, ld, prefetch,
                                     prefetch_bytes);
  }
  // Rows in groups whose pairs fit the buffer (every group of a Llama-sized tile: one), of sizes
  // that differ by one at most: each at least half of max_group (32 or more) rows, so a group that
  // falls back to gqa.flash.avx512 takes its tall-tile kernel, whose scores do not depend on how
  // the rows are grouped (a small last group would take its short-tile kernel: other bits).
  const int64_t max_group = kQueryWords / hpp / (2 * kTileRows) * (2 * kTileRows);
  const int64_t groups = (rows + max_group - 1) / max_group;
  const int64_t base = rows / groups;
  const int64_t extra = rows % groups;
  Prefetcher v_ahead(prefetch, prefetch_bytes,
                     groups * ((keys + kChunkKeys - 1) / kChunkKeys) *
                         ((max_group + 2 * kTileRows - 1) / (2 * kTileRows)));
  LoadTileConfig();
  alignas(64) uint32_t qp[kQueryWords];
  int64_t r0 = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = base + (g < extra ? 1 : 0);
    const int64_t rows_p = RoundUp(n, kTileRows);
    const float* qr = q + r0 * h;
    float* out = scores + r0 * ld;
    if (PackQuery(qr, n, rows_p, h, hpp, qp)) {
      ScoresTall(qr, qp, n, rows_p, hpp, k, keys, h, scale, out, ld, v_ahead);
    } else {
      kGqaFlashOpsAvx512.scores(qr, n, k, keys, h, scale, out, ld, nullptr, 0);
    }
    r0 += n;
  }
  _tile_release();
}

// out[j*h ..] = row j of bfloat16 rows `data` widened to float32, for j < n.
void WidenRows(const unsigned char* data, size_t row_bytes, int64_t n, int64_t h, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const auto* row = reinterpret_cast<const uint16_t*>(data + static_cast<size_t>(j) * row_bytes);
    for (int64_t d = 0; d < h; d += 16) {
      const __mmask16 mask = Mask16(h - d);
      const __m256i bits = _mm256_maskz_loadu_epi16(mask, row + d);
      _mm512_mask_storeu_ps(
          out + j * h + d, mask,
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
  }
}

// gqa.flash.avx512's P·V over bfloat16 V rows widened to float32 a piece at a time.
void AccumulateWidened(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                       int64_t h, float* acc, const void* prefetch, size_t prefetch_bytes) {
  alignas(64) float wide[kWideFloats];
  const int64_t piece = kWideFloats / h < kWideKeys ? kWideFloats / h : kWideKeys;
  const auto* data = static_cast<const unsigned char*>(v.data);
  const auto* ahead = static_cast<const unsigned char*>(prefetch);
  const GqaFlashKv wide_rows{wide, static_cast<size_t>(h) * sizeof(float), GqaCacheType::kFloat32,
                             nullptr, false};
  for (int64_t j0 = 0; j0 < keys; j0 += piece) {
    const int64_t n = keys - j0 < piece ? keys - j0 : piece;
    WidenRows(data + static_cast<size_t>(j0) * v.row_bytes, v.row_bytes, n, h, wide);
    // This piece's share of the range to prefetch.
    const size_t b0 = prefetch_bytes * static_cast<size_t>(j0) / static_cast<size_t>(keys);
    const size_t b1 = prefetch_bytes * static_cast<size_t>(j0 + n) / static_cast<size_t>(keys);
    kGqaFlashOpsAvx512.accumulate(p + j0, rows, ld, wide_rows, n, h, acc,
                                  ahead == nullptr ? nullptr : ahead + b0, b1 - b0);
  }
}

// ---- P·V on tiles
// ---------------------------------------------------------------------------------

// Most query rows and columns of one tiled P·V pass (larger tiles go in row groups, or widened).
constexpr int64_t kPvRows = 64;
constexpr int64_t kPvColumns = 256;

// Lanes of 32 bfloat16 values that are infinite or NaN.
inline __mmask32 NonFiniteBFloat16(__m512i bits) {
  const __m512i exponent = _mm512_set1_epi16(0x7F80);
  return _mm512_cmpeq_epi16_mask(_mm512_and_si512(bits, exponent), exponent);
}

// vt[(c / 16) * 256 + i * 16 + c % 16] = (value 2i, value 2i + 1) of column c, for the n <= 32 V
// rows of a chunk (rows past n read as 0) and c < h: the B tiles, 16 pairs of keys x 16 columns
// each. True when a value is subnormal, infinite or NaN, or (float32 rows) no bfloat16 value: the
// chunk then goes through float32 FMAs (0 * Inf must stay NaN and Inf * p Inf whatever the split of
// p, and a subnormal must count as its value).
template <bool kFloatRows>
bool PackValues(const unsigned char* data, size_t row_bytes, int64_t n, int64_t h, uint32_t* vt) {
  const __m512i even =
      _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005,
                        0x00260006, 0x00270007, 0x00280008, 0x00290009, 0x002A000A, 0x002B000B,
                        0x002C000C, 0x002D000D, 0x002E000E, 0x002F000F);
  const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(16));
  __mmask32 bad = 0;
  for (int64_t i = 0; i < kChunkKeys / 2; ++i) {
    for (int64_t c = 0; c < h; c += 32) {
      __m512i x[2];
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t j = 2 * i + k;
        if (j >= n) {
          x[k] = _mm512_setzero_si512();
          continue;
        }
        const unsigned char* row = data + static_cast<size_t>(j) * row_bytes;
        if constexpr (kFloatRows) {
          __m512i lo, hi;
          LoadFloats32(row + 4 * c, 32, &lo, &hi);
          bad |= NotBFloat16Normal(lo) | NotBFloat16Normal(hi);
          x[k] = HighHalves(lo, hi);
        } else {
          x[k] = _mm512_loadu_si512(row + 2 * c);
        }
        bad |= SubnormalBFloat16(x[k]) | NonFiniteBFloat16(x[k]);
      }
      uint32_t* out = vt + (c / 16) * 256 + i * 16;
      _mm512_store_si512(out, _mm512_permutex2var_epi16(x[0], even, x[1]));
      _mm512_store_si512(out + 256, _mm512_permutex2var_epi16(x[0], odd, x[1]));
    }
  }
  return bad != 0;
}

// ap[s * rows_p * 16 + r * 16 + i] = part s of the pair (p[r][2i], p[r][2i + 1]) for the n <= 32
// keys of a chunk (0 past n and for rows [rows, rows_p)): p = hi + mid + lo exactly, each a
// bfloat16 value (hi the high half of p's bits, mid that of p - hi, lo the rest: 8 + 8 + 8 bits).
// Returns the number of parts P·V needs: 1 when every p of the chunk is a bfloat16 value (mid and
// lo all zero: p_precision INPUT rounds P so), else 3.
int PackProbabilities(const float* p, int64_t rows, int64_t rows_p, int64_t ld, int64_t n,
                      uint32_t* ap) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512i low_bits = _mm512_setzero_si512();
  for (int64_t r = 0; r < rows_p; ++r) {
    __m512 x[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (r < rows) {
      x[0] = _mm512_maskz_loadu_ps(Mask16(n), p + r * ld);
      x[1] = _mm512_maskz_loadu_ps(Mask16(n - 16), p + r * ld + 16);
    }
    __m512i part[3][2];
    for (int k = 0; k < 2; ++k) {
      low_bits = _mm512_or_si512(low_bits, _mm512_andnot_si512(high, _mm512_castps_si512(x[k])));
      const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x[k]), high));
      const __m512 rest = _mm512_sub_ps(x[k], hi);
      const __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rest), high));
      part[0][k] = _mm512_castps_si512(hi);
      part[1][k] = _mm512_castps_si512(mid);
      part[2][k] = _mm512_castps_si512(_mm512_sub_ps(rest, mid));
    }
    for (int s = 0; s < 3; ++s) {
      _mm512_store_si512(ap + (s * rows_p + r) * 16, HighHalves(part[s][0], part[s][1]));
    }
  }
  return _mm512_test_epi32_mask(low_bits, low_bits) == 0 ? 1 : 3;
}

// Chunks whose products one pass adds while the accumulator tiles stay loaded: 4 x 32 keys (a
// cache block of 128 rows in one pass). Loading and storing the accumulator tiles per chunk would
// cost about what the chunk's products do.
constexpr int kGroupChunks = 4;

// Accumulator tile `acc_tile` (a literal, 0-3) += the parts of A (tiles 5-7: `parts` 3, or 1 when
// mid and lo are zero) times the B tile at `b` (loaded into tile 4). A zero part adds products of
// +-0 only, which change no sum that is not zero: skipping them gives the same bits there. A macro:
// the tile intrinsics name their registers in the instruction text, so they take literals only.
#define ATTNRT_AMX_ADD_PRODUCTS(acc_tile, b, parts) \
  do {                                              \
    _tile_loadd(4, (b), 64);                        \
    _tile_dpbf16ps(acc_tile, 5, 4);                 \
    if ((parts) == 3) {                             \
      _tile_dpbf16ps(acc_tile, 6, 4);               \
      _tile_dpbf16ps(acc_tile, 7, 4);               \
    }                                               \
  } while (0)

// The packed chunks of one pass: V as B tiles (PackValues) and the probabilities' parts as A tiles
// (PackProbabilities), chunk g of `count`, in key order.
struct PackedChunks {
  const uint32_t* vt[kGroupChunks];
  const uint32_t* ap[kGroupChunks];
  int parts[kGroupChunks];
  int count;
};

// acc rows [0, 16) (stride `stride` floats; the rows r0 .. r0 + 15 of the packed A tiles, which
// hold rows_p rows) += the products of every chunk of `c`, 64 columns at a time: the accumulator
// tiles loaded once, each chunk's products added in key order (the bits of one chunk at a time).
void AccumulateRowTile(const PackedChunks& c, int64_t rows_p, int64_t r0, int64_t h, float* acc,
                       size_t stride) {
  const size_t bytes = stride * sizeof(float);
  for (int64_t col = 0; col < h; col += 64) {
    const bool four = h - col >= 64;  // else 32 columns (h is a multiple of 32)
    _tile_loadd(0, acc + col, bytes);
    _tile_loadd(1, acc + col + 16, bytes);
    if (four) {
      _tile_loadd(2, acc + col + 32, bytes);
      _tile_loadd(3, acc + col + 48, bytes);
    }
    for (int g = 0; g < c.count; ++g) {
      const int parts = c.parts[g];
      _tile_loadd(5, c.ap[g] + r0 * 16, 64);
      if (parts == 3) {
        _tile_loadd(6, c.ap[g] + (rows_p + r0) * 16, 64);
        _tile_loadd(7, c.ap[g] + (2 * rows_p + r0) * 16, 64);
      }
      const uint32_t* b = c.vt[g] + (col / 16) * 256;
      ATTNRT_AMX_ADD_PRODUCTS(0, b, parts);
      ATTNRT_AMX_ADD_PRODUCTS(1, b + 256, parts);
      if (four) {
        ATTNRT_AMX_ADD_PRODUCTS(2, b + 512, parts);
        ATTNRT_AMX_ADD_PRODUCTS(3, b + 768, parts);
      }
    }
    _tile_stored(0, acc + col, bytes);
    _tile_stored(1, acc + col + 16, bytes);
    if (four) {
      _tile_stored(2, acc + col + 32, bytes);
      _tile_stored(3, acc + col + 48, bytes);
    }
  }
}

#undef ATTNRT_AMX_ADD_PRODUCTS

// Adds the packed chunks' products to acc (rows x h, rows_p = rows rounded up to tiles).
void AddPackedChunks(const PackedChunks& c, int64_t rows, int64_t rows_p, int64_t h, float* acc,
                     Prefetcher& ahead) {
  if (c.count == 0) return;
  alignas(64) float tail[kTileRows * kPvColumns];
  const int64_t full = rows / kTileRows * kTileRows;
  for (int64_t r0 = 0; r0 < rows_p; r0 += kTileRows) {
    for (int g = 0; g < c.count; ++g) ahead.Step();
    if (r0 < full) {
      AccumulateRowTile(c, rows_p, r0, h, acc + r0 * h, static_cast<size_t>(h));
      continue;
    }
    // The last rows, fewer than a tile: through a tile-sized copy.
    const int64_t rest = rows - r0;
    for (int64_t i = 0; i < kTileRows * h; i += 16) {
      _mm512_store_ps(tail + i,
                      i < rest * h ? _mm512_loadu_ps(acc + r0 * h + i) : _mm512_setzero_ps());
    }
    AccumulateRowTile(c, rows_p, r0, h, tail, static_cast<size_t>(h));
    for (int64_t i = 0; i < rest * h; i += 16) {
      _mm512_storeu_ps(acc + r0 * h + i, _mm512_load_ps(tail + i));
    }
  }
}

// P·V of at most kPvRows rows on tiles, 32 keys a chunk, kGroupChunks chunks a pass; a chunk whose
// V holds a value the split of p cannot multiply exactly goes through float32 FMAs (after the
// chunks before it, so keys still add in order).
void AccumulateTiles(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                     int64_t h, float* acc, Prefetcher& ahead) {
  alignas(64) uint32_t vt[kGroupChunks][kPvColumns * kChunkKeys / 2];
  alignas(64) uint32_t ap[kGroupChunks][3 * kPvRows * 16];
  const int64_t rows_p = RoundUp(rows, kTileRows);
  const auto* data = static_cast<const unsigned char*>(v.data);
  PackedChunks packed{};
  for (int64_t j0 = 0; j0 < keys; j0 += kChunkKeys) {
    const int64_t n = keys - j0 < kChunkKeys ? keys - j0 : kChunkKeys;
    const unsigned char* rows_j0 = data + static_cast<size_t>(j0) * v.row_bytes;
    const int g = packed.count;
    const bool exact =
        v.type == GqaCacheType::kFloat32
            ? FloatRowIsBFloat16(rows_j0, h) && !PackValues<true>(rows_j0, v.row_bytes, n, h, vt[g])
            : !PackValues<false>(rows_j0, v.row_bytes, n, h, vt[g]);
    if (!exact) {
      AddPackedChunks(packed, rows, rows_p, h, acc, ahead);
      packed.count = 0;
      const GqaFlashKv chunk{rows_j0, v.row_bytes, v.type, nullptr, false};
      if (v.type == GqaCacheType::kFloat32) {
        kGqaFlashOpsAvx512.accumulate(p + j0, rows, ld, chunk, n, h, acc, nullptr, 0);
      } else {
        AccumulateWidened(p + j0, rows, ld, chunk, n, h, acc, nullptr, 0);
      }
      continue;
    }
    packed.vt[g] = vt[g];
    packed.ap[g] = ap[g];
    packed.parts[g] = PackProbabilities(p + j0, rows, rows_p, ld, n, ap[g]);
    packed.count = g + 1;
    if (packed.count == kGroupChunks) {
      AddPackedChunks(packed, rows, rows_p, h, acc, ahead);
      packed.count = 0;
    }
  }
  AddPackedChunks(packed, rows, rows_p, h, acc, ahead);
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                int64_t h, float* acc, const void* prefetch, size_t prefetch_bytes) {
  if (DecodedE4M3Fn(v, rows, h)) {
    return GqaFp8AccumulateVbmi(p, rows, ld, v, keys, h, acc, prefetch, prefetch_bytes);
  }
  const bool pairs = v.type == GqaCacheType::kBFloat16 || v.type == GqaCacheType::kFloat32;
  if (rows <= kTallRows || !pairs || h % 32 != 0 || h > kPvColumns) {
    if (rows <= kTallRows || v.type != GqaCacheType::kBFloat16 || h * 16 > kWideFloats) {
      return kGqaFlashOpsAvx512.accumulate(p, rows, ld, v, keys, h, acc, prefetch, prefetch_bytes);
    }
    return AccumulateWidened(p, rows, ld, v, keys, h, acc, prefetch, prefetch_bytes);
  }
  const int64_t groups = (rows + kPvRows - 1) / kPvRows;
  Prefetcher ahead(prefetch, prefetch_bytes,
                   groups * ((keys + kChunkKeys - 1) / kChunkKeys) * (kPvRows / kTileRows));
  LoadTileConfig();
  for (int64_t r0 = 0; r0 < rows; r0 += kPvRows) {
    const int64_t n = rows - r0 < kPvRows ? rows - r0 : kPvRows;
    AccumulateTiles(p + r0 * ld, n, ld, v, keys, h, acc + r0 * h, ahead);
  }
  _tile_release();
}

void Dequantize(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  if (kv.type == GqaCacheType::kFloat8E4M3Fn) return GqaFp8DequantizeVbmi(kv, keys, h, out);
  kGqaFlashOpsAvx512.dequantize(kv, keys, h, out);
}

void Widen(const void* src, GqaFloatType type, float* dst, int64_t n) {
  kGqaFlashOpsAvx512.widen(src, type, dst, n);
}

void Narrow(const float* src, float inv, GqaFloatType type, void* dst, int64_t n) {
  kGqaFlashOpsAvx512.narrow(src, inv, type, dst, n);
}

// p_precision INPUT's rounding of the probabilities, gqa.flash.avx512's (without it the driver
// runs a scalar loop: 15 % of a bfloat16 encoder step).
void Round(float* x, int64_t n, GqaFloatType type) { kGqaFlashOpsAvx512.round(x, n, type); }

}  // namespace

// tall_split_keys: a key range split over several calls is packed in the same pairs and chunks
// only where the splits fall on whole chunks.
const GqaFlashOps kGqaFlashOpsAmx = {&Scores,   &Accumulate, &Dequantize, &RowMax, &RowExpSum,
                                     &RowScale, kChunkKeys,  &Round,      &Widen,  &Narrow};

}  // namespace attnrt::cpu
