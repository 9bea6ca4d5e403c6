// gqa.flash.avx512: the block operations on AVX-512 (F/BW/VL) + FMA, in two files of the same
// flags: this one (the scores, Dequantize, Round and the operations table, which takes the softmax
// row operations from gqa_avx512_math.h) and gqa_flash_avx512_pv.cpp (P·V), with what both use in
// gqa_flash_avx512_rows.h. They are the only flash files built with -mavx512f -mavx512bw
// -mavx512vl -mfma; reached only after gqa.flash.avx512's supports() saw them usable (CPUID and
// OS-enabled opmask/ZMM state).
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
// P·V: gqa_flash_avx512_pv.cpp.
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
#include "gqa_flash_avx512_rows.h"
#include "gqa_kernels.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

constexpr size_t kLine = 64;
// Stack buffer of the transposed K block: H x 32 keys (H <= 256) or H x 16 (H <= 512); larger
// heads use the short-tile kernel, which needs no buffer.
constexpr int64_t kTransposeFloats = 8192;
// Short tiles stream K rows once: software prefetch this many bytes of K rows ahead of the demand
// loads (measured on a float32 16k decode: 16 keys of 512 bytes ahead reads about 1.4x the bytes
// per second of the hardware prefetcher alone).
constexpr size_t kKeyLeadBytes = 8192;

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
// Bytes of a row's h elements (GqaCacheRowBytes, computed here so that these files depend on no
// function outside them: their white-box tests link them alone).
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
    case GqaCacheType::kBlockQ8_0:
    case GqaCacheType::kBlockQ4_0:
      return n / static_cast<size_t>(kBlockElements) * static_cast<size_t>(BlockBytes(type));
    case GqaCacheType::kInt8:
    case GqaCacheType::kFloat8E4M3Fn:
    case GqaCacheType::kFloat8E5M2:
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
// on how the keys were blocked (kFoldedQueryFloats: gqa_flash_avx512_rows.h).
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

// Query rows of T as float32, exact.
void Widen(const void* src, GqaFloatType type, float* dst, int64_t n) {
  const auto* half = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    __m512 x;
    switch (type) {
      case GqaFloatType::kFloat32:
        x = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(src) + i);
        break;
      case GqaFloatType::kFloat16:
        x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, half + i));
        break;
      case GqaFloatType::kBFloat16:
      default:
        x = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, half + i)), 16));
        break;
    }
    _mm512_mask_storeu_ps(dst + i, mask, x);
  }
}

// An output row: T(src * inv), the product in float32, then to nearest even (bfloat16 by integer
// rounding, bit for bit gqa_convert.h's FloatToBFloat16, NaN quieted; float16 by VCVTPS2PH, bit for
// bit FloatToHalf).
void Narrow(const float* src, float inv, GqaFloatType type, void* dst, int64_t n) {
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i infinity = _mm512_set1_epi32(0x7F800000);
  auto* half = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src + i), scale);
    switch (type) {
      case GqaFloatType::kFloat32:
        _mm512_mask_storeu_ps(static_cast<float*>(dst) + i, mask, x);
        break;
      case GqaFloatType::kFloat16:
        _mm256_mask_storeu_epi16(half + i, mask,
                                 _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
      case GqaFloatType::kBFloat16: {
        const __m512i u = _mm512_castps_si512(x);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, magnitude), infinity);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
        r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
        _mm256_mask_storeu_epi16(half + i, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
        break;
      }
    }
  }
}

}  // namespace

const GqaFlashOps kGqaFlashOpsAvx512 = {&Scores,     &GqaFlashAccumulateAvx512,
                                        &Dequantize, &RowMax,
                                        &RowExpSum,  &RowScale,
                                        1,           &Round,
                                        &Widen,      &Narrow};

}  // namespace attnrt::cpu
