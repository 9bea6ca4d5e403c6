// gqa.flash.avx512's P·V block operation (GqaFlashAccumulateAvx512, named by the operations table
// in gqa_flash_avx512.cpp), built with the same -mavx512f -mavx512bw -mavx512vl -mfma.
//
// P·V keeps R rows x V vectors of the accumulator in registers (6 x 4 for tall tiles, 4 x 4 for
// short ones) over a chunk of kKeyChunk keys, so each V slab read from L2 is reused from L1 by the
// other row blocks; every accumulator element adds the keys in order, whatever the chunking, so
// sums do not depend on how a block was split either.
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

#include "gqa_avx512_math.h"
#include "gqa_flash.h"
#include "gqa_flash_avx512_rows.h"
#include "gqa_key_loop.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// Keys per P·V chunk: 64 keys x 4 vectors = 16 KiB of float32 V slab, well inside L1.
constexpr int64_t kKeyChunk = 64;
// Columns of the float32 V slab of a tall tile over a 16-bit cache (AccumulateTallWidened): 64
// keys x 64 columns = 16 KiB.
constexpr int64_t kSlabColumns = 64;

// The inverse of SplitEvenOdd (gqa_flash_avx512_rows.h).
__attribute__((always_inline)) inline void JoinEvenOdd(__m512 even, __m512 odd, __m512* lo,
                                                       __m512* hi) {
  const __m512i low_index =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  *lo = _mm512_permutex2var_ps(even, low_index, odd);
  *hi = _mm512_permutex2var_ps(even, _mm512_add_epi32(low_index, _mm512_set1_epi32(8)), odd);
}

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
// rows, h 128, one thread): bfloat16 V 130-145 GFLOP/s, 1.19-1.59x widening per use; float32 V of
// a BSNH cache 115-142 GFLOP/s against 90-133 read in place.
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

}  // namespace

void GqaFlashAccumulateAvx512(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v,
                              int64_t keys, int64_t h, float* acc, const void* prefetch,
                              size_t prefetch_bytes) {
  WithKvRows(v, [&](const auto& kv) {
    AccumulateOf(p, rows, ld, kv, keys, h, acc, prefetch, prefetch_bytes);
  });
}

}  // namespace attnrt::cpu
