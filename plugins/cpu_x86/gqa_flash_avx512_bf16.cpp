// gqa.flash.avx512's P·V for probabilities rounded to bfloat16 over a bfloat16 V cache, on
// AVX512-BF16's VDPBF16PS. The only flash file built with -mavx512bf16 (with the AVX-512 F/BW/VL
// and FMA flags of gqa_flash_avx512.cpp); reached only through kGqaFlashOpsAvx512Bf16, which the
// kernels use only where the plugin's probe found AVX512-BF16 usable (GqaFlashOpsFor).
//
// VDPBF16PS adds two exact bfloat16 products to a float32 lane, the odd element's first, each add
// rounded to nearest even, subnormal inputs and results read and written as zero (Intel SDM vol. 2,
// VDPBF16PS). With key j in the odd element and key j + 1 in the even one, every accumulator
// element adds the keys in order, each product once and rounded once: what the FMA of
// gqa_flash_avx512.cpp's AccumulateBlock computes, so the bits are accumulate's for the same P
// (apart from subnormal P or V elements, read as zero). An odd count of keys pairs the last key
// with the product (-0) * (+0) = -0, which adds exactly nothing (x + -0 = x for every x, -0
// included), so the bits do not depend on how a block is split into calls either.
//
// Per chunk of up to 64 keys, the V rows are packed once into a stack slab of key pairs (32-bit
// elements: column d of key j in the high half, of key j + 1 in the low half), reused by every row
// block; per block of up to 6 rows, the chunk's probabilities are packed likewise, one 32-bit pair
// per row and key pair, broadcast from memory. R rows x V vectors of 16 columns of the accumulator
// stay in registers while the key pairs pass: no widening of V in the inner loop, one VDPBF16PS
// per two keys, row and 16 columns.
//
// Calls only intrinsics and its own internal functions, never std:: inline or template code (see
// gqa_pipeline.h). GCC 12's intrinsics headers trip -Wmaybe-uninitialized (GCC bug 105593): the
// diagnostics are silenced for the header's lines only, as in gqa_flash_avx512.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stddef.h>
#include <stdint.h>

#include "gqa_avx512_math.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_run.h"

#if !defined(__AVX512BF16__)
#error "gqa_flash_avx512_bf16.cpp is built with -mavx512bf16"
#endif

namespace attnrt::cpu {
namespace {

// Tiles of at most this many rows (decodes) take accumulate itself, as its short-tile kernel.
constexpr int64_t kTallRows = 8;
// The packed V slab: key pairs x columns (rounded up to 32) of 32-bit elements, 32 KiB.
constexpr int64_t kSlabElements = 8192;
// Key pairs per chunk (64 keys), fewer where the head's columns need more room.
constexpr int64_t kChunkPairs = 32;
constexpr __mmask16 kAllLanes16 = 0xFFFF;
constexpr __mmask16 kLow8Lanes = 0x00FF;
// The even (low) bfloat16 of a pair past the end of the keys: -0, whose product with the zero V
// element is -0.
constexpr uint32_t kNegativeZero = 0x8000u;

// VPERMT2W indices over (a = key j + 1's 32 columns, b = key j's): output 32-bit element c of the
// low vector is (a[c], b[c]) for columns c < 16; of the high vector, columns 16..31.
alignas(64) constexpr uint16_t kPairLow[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                               37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                               11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) constexpr uint16_t kPairHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
// The same over 32 float32 probabilities (64 16-bit words, keys k at words 2k, 2k + 1): output
// word 2q is the high word of key 2q + 1, word 2q + 1 the high word of key 2q.
alignas(64) constexpr uint16_t kProbabilityPairs[32] = {3,  1,  7,  5,  11, 9,  15, 13, 19, 17, 23,
                                                        21, 27, 25, 31, 29, 35, 33, 39, 37, 43, 41,
                                                        47, 45, 51, 49, 55, 53, 59, 57, 63, 61};

// Columns [d, d + 32) of a row of h: all 32, or the 8, 16 or 24 below h.
inline __mmask32 ColumnMask(int64_t h, int64_t d) {
  const int64_t n = h - d;
  return n >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << static_cast<unsigned>(n)) - 1u);
}

// slab[q * stride + c] = (bfloat16 of key 2q in the high half, of key 2q + 1 in the low half) of
// column c, for key pairs q < (n + 1) / 2 and c < stride (h rounded up to 32; 0 for c >= h and for
// key n when n is odd).
void PackValuePairs(const unsigned char* data, size_t row_bytes, int64_t n, int64_t h,
                    int64_t stride, uint32_t* slab) {
  const __m512i low = _mm512_load_si512(kPairLow);
  const __m512i high = _mm512_load_si512(kPairHigh);
  for (int64_t q = 0; 2 * q < n; ++q) {
    const auto* first =
        reinterpret_cast<const uint16_t*>(data + static_cast<size_t>(2 * q) * row_bytes);
    const auto* second =
        reinterpret_cast<const uint16_t*>(data + static_cast<size_t>(2 * q + 1) * row_bytes);
    const bool pair = 2 * q + 1 < n;
    uint32_t* out = slab + q * stride;
    for (int64_t d = 0; d < stride; d += 32) {
      const __mmask32 mask = ColumnMask(h, d);
      const __m512i b = _mm512_maskz_loadu_epi16(mask, first + d);
      const __m512i a = pair ? _mm512_maskz_loadu_epi16(mask, second + d) : _mm512_setzero_si512();
      _mm512_store_si512(out + d, _mm512_permutex2var_epi16(a, low, b));
      _mm512_store_si512(out + d + 16, _mm512_permutex2var_epi16(a, high, b));
    }
  }
}

// pairs[r * kChunkPairs + q] = (bfloat16 of p[r*ld + 2q] high, of p[r*ld + 2q + 1] low) for R rows
// and key pairs q < (n + 1) / 2, n <= 2 * kChunkPairs; the low half is -0 past key n. p's elements
// are bfloat16 values, so the high 16 bits are the value.
template <int R>
void PackProbabilityPairs(const float* p, int64_t ld, int64_t n, uint32_t* pairs) {
  const __m512i index = _mm512_load_si512(kProbabilityPairs);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    for (int64_t g = 0; g < n; g += 32) {
      const __m512i a = _mm512_castps_si512(_mm512_maskz_loadu_ps(Mask16(n - g), p + r * ld + g));
      const __m512i b =
          _mm512_castps_si512(_mm512_maskz_loadu_ps(Mask16(n - g - 16), p + r * ld + g + 16));
      _mm512_store_si512(pairs + r * kChunkPairs + g / 2, _mm512_permutex2var_epi16(a, index, b));
    }
    if (n % 2 != 0) pairs[r * kChunkPairs + n / 2] |= kNegativeZero;
  }
}

// acc[r*h + d0 + 16c ..] += the products of `count` key pairs for R rows and V vectors of 16
// columns (the last one `last_mask` wide), the accumulators held in registers.
template <int R, int V>
void DotBlock(const uint32_t* pairs, const uint32_t* slab, int64_t stride, int64_t count,
              int64_t d0, int64_t h, float* acc, __mmask16 last_mask, Prefetcher& ahead) {
  __mmask16 masks[V];
#pragma GCC unroll 4
  for (int c = 0; c < V; ++c) masks[c] = c == V - 1 ? last_mask : kAllLanes16;
  __m512 sum[R * V];
#pragma GCC unroll 24
  for (int i = 0; i < R * V; ++i) {
    sum[i] = _mm512_maskz_loadu_ps(masks[i % V], acc + (i / V) * h + d0 + (i % V) * 16);
  }
  for (int64_t q = 0; q < count; ++q) {
    ahead.Step();
    __m512bh vv[V];
#pragma GCC unroll 4
    for (int c = 0; c < V; ++c) {
      vv[c] = reinterpret_cast<__m512bh>(_mm512_load_si512(slab + q * stride + d0 + c * 16));
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512bh pr = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(pairs[r * kChunkPairs + q])));
#pragma GCC unroll 4
      for (int c = 0; c < V; ++c) sum[r * V + c] = _mm512_dpbf16_ps(sum[r * V + c], pr, vv[c]);
    }
  }
#pragma GCC unroll 24
  for (int i = 0; i < R * V; ++i) {
    _mm512_mask_storeu_ps(acc + (i / V) * h + d0 + (i % V) * 16, masks[i % V], sum[i]);
  }
}

// Columns [0, h) of R rows in blocks of 4 vectors (64 columns); the last block narrower.
template <int R>
void DotRows(const uint32_t* pairs, const uint32_t* slab, int64_t stride, int64_t count, int64_t h,
             float* acc, Prefetcher& ahead) {
  int64_t d = 0;
  for (; d + 64 <= h; d += 64) {
    DotBlock<R, 4>(pairs, slab, stride, count, d, h, acc, kAllLanes16, ahead);
  }
  const int64_t rest = h - d;  // a multiple of 8, below 64
  if (rest == 0) return;
  const __mmask16 last = rest % 16 == 0 ? kAllLanes16 : kLow8Lanes;
  switch ((rest + 15) / 16) {
    case 1:
      return DotBlock<R, 1>(pairs, slab, stride, count, d, h, acc, last, ahead);
    case 2:
      return DotBlock<R, 2>(pairs, slab, stride, count, d, h, acc, last, ahead);
    case 3:
      return DotBlock<R, 3>(pairs, slab, stride, count, d, h, acc, last, ahead);
    default:
      return DotBlock<R, 4>(pairs, slab, stride, count, d, h, acc, last, ahead);
  }
}

// Rows [0, R) of the tile over one chunk of n keys, whose V pairs are in the slab.
template <int R>
void ChunkRows(const float* p, int64_t ld, int64_t n, const uint32_t* slab, int64_t stride,
               int64_t h, float* acc, Prefetcher& ahead) {
  alignas(64) uint32_t pairs[6 * kChunkPairs];
  PackProbabilityPairs<R>(p, ld, n, pairs);
  DotRows<R>(pairs, slab, stride, (n + 1) / 2, h, acc, ahead);
}

constexpr int kBlockRows = 6;

void AccumulateTall(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                    int64_t h, float* acc, int64_t stride, int64_t chunk_pairs,
                    const void* prefetch, size_t prefetch_bytes) {
  alignas(64) uint32_t slab[kSlabElements];
  const auto* data = static_cast<const unsigned char*>(v.data);
  const int64_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t column_blocks = (h + 63) / 64;
  Prefetcher ahead(prefetch, prefetch_bytes, row_blocks * column_blocks * ((keys + 1) / 2));
  const int64_t chunk_keys = 2 * chunk_pairs;
  for (int64_t j0 = 0; j0 < keys; j0 += chunk_keys) {
    const int64_t n = keys - j0 < chunk_keys ? keys - j0 : chunk_keys;
    PackValuePairs(data + static_cast<size_t>(j0) * v.row_bytes, v.row_bytes, n, h, stride, slab);
    int64_t i = 0;
    for (; i + kBlockRows <= rows; i += kBlockRows) {
      ChunkRows<kBlockRows>(p + i * ld + j0, ld, n, slab, stride, h, acc + i * h, ahead);
    }
    const float* pi = p + i * ld + j0;
    float* ai = acc + i * h;
    switch (rows - i) {
      case 5:
        ChunkRows<5>(pi, ld, n, slab, stride, h, ai, ahead);
        break;
      case 4:
        ChunkRows<4>(pi, ld, n, slab, stride, h, ai, ahead);
        break;
      case 3:
        ChunkRows<3>(pi, ld, n, slab, stride, h, ai, ahead);
        break;
      case 2:
        ChunkRows<2>(pi, ld, n, slab, stride, h, ai, ahead);
        break;
      case 1:
        ChunkRows<1>(pi, ld, n, slab, stride, h, ai, ahead);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void GqaFlashAccumulateRoundedBf16(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v,
                                   int64_t keys, int64_t h, float* acc, const void* prefetch,
                                   size_t prefetch_bytes) {
  const int64_t stride = (h + 31) / 32 * 32;
  const int64_t fit = kSlabElements / stride;
  const int64_t chunk_pairs = fit < kChunkPairs ? fit : kChunkPairs;
  if (v.type != GqaCacheType::kBFloat16 || rows <= kTallRows || chunk_pairs < 1) {
    return kGqaFlashOpsAvx512.accumulate(p, rows, ld, v, keys, h, acc, prefetch, prefetch_bytes);
  }
  AccumulateTall(p, rows, ld, v, keys, h, acc, stride, chunk_pairs, prefetch, prefetch_bytes);
}

}  // namespace attnrt::cpu
