// gqa.flash.avx512: the block operations on AVX-512 (F/BW/VL) + FMA. The only flash file built
// with -mavx512f -mavx512bw -mavx512vl -mfma; reached only after gqa.flash.avx512's supports() saw
// them usable (CPUID and OS-enabled opmask/ZMM state).
//
// Two score kernels, chosen by the tile's row count only (never by the key count, so a key block
// handed over in pieces, as the paged kernels do, gets the same bits):
//   - tall tiles (prompts, more than kTallRows rows): a register-blocked GEMM micro-kernel. The K
//     block is transposed 16x16 at a time (dequantized on the way) into a small stack buffer,
//     then 8 query rows x 32 keys of scores live in 16 zmm accumulators while one pass over the
//     head dimension broadcasts one query element per row and loads two vectors of 16 keys: 16
//     FMAs per 2 vector loads, no horizontal sums. The transpose costs H loads per key, against
//     rows x H FMAs per key.
//   - short tiles (decode: the G heads of one token): 4 rows x 4 keys of 16-lane dot products,
//     each K vector decoded once and used by every row, reduced 16 at a time
//     (HorizontalSums16); memory-bound, so the K rows are read once at full width.
// P·V keeps R rows x V vectors of the accumulator in registers (6 x 4 for tall tiles, 4 x 4 for
// short ones) over a chunk of kKeyChunk keys, so each V slab read from L2 is reused from L1 by the
// other row blocks; every accumulator element adds the keys in order, whatever the chunking, so
// sums do not depend on how a block was split either.
//
// Quantized K/V rows (int8, int4, fp8 e4m3fn) are dequantized 16 elements at a time in registers
// (gqa_avx512_cache.h) right where they are used; float16 rows are widened with VCVTPH2PS.
//
// Calls only intrinsics and its own internal functions, never std:: inline or template code: such
// functions would be emitted by the baseline and the AVX-512 translation units alike, and the
// linker may keep the AVX-512 copy for a baseline caller (see gqa_pipeline.h).
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

#include "gqa_avx512_cache.h"
#include "gqa_avx512_math.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_key_loop.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

constexpr size_t kLine = 64;
constexpr __mmask16 kLow8 = 0x00FF;
// Tiles taller than this take the transposed-K score kernel; the driver hands blocks of at most
// this many rows over without dequantizing them first (its kFusedRows), and those are decode
// tiles, where the K rows are read once and a transpose would only add work.
constexpr int64_t kTallRows = 8;
// Stack buffer of the transposed K block: H x 32 keys (H <= 256) or H x 16 (H <= 512); larger
// heads use the short-tile kernel, which needs no buffer.
constexpr int64_t kTransposeFloats = 8192;
// Keys per P·V chunk: 64 keys x 4 vectors = 16 KiB of float32 V slab, well inside L1.
constexpr int64_t kKeyChunk = 64;
// Columns of the float32 V slab of a tall tile over a 16-bit cache (AccumulateTallWidened): 64
// keys x 64 columns = 16 KiB.
constexpr int64_t kSlabColumns = 64;
// Short tiles stream K rows once: software prefetch this many bytes of K rows ahead of the demand
// loads (measured on a float32 16k decode: 16 keys of 512 bytes ahead reads about 1.4x the bytes
// per second of the hardware prefetcher alone).
constexpr size_t kKeyLeadBytes = 8192;

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

// The int4 kernels below hold 32 consecutive elements as two vectors: the 16 even elements (low
// nibbles) and the 16 odd ones (high nibbles).
// Elements [0, 32) held as lo = [0, 16) and hi = [16, 32) -> even and odd.
__attribute__((always_inline)) inline void SplitEvenOdd(__m512 lo, __m512 hi, __m512* even,
                                                        __m512* odd) {
  const __m512i even_index =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  *even = _mm512_permutex2var_ps(lo, even_index, hi);
  *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_index, _mm512_set1_epi32(1)), hi);
}

// The inverse of SplitEvenOdd.
__attribute__((always_inline)) inline void JoinEvenOdd(__m512 even, __m512 odd, __m512* lo,
                                                       __m512* hi) {
  const __m512i low_index =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  *lo = _mm512_permutex2var_ps(even, low_index, odd);
  *hi = _mm512_permutex2var_ps(even, _mm512_add_epi32(low_index, _mm512_set1_epi32(8)), odd);
}

// The 32 int4 elements of the 16 bytes at `bytes`, even and odd, as table[code] (Int4Table(), or
// it times a per-tensor scale).
__attribute__((always_inline)) inline void LoadInt4EvenOdd(const unsigned char* bytes, __m512 table,
                                                           __m512* even, __m512* odd) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  *even = _mm512_permutexvar_ps(x, table);
  *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table);
}

// Brings rows [j, j + n) of a K/V block towards the core ahead of their use: `used` bytes of each
// (a row's elements; row_bytes is the stride, which over a paged BSNH block spans every kv head).
template <class Kv>
void PrefetchRows(const Kv& k, int64_t j, int64_t n, size_t used, int hint) {
  for (int64_t i = 0; i < n; ++i) {
    const char* row =
        reinterpret_cast<const char*>(k.data) + static_cast<size_t>(j + i) * k.row_bytes;
    for (size_t b = 0; b < used; b += kLine) {
      if (hint == _MM_HINT_T0) {
        _mm_prefetch(row + b, _MM_HINT_T0);
      } else {
        _mm_prefetch(row + b, _MM_HINT_T1);
      }
    }
  }
}

// Bytes of a row's h elements (GqaCacheRowBytes, computed here so that the file depends on no
// function outside it: its white-box tests link it alone).
constexpr size_t RowBytes(GqaCacheType type, int64_t h) {
  const auto n = static_cast<size_t>(h);
  switch (type) {
    case GqaCacheType::kFloat32:
      return n * 4;
    case GqaCacheType::kFloat16:
    case GqaCacheType::kBFloat16:
      return n * 2;
    case GqaCacheType::kInt4:
      return n / 2;
    case GqaCacheType::kInt8:
    case GqaCacheType::kFloat8E4M3Fn:
      break;
  }
  return n;
}

// ---- scores, short tiles ------------------------------------------------------------------------

// out[r*ld + c] = scale * <q_r, k_c> for R rows (stride h) and C keys. Forced inline (with
// ScoreKeys) into the key loop: as separate calls, each block's reduction did not overlap the
// next block's FMAs (measured: 1.6-1.9x the decode score throughput inlined).
template <class Kv, int R, int C>
__attribute__((always_inline)) inline void ScoreBlock(const float* q, Kv k, int64_t h, float scale,
                                                      float* out, int64_t ld) {
  __m512 acc[R * C];
#pragma GCC unroll 16
  for (int i = 0; i < R * C; ++i) acc[i] = _mm512_setzero_ps();
  [[maybe_unused]] __m512 s = k.Scale(0, kAllLanes);  // per tensor: one broadcast for the block
  [[maybe_unused]] auto step = [&](int64_t d, __mmask16 mask) {
    if constexpr (Kv::kPerChannelScales) s = k.Scale(d, mask);
    __m512 kv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) kv[c] = k.Load(c, d, s, mask);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_maskz_loadu_ps(mask, q + r * h + d);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r * C + c] = _mm512_fmadd_ps(qv, kv[c], acc[r * C + c]);
    }
  };
  if constexpr (Kv::kSplitNibbles) {
    // 32 elements per step: a 16-byte load, the low nibbles (even elements) and the high ones
    // (odd elements) looked up as floats; the query rows hold the matching even/odd order.
    const __m512 table = Int4Table();
    for (int64_t d = 0; d < h; d += 32) {
      __m512 even[C], odd[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        LoadInt4EvenOdd(k.data + static_cast<size_t>(c) * k.row_bytes + d / 2, table, &even[c],
                        &odd[c]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 qe = _mm512_loadu_ps(q + r * h + d);
        const __m512 qo = _mm512_loadu_ps(q + r * h + d + 16);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          acc[r * C + c] = _mm512_fmadd_ps(qe, even[c], acc[r * C + c]);
          acc[r * C + c] = _mm512_fmadd_ps(qo, odd[c], acc[r * C + c]);
        }
      }
    }
  } else {
    int64_t d = 0;
    for (; d + 16 <= h; d += 16) step(d, kAllLanes);
    if (d < h) step(d, kLow8);  // h is a multiple of 8
  }
  // Lane order of the reductions is acc's: row-major over (row, key). Both reductions give the
  // same bits (gqa_avx512_math.h).
  if constexpr (R == 4 && C == 4) {
    // Row r's four scores are lanes 4r..4r+3.
    const __m512 scores = _mm512_mul_ps(_mm512_set1_ps(scale), HorizontalSums16(acc));
    _mm_storeu_ps(out, _mm512_castps512_ps128(scores));
    _mm_storeu_ps(out + ld, _mm512_extractf32x4_ps(scores, 1));
    _mm_storeu_ps(out + 2 * ld, _mm512_extractf32x4_ps(scores, 2));
    _mm_storeu_ps(out + 3 * ld, _mm512_extractf32x4_ps(scores, 3));
    return;
  }
  float sums[R * C];
  if constexpr (R * C == 16) {
    _mm512_storeu_ps(sums, HorizontalSums16(acc));
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < R * C; ++i) sums[i] = HorizontalSum16(acc[i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R * C; ++i) out[(i / C) * ld + i % C] = scale * sums[i];
}

template <class Kv, int C>
__attribute__((always_inline)) inline void ScoreKeys(const float* q, int64_t rows, Kv k, int64_t h,
                                                     float scale, float* out, int64_t ld) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) ScoreBlock<Kv, 4, C>(q + i * h, k, h, scale, out + i * ld, ld);
  if (i + 2 <= rows) {
    ScoreBlock<Kv, 2, C>(q + i * h, k, h, scale, out + i * ld, ld);
    i += 2;
  }
  if (i < rows) ScoreBlock<Kv, 1, C>(q + i * h, k, h, scale, out + i * ld, ld);
}

template <class Kv>
void ScoresShortOf(const float* q, int64_t rows, Kv k, int64_t keys, int64_t h, float scale,
                   float* scores, int64_t ld, Prefetcher& ahead) {
  // Keys outer: four keys stay in L1 while every row of the tile meets them.
  int64_t j = 0;
  const size_t used = RowBytes(Kv::kCacheType, h);
  const int64_t lead = static_cast<int64_t>((kKeyLeadBytes + used - 1) / used);
  for (; j + 4 <= keys; j += 4) {
    ahead.Step();
    if (j + lead + 4 <= keys) PrefetchRows(k, j + lead, 4, used, _MM_HINT_T0);
    ScoreKeys<Kv, 4>(q, rows, k.Offset(j), h, scale, scores + j, ld);
  }
  ahead.Step();
  switch (keys - j) {
    case 3:
      ScoreKeys<Kv, 3>(q, rows, k.Offset(j), h, scale, scores + j, ld);
      break;
    case 2:
      ScoreKeys<Kv, 2>(q, rows, k.Offset(j), h, scale, scores + j, ld);
      break;
    case 1:
      ScoreKeys<Kv, 1>(q, rows, k.Offset(j), h, scale, scores + j, ld);
      break;
    default:
      break;
  }
}

// Short tiles of a quantized K: <q, k * s> is computed as <q * s, k>, the scale folded into the
// (at most kTallRows) query rows once per block instead of into every K vector of it. The query
// stays float32 (only the order of two float32 multiplications changes); a score does not depend
// on how the keys were blocked.
constexpr int64_t kFoldedQueryFloats = 4096;

template <class Kv>
void ScoresShort(const float* q, int64_t rows, Kv k, int64_t keys, int64_t h, float scale,
                 float* scores, int64_t ld, Prefetcher& ahead) {
  if constexpr (Kv::kScaled) {
    if constexpr (Kv::kCacheType == GqaCacheType::kInt4) {
      if (rows * h <= kFoldedQueryFloats && h % 32 == 0) {
        // Folded and reordered per 32 elements: the 16 even ones, then the 16 odd ones.
        alignas(64) float folded[kFoldedQueryFloats];
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < h; d += 32) {
            const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(q + r * h + d), k.Scale(d, kAllLanes));
            const __m512 hi =
                _mm512_mul_ps(_mm512_loadu_ps(q + r * h + d + 16), k.Scale(d + 16, kAllLanes));
            __m512 even, odd;
            SplitEvenOdd(lo, hi, &even, &odd);
            _mm512_store_ps(folded + r * h + d, even);
            _mm512_store_ps(folded + r * h + d + 16, odd);
          }
        }
        using Split = KvRows<Kv::kCacheType, Kv::kPerChannelScales, true, true>;
        ScoresShortOf(folded, rows, Split{k.data, k.row_bytes, k.scale}, keys, h, scale, scores, ld,
                      ahead);
        return;
      }
    }
    if (rows * h <= kFoldedQueryFloats) {
      alignas(64) float folded[kFoldedQueryFloats];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t d = 0; d < h; d += 16) {
          const __mmask16 mask = h - d >= 16 ? kAllLanes : kLow8;
          _mm512_mask_storeu_ps(
              folded + r * h + d, mask,
              _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, q + r * h + d), k.Scale(d, mask)));
        }
      }
      using Unscaled = KvRows<Kv::kCacheType, Kv::kPerChannelScales, true>;
      ScoresShortOf(folded, rows, Unscaled{k.data, k.row_bytes, k.scale}, keys, h, scale, scores,
                    ld, ahead);
      return;
    }
  }
  ScoresShortOf(q, rows, k, keys, h, scale, scores, ld, ahead);
}

// ---- scores, tall tiles -------------------------------------------------------------------------

// Rows j0..j0+15 of 16 columns from d (the low 8 when mask says so) transposed into kt (row
// stride kc); rows at or past n read as 0. kFull: all 16 rows exist, no per-row test.
template <bool kFull, class Kv>
void TransposeGroup(Kv k, int64_t j0, int64_t n, int64_t d, __mmask16 mask, float* kt, int64_t kc) {
  const __m512 s = k.Scale(d, mask);
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    r[i] = kFull || i < n ? k.Load(j0 + i, d, s, mask) : _mm512_setzero_ps();
  }
  Transpose16x16(r);
  if (mask == kAllLanes) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_store_ps(kt + (d + i) * kc, r[i]);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) _mm512_store_ps(kt + (d + i) * kc, r[i]);
  }
}

// kt[d*kc + j] = element d of key j0 + j as float32, for d < h and j < kc; 0 for keys j >= n.
template <class Kv>
void TransposeKeys(Kv k, int64_t j0, int64_t n, int64_t h, float* kt, int64_t kc) {
  int64_t g = 0;
  for (; g < n; g += 16) {
    for (int64_t d = 0; d < h; d += 16) {
      const __mmask16 mask = h - d >= 16 ? kAllLanes : kLow8;
      if (g + 16 <= n) {
        TransposeGroup<true>(k, j0 + g, 16, d, mask, kt + g, kc);
      } else {
        TransposeGroup<false>(k, j0 + g, n - g, d, mask, kt + g, kc);
      }
    }
  }
  for (; g < kc; g += 16) {
    for (int64_t d = 0; d < h; ++d) _mm512_store_ps(kt + d * kc + g, _mm512_setzero_ps());
  }
}

// out[r*ld + j] = scale * sum_d q[r*h + d] * kt[d*16W + j] for R rows and keys j < n <= 16W.
template <int R, int W>
void ScoreMicroKernel(const float* q, int64_t h, const float* kt, float scale, float* out,
                      int64_t ld, int64_t n) {
  __m512 acc[R * W];
#pragma GCC unroll 16
  for (int i = 0; i < R * W; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < h; ++d) {
    __m512 kv[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) kv[w] = _mm512_load_ps(kt + d * 16 * W + 16 * w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 qb = _mm512_set1_ps(q[r * h + d]);
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) acc[r * W + w] = _mm512_fmadd_ps(qb, kv[w], acc[r * W + w]);
    }
  }
  const __m512 vs = _mm512_set1_ps(scale);
#pragma GCC unroll 2
  for (int w = 0; w < W; ++w) {
    const __mmask16 mask = Mask16(n - 16 * w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(out + r * ld + 16 * w, mask, _mm512_mul_ps(vs, acc[r * W + w]));
    }
  }
}

// Prefetches issued while a transposed chunk's scores are computed, one step per register block
// of rows: the block's V rows (the driver's range) and the K rows of the next two chunks.
struct TallPrefetch {
  Prefetcher& v;
  Prefetcher k_next;   // into L1: transposed at the start of the next chunk
  Prefetcher k_later;  // into L2
  void Step() {
    v.Step();
    k_next.Step();
    k_later.Step();
  }
};

template <int W>
void ScoreRowsTransposed(const float* q, int64_t rows, int64_t h, const float* kt, float scale,
                         float* out, int64_t ld, int64_t n, TallPrefetch& ahead) {
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    ahead.Step();
    ScoreMicroKernel<8, W>(q + i * h, h, kt, scale, out + i * ld, ld, n);
  }
  const float* qi = q + i * h;
  float* oi = out + i * ld;
  if (i < rows) ahead.Step();
  switch (rows - i) {
    case 7:
      return ScoreMicroKernel<7, W>(qi, h, kt, scale, oi, ld, n);
    case 6:
      return ScoreMicroKernel<6, W>(qi, h, kt, scale, oi, ld, n);
    case 5:
      return ScoreMicroKernel<5, W>(qi, h, kt, scale, oi, ld, n);
    case 4:
      return ScoreMicroKernel<4, W>(qi, h, kt, scale, oi, ld, n);
    case 3:
      return ScoreMicroKernel<3, W>(qi, h, kt, scale, oi, ld, n);
    case 2:
      return ScoreMicroKernel<2, W>(qi, h, kt, scale, oi, ld, n);
    case 1:
      return ScoreMicroKernel<1, W>(qi, h, kt, scale, oi, ld, n);
    default:
      return;
  }
}

// Keys per transposed chunk: 32, or 16 when H x 32 floats would not fit the buffer.
int64_t TransposeChunk(int64_t h) { return h * 32 <= kTransposeFloats ? 32 : 16; }

// Rows [j, min(j + n, keys)) of k as a byte range (empty past the end).
template <class Kv>
size_t RowRangeBytes(const Kv& k, int64_t j, int64_t n, int64_t keys) {
  if (j >= keys) return 0;
  return static_cast<size_t>((keys - j < n ? keys - j : n)) * k.row_bytes;
}

template <class Kv>
void ScoresTall(const float* q, int64_t rows, Kv k, int64_t keys, int64_t h, float scale,
                float* scores, int64_t ld, Prefetcher& v_ahead) {
  alignas(64) float kt[kTransposeFloats];
  const int64_t kc = TransposeChunk(h);
  const int64_t row_steps = (rows + 7) / 8;
  for (int64_t j0 = 0; j0 < keys; j0 += kc) {
    const int64_t n = keys - j0 < kc ? keys - j0 : kc;
    // The next chunk's K rows come into L1 and the one after into L2 while this one's scores are
    // computed: the driver prefetches a tile's later K blocks, but not its first one, and the
    // transpose would otherwise wait on every row it loads.
    const auto* next = k.data + static_cast<size_t>(j0 + kc) * k.row_bytes;
    TallPrefetch ahead{v_ahead,
                       Prefetcher(next, RowRangeBytes(k, j0 + kc, kc, keys), row_steps, true),
                       Prefetcher(next + static_cast<size_t>(kc) * k.row_bytes,
                                  RowRangeBytes(k, j0 + 2 * kc, kc, keys), row_steps)};
    TransposeKeys(k, j0, n, h, kt, kc);
    if (kc == 32) {
      ScoreRowsTransposed<2>(q, rows, h, kt, scale, scores + j0, ld, n, ahead);
    } else {
      ScoreRowsTransposed<1>(q, rows, h, kt, scale, scores + j0, ld, n, ahead);
    }
  }
}

template <class Kv>
void ScoresOf(const float* q, int64_t rows, Kv k, int64_t keys, int64_t h, float scale,
              float* scores, int64_t ld, const void* prefetch, size_t prefetch_bytes) {
  if (rows > kTallRows && h * 16 <= kTransposeFloats) {
    // One Step() per register block of rows of each transposed chunk of keys (ScoresTall).
    const int64_t kc = TransposeChunk(h);
    Prefetcher ahead(prefetch, prefetch_bytes, (keys + kc - 1) / kc * ((rows + 7) / 8));
    ScoresTall(q, rows, k, keys, h, scale, scores, ld, ahead);
  } else {
    Prefetcher ahead(prefetch, prefetch_bytes, (keys + 3) / 4);
    ScoresShort(q, rows, k, keys, h, scale, scores, ld, ahead);
  }
}

// ---- P·V ----------------------------------------------------------------------------------------

// AccumulateBlock for int4 V rows and whole pairs of vectors (32 columns each): a 16-byte load
// gives the pair's even columns (low nibbles) and odd ones (high nibbles) by table lookup, the
// per-tensor scale folded into the table, so the accumulators are held in even/odd order and
// reordered on load and store. Every element is the same q * scale product and every sum adds the
// keys in the same order as the generic block: the same bits.
template <class Kv, int R, int P>
void AccumulateBlockInt4(const float* p, int64_t ld, Kv v, int64_t d0, int64_t keys, int64_t h,
                         float* acc, Prefetcher& ahead) {
  __m512 even[R * P], odd[R * P];
#pragma GCC unroll 16
  for (int i = 0; i < R * P; ++i) {
    const float* a = acc + (i / P) * h + d0 + (i % P) * 32;
    SplitEvenOdd(_mm512_loadu_ps(a), _mm512_loadu_ps(a + 16), &even[i], &odd[i]);
  }
  const __m512 table =
      Kv::kPerChannelScales ? Int4Table() : _mm512_mul_ps(Int4Table(), v.Scale(0, kAllLanes));
  [[maybe_unused]] __m512 even_scale[P], odd_scale[P];
  if constexpr (Kv::kPerChannelScales) {
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) {
      SplitEvenOdd(v.Scale(d0 + c * 32, kAllLanes), v.Scale(d0 + c * 32 + 16, kAllLanes),
                   &even_scale[c], &odd_scale[c]);
    }
  }
  ForEachKey(
      keys, [&](int64_t j) __attribute__((always_inline)) {
        ahead.Step();
        __m512 ve[P], vo[P];
#pragma GCC unroll 4
        for (int c = 0; c < P; ++c) {
          LoadInt4EvenOdd(v.data + static_cast<size_t>(j) * v.row_bytes + (d0 + c * 32) / 2, table,
                          &ve[c], &vo[c]);
          if constexpr (Kv::kPerChannelScales) {
            ve[c] = _mm512_mul_ps(ve[c], even_scale[c]);
            vo[c] = _mm512_mul_ps(vo[c], odd_scale[c]);
          }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 pr = _mm512_set1_ps(p[r * ld + j]);
#pragma GCC unroll 4
          for (int c = 0; c < P; ++c) {
            even[r * P + c] = _mm512_fmadd_ps(pr, ve[c], even[r * P + c]);
            odd[r * P + c] = _mm512_fmadd_ps(pr, vo[c], odd[r * P + c]);
          }
        }
      });
#pragma GCC unroll 16
  for (int i = 0; i < R * P; ++i) {
    float* a = acc + (i / P) * h + d0 + (i % P) * 32;
    __m512 lo, hi;
    JoinEvenOdd(even[i], odd[i], &lo, &hi);
    _mm512_storeu_ps(a, lo);
    _mm512_storeu_ps(a + 16, hi);
  }
}

// acc[r*h + d0 + 16c ..] += sum_j p[r*ld + j] * v[j][d0 + 16c ..] for R rows, V vectors of
// columns (the last one `last_mask` wide) and j < keys, the accumulators held in registers.
template <class Kv, int R, int V>
void AccumulateBlock(const float* p, int64_t ld, Kv v, int64_t d0, int64_t keys, int64_t h,
                     float* acc, __mmask16 last_mask, Prefetcher& ahead) {
  if constexpr (Kv::kCacheType == GqaCacheType::kInt4 && V % 2 == 0) {
    if (last_mask == kAllLanes) {
      return AccumulateBlockInt4<Kv, R, V / 2>(p, ld, v, d0, keys, h, acc, ahead);
    }
  }
  __mmask16 masks[V];
#pragma GCC unroll 4
  for (int c = 0; c < V; ++c) masks[c] = c == V - 1 ? last_mask : kAllLanes;
  __m512 sum[R * V];
#pragma GCC unroll 24
  for (int i = 0; i < R * V; ++i) {
    sum[i] = _mm512_maskz_loadu_ps(masks[i % V], acc + (i / V) * h + d0 + (i % V) * 16);
  }
  __m512 scales[V];
#pragma GCC unroll 4
  for (int c = 0; c < V; ++c) scales[c] = v.Scale(d0 + c * 16, masks[c]);
  ForEachKey(
      keys, [&](int64_t j) __attribute__((always_inline)) {
        ahead.Step();
        __m512 vv[V];
#pragma GCC unroll 4
        for (int c = 0; c < V; ++c) vv[c] = v.Load(j, d0 + c * 16, scales[c], masks[c]);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 pr = _mm512_set1_ps(p[r * ld + j]);
#pragma GCC unroll 4
          for (int c = 0; c < V; ++c) sum[r * V + c] = _mm512_fmadd_ps(pr, vv[c], sum[r * V + c]);
        }
      });
#pragma GCC unroll 24
  for (int i = 0; i < R * V; ++i) {
    _mm512_mask_storeu_ps(acc + (i / V) * h + d0 + (i % V) * 16, masks[i % V], sum[i]);
  }
}

// Columns [0, h) of R rows in blocks of V vectors; the last block narrower as h requires.
template <class Kv, int R, int V>
void AccumulateRows(const float* p, int64_t ld, Kv v, int64_t keys, int64_t h, float* acc,
                    Prefetcher& ahead) {
  int64_t d = 0;
  for (; d + 16 * V <= h; d += 16 * V) {
    AccumulateBlock<Kv, R, V>(p, ld, v, d, keys, h, acc, kAllLanes, ahead);
  }
  const int64_t rest = h - d;  // a multiple of 8, below 16V
  if (rest == 0) return;
  const __mmask16 last = rest % 16 == 0 ? kAllLanes : kLow8;
  const int64_t vectors = (rest + 15) / 16;
  if constexpr (V > 1) {
    if (vectors == 1) return AccumulateBlock<Kv, R, 1>(p, ld, v, d, keys, h, acc, last, ahead);
  }
  if constexpr (V > 2) {
    if (vectors == 2) return AccumulateBlock<Kv, R, 2>(p, ld, v, d, keys, h, acc, last, ahead);
  }
  if constexpr (V > 3) {
    if (vectors == 3) return AccumulateBlock<Kv, R, 3>(p, ld, v, d, keys, h, acc, last, ahead);
  }
  // vectors == V: only when rest > 16 * (V - 1), i.e. the last vector is the 8-lane one.
  AccumulateBlock<Kv, R, V>(p, ld, v, d, keys, h, acc, last, ahead);
}

template <class Kv, int RTall, int VTall>
void AccumulateChunk(const float* p, int64_t rows, int64_t ld, Kv v, int64_t keys, int64_t h,
                     float* acc, Prefetcher& ahead) {
  int64_t i = 0;
  for (; i + RTall <= rows; i += RTall) {
    AccumulateRows<Kv, RTall, VTall>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
  }
  if (i + 4 <= rows) {
    AccumulateRows<Kv, 4, 4>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
    i += 4;
  }
  if (i + 2 <= rows) {
    AccumulateRows<Kv, 2, 4>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
    i += 2;
  }
  if (i < rows) AccumulateRows<Kv, 1, 4>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
}

// Rows [0, rows) of one column block [d0, d0 + 16 * V) (the last vector last_mask wide) over the
// float32 slab `slab` (the block's columns of each key, kSlabColumns apart): row blocks of 6, then
// 4, 2 and 1, as AccumulateChunk.
template <int V>
void AccumulateSlab(const float* p, int64_t rows, int64_t ld, const float* slab, int64_t keys,
                    int64_t h, float* acc, __mmask16 last_mask, Prefetcher& ahead) {
  using Slab = KvRows<GqaCacheType::kFloat32, false>;
  const Slab v{reinterpret_cast<const unsigned char*>(slab), kSlabColumns * sizeof(float), nullptr};
  int64_t i = 0;
  for (; i + 6 <= rows; i += 6) {
    AccumulateBlock<Slab, 6, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, last_mask, ahead);
  }
  if (i + 4 <= rows) {
    AccumulateBlock<Slab, 4, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, last_mask, ahead);
    i += 4;
  }
  if (i + 2 <= rows) {
    AccumulateBlock<Slab, 2, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, last_mask, ahead);
    i += 2;
  }
  if (i < rows) {
    AccumulateBlock<Slab, 1, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, last_mask, ahead);
  }
}

// P·V of a tall tile over float16 or bfloat16 V rows, or strided float32 ones: each chunk of
// kKeyChunk keys is widened (copied, for float32) once per column block of 64 into a 16 KiB float32
// slab that stays in L1, and every row block reads the slab, where AccumulateChunk would widen
// every V vector again for each block of 6 rows (the widening instructions compete with the FMAs
// for the same ports) and read float32 rows from wherever the cache keeps them (rows of a BSNH
// cache lie kv_num_heads rows apart). The slab holds the values Load returns and every accumulator
// element still adds the keys in order: the same bits. Measured with bench_flash_ops_cpu_x86 (128
// rows, h 128, one thread): bfloat16 V 130-145 GFLOP/s (about 100 widening per use), float32 V
// 115-142 (90-133).
template <class Kv>
void AccumulateTallWidened(const float* p, int64_t rows, int64_t ld, Kv v, int64_t keys, int64_t h,
                           float* acc, Prefetcher& ahead) {
  alignas(64) float slab[kKeyChunk * kSlabColumns];
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyChunk) {
    const int64_t n = keys - j0 < kKeyChunk ? keys - j0 : kKeyChunk;
    const Kv chunk = v.Offset(j0);
    for (int64_t d0 = 0; d0 < h; d0 += kSlabColumns) {
      const int64_t width = h - d0 < kSlabColumns ? h - d0 : kSlabColumns;  // a multiple of 8
      const int64_t vectors = (width + 15) / 16;
      const __mmask16 last = width % 16 == 0 ? kAllLanes : kLow8;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < vectors; ++c) {
          const __mmask16 mask = c == vectors - 1 ? last : kAllLanes;
          _mm512_store_ps(slab + j * kSlabColumns + c * 16,
                          chunk.Load(j, d0 + c * 16, _mm512_setzero_ps(), mask));
        }
      }
      const float* pj = p + j0;
      float* ad = acc + d0;
      switch (vectors) {
        case 1:
          AccumulateSlab<1>(pj, rows, ld, slab, n, h, ad, last, ahead);
          break;
        case 2:
          AccumulateSlab<2>(pj, rows, ld, slab, n, h, ad, last, ahead);
          break;
        case 3:
          AccumulateSlab<3>(pj, rows, ld, slab, n, h, ad, last, ahead);
          break;
        default:
          AccumulateSlab<4>(pj, rows, ld, slab, n, h, ad, last, ahead);
          break;
      }
    }
  }
}

template <class Kv>
void AccumulateOf(const float* p, int64_t rows, int64_t ld, Kv v, int64_t keys, int64_t h,
                  float* acc, const void* prefetch, size_t prefetch_bytes) {
  const bool tall = rows > kTallRows;
  const int64_t row_blocks = tall ? (rows + 5) / 6 : (rows + 3) / 4;
  const int64_t column_blocks = (h + 63) / 64;
  Prefetcher ahead(prefetch, prefetch_bytes, row_blocks * column_blocks * keys);
  if constexpr (Kv::kCacheType == GqaCacheType::kFloat16 ||
                Kv::kCacheType == GqaCacheType::kBFloat16 ||
                Kv::kCacheType == GqaCacheType::kFloat32) {
    // Float32 rows that are already contiguous (BNSH blocks, a contiguous cache) gain nothing
    // from a copy.
    const bool packed = Kv::kCacheType == GqaCacheType::kFloat32 &&
                        v.row_bytes == static_cast<size_t>(h) * sizeof(float);
    if (tall && !packed) return AccumulateTallWidened(p, rows, ld, v, keys, h, acc, ahead);
  }
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyChunk) {
    const int64_t n = keys - j0 < kKeyChunk ? keys - j0 : kKeyChunk;
    if (tall) {
      AccumulateChunk<Kv, 6, 4>(p + j0, rows, ld, v.Offset(j0), n, h, acc, ahead);
    } else {
      AccumulateChunk<Kv, 4, 4>(p + j0, rows, ld, v.Offset(j0), n, h, acc, ahead);
    }
  }
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
  }
}

template <class Kv>
void DequantizeOf(const Kv& kv, int64_t keys, int64_t h, float* out) {
  for (int64_t j = 0; j < keys; ++j) {
    int64_t d = 0;
    for (; d + 16 <= h; d += 16) {
      _mm512_storeu_ps(out + j * h + d, kv.Load(j, d, kv.Scale(d, kAllLanes), kAllLanes));
    }
    if (d < h) {
      _mm512_mask_storeu_ps(out + j * h + d, kLow8, kv.Load(j, d, kv.Scale(d, kLow8), kLow8));
    }
  }
}

void Dequantize(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  WithKvRows(kv, [&](const auto& rows) { DequantizeOf(rows, keys, h, out); });
}

void Scores(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const void* prefetch, size_t prefetch_bytes) {
  WithKvRows(k, [&](const auto& kv) {
    ScoresOf(q, rows, kv, keys, h, scale, scores, ld, prefetch, prefetch_bytes);
  });
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                int64_t h, float* acc, const void* prefetch, size_t prefetch_bytes) {
  WithKvRows(v, [&](const auto& kv) {
    AccumulateOf(p, rows, ld, kv, keys, h, acc, prefetch, prefetch_bytes);
  });
}

void Round(float* x, int64_t n, GqaFloatType type) {
  switch (type) {
    case GqaFloatType::kBFloat16:
      return RowRoundBFloat16(x, n);
    case GqaFloatType::kFloat16:
      return RowRoundHalf(x, n);
    case GqaFloatType::kFloat32:
      return;
  }
}

}  // namespace

const GqaFlashOps kGqaFlashOpsAvx512 = {&Scores,    &Accumulate, &Dequantize, &RowMax,
                                        &RowExpSum, &RowScale,   1,           &Round};

}  // namespace attnrt::cpu
