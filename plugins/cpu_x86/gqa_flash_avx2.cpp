// gqa.flash.avx2: the block operations on AVX2 + FMA, register-blocked over 4 query rows so each K
// and V row loaded serves 4 rows (the G heads of a decode token, or 4 rows of a prompt tile), with
// software prefetch of the next K/V block interleaved with the arithmetic. Quantized K/V rows
// (int8, int4, fp8 e4m3fn) are dequantized 8 elements at a time in registers, right where they are
// used (the naive AVX2 kernel's loaders, gqa_avx2_cache.h): each K or V vector is decoded once and
// serves every row of the register block. The only flash file built with -mavx2 -mfma; reached only
// after gqa.flash.avx2's supports() saw both usable, and F16C as well for float16 problems (the
// float16 cache loader is the file's only F16C code).
//
// Calls only intrinsics and its own internal functions, never std:: inline or template code: such
// functions would be emitted by the baseline and the AVX2 translation units alike, and the linker
// may keep the AVX2 copy for the scalar kernel (see gqa_pipeline.h).
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_avx2_cache.h"
#include "gqa_avx2_math.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_key_loop.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

constexpr int64_t kRowBlock = 4;
// Tiles taller than this (prompts) read float16/bfloat16 V through a float32 slab of kKeyChunk keys
// x kSlabColumns columns, widened once per chunk (AccumulateTallWidened); shorter ones (decode: the
// G heads of one token) use each widened vector for all their rows already.
constexpr int64_t kTallRows = 8;
constexpr int64_t kKeyChunk = 64;
constexpr int64_t kSlabColumns = 24;
constexpr size_t kLine = 64;

// Lane i = horizontal sum of a[i]: 8 reductions for the price of about 2.
__m256 HorizontalSums8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // low half: a0..a3 of lanes 0-3, high: of lanes 4-7
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane i = horizontal sum of a[i], for 4 vectors.
__m128 HorizontalSums4(const __m256* a) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// Spreads the prefetch of a byte range over `steps` calls of Step(): the next block streams in
// while this one is computed, without a burst that would crowd out the demand loads.
class Prefetcher {
 public:
  Prefetcher(const void* begin, size_t bytes, int64_t steps)
      : next_(static_cast<const char*>(begin)), end_(next_ + bytes) {
    const size_t lines = (bytes + kLine - 1) / kLine;
    const size_t n = steps > 0 ? static_cast<size_t>(steps) : 1;
    per_step_ = (lines + n - 1) / n;
  }
  void Step() {
    for (size_t i = 0; i < per_step_ && next_ < end_; ++i, next_ += kLine) {
      _mm_prefetch(next_, _MM_HINT_T1);
    }
  }

 private:
  const char* next_;
  const char* end_;
  size_t per_step_ = 0;
};

// The K or V rows of a block for cache type kType: row j at data + j * row_bytes. Scale(d) is the
// dequantization scale of elements [d, d + 8), loaded once per 8 columns for all rows of a register
// block; Load(j, d, scale) is elements [d, d + 8) of row j as float32 (q * scale for quantized
// types, the naive kernel's LoadCache8 value).
//
// kUnscaled: Load returns q (ScoresOf folds the scale into the query rows instead). kSplit (int4,
// unscaled, h a multiple of 16): the score kernel reads 16 elements at a time as two vectors, the
// even elements (low nibbles) and the odd ones (high nibbles), against a query stored in that
// order.
template <GqaCacheType kType, bool kPerChannel, bool kUnscaled = false, bool kSplit = false>
struct KvRows {
  static constexpr GqaCacheType kCacheType = kType;
  static constexpr bool kScaled = kScaledCache<kType> && !kUnscaled;
  static constexpr bool kPerChannelScales = kPerChannel && kScaled;
  static constexpr bool kSplitNibbles = kSplit;
  const unsigned char* data;
  size_t row_bytes;
  const float* scale;

  __m256 Scale(int64_t d) const {
    if constexpr (!kScaled) {
      return _mm256_setzero_ps();  // unused
    } else if constexpr (kPerChannel) {
      return _mm256_loadu_ps(scale + d);
    } else {
      return _mm256_broadcast_ss(scale);
    }
  }
  __m256 Load(int64_t j, int64_t d, __m256 s) const {
    const __m256 raw = LoadCacheRaw8<kType>(data + static_cast<size_t>(j) * row_bytes, d);
    if constexpr (kScaled) {
      return _mm256_mul_ps(raw, s);
    } else {
      return raw;
    }
  }
  KvRows Offset(int64_t j) const {
    return {data + static_cast<size_t>(j) * row_bytes, row_bytes, scale};
  }
};

// The int4 kernels below hold 16 consecutive elements as two vectors: the 8 even elements (low
// nibbles) and the 8 odd ones (high nibbles).
// Elements [0, 16) held as a = [0, 8) and b = [8, 16) -> even and odd.
__attribute__((always_inline)) inline void SplitEvenOdd(__m256 a, __m256 b, __m256* even,
                                                        __m256* odd) {
  const __m256i to_halves = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256 pa = _mm256_permutevar8x32_ps(a, to_halves);  // a's evens | a's odds
  const __m256 pb = _mm256_permutevar8x32_ps(b, to_halves);
  *even = _mm256_permute2f128_ps(pa, pb, 0x20);
  *odd = _mm256_permute2f128_ps(pa, pb, 0x31);
}

// The inverse of SplitEvenOdd.
__attribute__((always_inline)) inline void JoinEvenOdd(__m256 even, __m256 odd, __m256* a,
                                                       __m256* b) {
  const __m256i from_halves = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  *a = _mm256_permutevar8x32_ps(_mm256_permute2f128_ps(even, odd, 0x20), from_halves);
  *b = _mm256_permutevar8x32_ps(_mm256_permute2f128_ps(even, odd, 0x31), from_halves);
}

// The 16 int4 elements of the 8 bytes at `bytes`, even and odd, as float32 codes - 8.
__attribute__((always_inline)) inline void LoadInt4EvenOdd(const unsigned char* bytes, __m256* even,
                                                           __m256* odd) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
  const __m256i eight = _mm256_set1_epi32(8);
  *even = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0xF)), eight));
  *odd = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(x, 4), eight));
}

// out[r*ld + c] = scale * <q_r, k_c> for R rows (stride h) and C keys.
template <class Kv, int R, int C>
void ScoreBlock(const float* q, const Kv& k, int64_t h, float scale, float* out, int64_t ld) {
  __m256 acc[R * C];
#pragma GCC unroll 8
  for (int i = 0; i < R * C; ++i) acc[i] = _mm256_setzero_ps();
  if constexpr (Kv::kSplitNibbles) {
    // 16 elements per key and step: one 8-byte load, the low nibbles (even elements) and the high
    // ones (odd elements) as two vectors; the query rows hold the matching even/odd order.
    for (int64_t d = 0; d < h; d += 16) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        __m256 even, odd;
        LoadInt4EvenOdd(k.data + static_cast<size_t>(c) * k.row_bytes + d / 2, &even, &odd);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          acc[r * C + c] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * h + d), even, acc[r * C + c]);
          acc[r * C + c] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * h + d + 8), odd, acc[r * C + c]);
        }
      }
    }
  } else {
    __m256 s = k.Scale(0);  // per tensor: one broadcast for the whole block
    for (int64_t d = 0; d < h; d += 8) {
      if constexpr (Kv::kPerChannelScales) s = k.Scale(d);
      __m256 kv[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) kv[c] = k.Load(c, d, s);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 qv = _mm256_loadu_ps(q + r * h + d);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc[r * C + c] = _mm256_fmadd_ps(qv, kv[c], acc[r * C + c]);
      }
    }
  }
  // Lane order of the reductions is acc's: row-major over (row, key).
  float sums[R * C];
  if constexpr (R * C % 4 == 0) {
    int i = 0;
    for (; i + 8 <= R * C; i += 8) _mm256_storeu_ps(sums + i, HorizontalSums8(acc + i));
    for (; i < R * C; i += 4) _mm_storeu_ps(sums + i, HorizontalSums4(acc + i));
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < R * C; ++i) sums[i] = HorizontalSum(acc[i]);
  }
#pragma GCC unroll 12
  for (int i = 0; i < R * C; ++i) out[(i / C) * ld + i % C] = scale * sums[i];
}

template <class Kv, int C>
void ScoreKeys(const float* q, int64_t rows, const Kv& k, int64_t h, float scale, float* out,
               int64_t ld) {
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    ScoreBlock<Kv, kRowBlock, C>(q + i * h, k, h, scale, out + i * ld, ld);
  }
  for (; i < rows; ++i) ScoreBlock<Kv, 1, C>(q + i * h, k, h, scale, out + i * ld, ld);
}

template <class Kv>
void ScoresKeys(const float* q, int64_t rows, const Kv& k, int64_t keys, int64_t h, float scale,
                float* scores, int64_t ld, const void* prefetch, size_t prefetch_bytes) {
  Prefetcher ahead(prefetch, prefetch_bytes, (keys + 2) / 3);
  // Keys outer: three keys stay in L1 while every row of the tile meets them.
  int64_t j = 0;
  for (; j + 3 <= keys; j += 3) {
    ahead.Step();
    ScoreKeys<Kv, 3>(q, rows, k.Offset(j), h, scale, scores + j, ld);
  }
  if (j + 2 <= keys) {
    ahead.Step();
    ScoreKeys<Kv, 2>(q, rows, k.Offset(j), h, scale, scores + j, ld);
  } else if (j < keys) {
    ahead.Step();
    ScoreKeys<Kv, 1>(q, rows, k.Offset(j), h, scale, scores + j, ld);
  }
}

// Query rows up to this many floats (8 rows of 128) have a quantized K's scale folded in: the score
// is <q * s, k> rather than <q, k * s>, one multiplication per query element per block instead of
// one per K element (the query stays float32; only the order of two float32 multiplications
// changes, and a score does not depend on how the keys were blocked).
constexpr int64_t kFoldedQueryFloats = 1024;

template <class Kv>
void ScoresOf(const float* q, int64_t rows, const Kv& k, int64_t keys, int64_t h, float scale,
              float* scores, int64_t ld, const void* prefetch, size_t prefetch_bytes) {
  if constexpr (Kv::kScaled) {
    if (rows * h <= kFoldedQueryFloats) {
      alignas(32) float folded[kFoldedQueryFloats];
      constexpr bool kSplit = Kv::kCacheType == GqaCacheType::kInt4;
      if (!kSplit || h % 16 == 0) {
        // int4: reordered per 16 elements, the 8 even ones then the 8 odd ones.
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t d = 0; d < h; d += kSplit ? 16 : 8) {
            const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(q + r * h + d), k.Scale(d));
            if constexpr (kSplit) {
              const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(q + r * h + d + 8), k.Scale(d + 8));
              __m256 even, odd;
              SplitEvenOdd(a, b, &even, &odd);
              _mm256_store_ps(folded + r * h + d, even);
              _mm256_store_ps(folded + r * h + d + 8, odd);
            } else {
              _mm256_store_ps(folded + r * h + d, a);
            }
          }
        }
        using Folded = KvRows<Kv::kCacheType, Kv::kPerChannelScales, true, kSplit>;
        return ScoresKeys(folded, rows, Folded{k.data, k.row_bytes, k.scale}, keys, h, scale,
                          scores, ld, prefetch, prefetch_bytes);
      }
    }
  }
  ScoresKeys(q, rows, k, keys, h, scale, scores, ld, prefetch, prefetch_bytes);
}

// AccumulateBlock for int4 V rows and 16 columns: an 8-byte load gives the even columns (low
// nibbles) and the odd ones (high nibbles), so the accumulators are held in even/odd order and
// reordered on load and store. Every element is the same q * scale product and every sum adds the
// keys in the same order as AccumulateBlock: the same bits.
template <class Kv, int R>
void AccumulateBlockInt4(const float* p, int64_t ld, const Kv& v, int64_t d0, int64_t keys,
                         int64_t h, float* acc, Prefetcher& ahead) {
  __m256 even[R], odd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    SplitEvenOdd(_mm256_loadu_ps(acc + r * h), _mm256_loadu_ps(acc + r * h + 8), &even[r], &odd[r]);
  }
  __m256 even_scale = v.Scale(d0), odd_scale = even_scale;
  if constexpr (Kv::kPerChannelScales) {
    SplitEvenOdd(v.Scale(d0), v.Scale(d0 + 8), &even_scale, &odd_scale);
  }
  ForEachKey(
      keys, [&](int64_t j) __attribute__((always_inline)) {
        ahead.Step();
        __m256 ve, vo;
        LoadInt4EvenOdd(v.data + static_cast<size_t>(j) * v.row_bytes + d0 / 2, &ve, &vo);
        ve = _mm256_mul_ps(ve, even_scale);
        vo = _mm256_mul_ps(vo, odd_scale);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 pr = _mm256_broadcast_ss(p + r * ld + j);
          even[r] = _mm256_fmadd_ps(pr, ve, even[r]);
          odd[r] = _mm256_fmadd_ps(pr, vo, odd[r]);
        }
      });
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256 a, b;
    JoinEvenOdd(even[r], odd[r], &a, &b);
    _mm256_storeu_ps(acc + r * h, a);
    _mm256_storeu_ps(acc + r * h + 8, b);
  }
}

// acc[r*h + 8v ..] += sum_j p[r*ld + j] * v[j][8v ..] for R rows and V vectors of columns starting
// at column d0, the accumulators held in registers across all keys.
template <class Kv, int R, int V>
void AccumulateBlock(const float* p, int64_t ld, const Kv& v, int64_t d0, int64_t keys, int64_t h,
                     float* acc, Prefetcher& ahead) {
  __m256 sum[R * V];
#pragma GCC unroll 12
  for (int i = 0; i < R * V; ++i) sum[i] = _mm256_loadu_ps(acc + (i / V) * h + (i % V) * 8);
  __m256 scales[V];
#pragma GCC unroll 4
  for (int c = 0; c < V; ++c) scales[c] = v.Scale(d0 + c * 8);
  ForEachKey(
      keys, [&](int64_t j) __attribute__((always_inline)) {
        ahead.Step();
        __m256 vv[V];
#pragma GCC unroll 4
        for (int c = 0; c < V; ++c) vv[c] = v.Load(j, d0 + c * 8, scales[c]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256 pr = _mm256_broadcast_ss(p + r * ld + j);
#pragma GCC unroll 4
          for (int c = 0; c < V; ++c) sum[r * V + c] = _mm256_fmadd_ps(pr, vv[c], sum[r * V + c]);
        }
      });
#pragma GCC unroll 12
  for (int i = 0; i < R * V; ++i) _mm256_storeu_ps(acc + (i / V) * h + (i % V) * 8, sum[i]);
}

template <class Kv, int R>
void AccumulateRows(const float* p, int64_t ld, const Kv& v, int64_t keys, int64_t h, float* acc,
                    Prefetcher& ahead) {
  int64_t d = 0;
  if constexpr (Kv::kCacheType == GqaCacheType::kInt4) {
    for (; d + 16 <= h; d += 16) AccumulateBlockInt4<Kv, R>(p, ld, v, d, keys, h, acc + d, ahead);
  }
  for (; d + 24 <= h; d += 24) AccumulateBlock<Kv, R, 3>(p, ld, v, d, keys, h, acc + d, ahead);
  if (d + 16 <= h) {
    AccumulateBlock<Kv, R, 2>(p, ld, v, d, keys, h, acc + d, ahead);
    d += 16;
  }
  if (d < h) AccumulateBlock<Kv, R, 1>(p, ld, v, d, keys, h, acc + d, ahead);
}

// Rows [0, rows) of one column block of V vectors over the float32 slab (kSlabColumns apart).
template <int V>
void AccumulateSlab(const float* p, int64_t rows, int64_t ld, const float* slab, int64_t keys,
                    int64_t h, float* acc, Prefetcher& ahead) {
  using Slab = KvRows<GqaCacheType::kFloat32, false>;
  const Slab v{reinterpret_cast<const unsigned char*>(slab), kSlabColumns * sizeof(float), nullptr};
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    AccumulateBlock<Slab, kRowBlock, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, ahead);
  }
  for (; i < rows; ++i)
    AccumulateBlock<Slab, 1, V>(p + i * ld, ld, v, 0, keys, h, acc + i * h, ahead);
}

// P·V of a tall tile over float16 or bfloat16 V rows: each chunk of kKeyChunk keys is widened to
// float32 once per column block of 24 (a 6 KiB slab that stays in L1) and every block of rows reads
// the slab, where AccumulateRows would widen every V vector again for each block of 4 rows. The
// slab holds the values Load returns and every accumulator element still adds the keys in order
// (the partial sums go through acc between chunks, exactly): the same bits.
template <class Kv>
void AccumulateTallWidened(const float* p, int64_t rows, int64_t ld, const Kv& v, int64_t keys,
                           int64_t h, float* acc, Prefetcher& ahead) {
  alignas(32) float slab[kKeyChunk * kSlabColumns];
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyChunk) {
    const int64_t n = keys - j0 < kKeyChunk ? keys - j0 : kKeyChunk;
    const Kv chunk = v.Offset(j0);
    for (int64_t d0 = 0; d0 < h; d0 += kSlabColumns) {
      const int64_t vectors = (h - d0 < kSlabColumns ? h - d0 : kSlabColumns) / 8;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < vectors; ++c) {
          _mm256_store_ps(slab + j * kSlabColumns + c * 8,
                          chunk.Load(j, d0 + c * 8, _mm256_setzero_ps()));
        }
      }
      switch (vectors) {
        case 1:
          AccumulateSlab<1>(p + j0, rows, ld, slab, n, h, acc + d0, ahead);
          break;
        case 2:
          AccumulateSlab<2>(p + j0, rows, ld, slab, n, h, acc + d0, ahead);
          break;
        default:
          AccumulateSlab<3>(p + j0, rows, ld, slab, n, h, acc + d0, ahead);
          break;
      }
    }
  }
}

template <class Kv>
void AccumulateOf(const float* p, int64_t rows, int64_t ld, const Kv& v, int64_t keys, int64_t h,
                  float* acc, const void* prefetch, size_t prefetch_bytes) {
  const int64_t width = Kv::kCacheType == GqaCacheType::kInt4 ? 16 : 24;  // AccumulateRows' blocks
  const int64_t passes = ((rows + kRowBlock - 1) / kRowBlock) * ((h + width - 1) / width);
  Prefetcher ahead(prefetch, prefetch_bytes, passes * keys);
  if constexpr (Kv::kCacheType == GqaCacheType::kFloat16 ||
                Kv::kCacheType == GqaCacheType::kBFloat16) {
    if (rows > kTallRows) return AccumulateTallWidened(p, rows, ld, v, keys, h, acc, ahead);
  }
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    AccumulateRows<Kv, kRowBlock>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
  }
  for (; i < rows; ++i) AccumulateRows<Kv, 1>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
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

template <class Kv>
void DequantizeOf(const Kv& kv, int64_t keys, int64_t h, float* out) {
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t d = 0; d < h; d += 8)
      _mm256_storeu_ps(out + j * h + d, kv.Load(j, d, kv.Scale(d)));
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

}  // namespace

const GqaFlashOps kGqaFlashOpsAvx2 = {&Scores,   &Accumulate, &Dequantize, &RowMax, &RowExpSum,
                                      &RowScale, 1,           nullptr,     nullptr, nullptr};

}  // namespace attnrt::cpu
