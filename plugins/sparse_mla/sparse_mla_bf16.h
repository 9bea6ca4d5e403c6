// Pieces shared by the bf16 builds of the sparse MLA kernel (sparse_mla_avx512_bf16.cpp,
// sparse_mla_amx_bf16.cpp; both compile with AVX-512 F/BW/VL and AVX512_BF16): the softmax's
// vector (the AVX-512 build's, 16 heads per vector), the bf16 key tile (Math::KeyT = uint16_t, one
// row of 512 bf16 per key, rows kTileStride apart, filled by the x86 decoders) and the repacking of
// bf16-exact fp32 values into bf16 pairs. Included inside the ISA namespace after
// sparse_mla_format.h and sparse_mla_x86.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "sparse_mla_avx512_vec.h"
#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

constexpr int kDim = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int kPairs = kDim / 2;

// Two bf16-exact fp32 vectors as 16 bf16 pairs (lo in the low half of each 32-bit lane): the top
// 16 bits of each value, which is the value itself.
inline __m512i PairUp(__m512 lo, __m512 hi) {
  return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                                 _mm512_castps_si512(hi));
}

inline __m512 Dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(a), reinterpret_cast<__m512bh&>(b));
}

// Repacked operands, per thread (grown once to the largest problem).
struct Scratch {
  std::vector<uint32_t> q;   // [kPairs][hp] query dim pairs, heads in lanes
  std::vector<uint32_t> p;   // [nt / 2][hp] probability key pairs
  std::vector<uint32_t> v;   // [nt / 2][kDim] value key pairs, dims in lanes
  std::vector<uint16_t> pt;  // [heads][keys] probabilities, transposed (AMX)
  std::vector<float> o;      // [16][kDim] output rows of a partial head group (AMX)
};

inline Scratch& ThreadScratch() {
  static thread_local Scratch scratch;
  return scratch;
}

inline uint32_t* Grow(std::vector<uint32_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// qt [512][hp] (bf16-exact fp32, heads in lanes) as [256][hp] dim pairs.
inline const uint32_t* RepackQuery(const float* qt, int hp) {
  uint32_t* qp = Grow(ThreadScratch().q, static_cast<size_t>(kPairs) * hp);
  for (int p = 0; p < kPairs; ++p) {
    for (int h = 0; h < hp; h += 16) {
      const __m512i pair =
          PairUp(_mm512_loadu_ps(qt + 2 * p * hp + h), _mm512_loadu_ps(qt + (2 * p + 1) * hp + h));
      _mm512_storeu_si512(qp + p * hp + h, pair);
    }
  }
  return qp;
}

// Tile rows 2t and 2t + 1 interleaved for t < pairs, as [padded][512] key pairs (dims in lanes),
// pairs [pairs, padded) zero. Rows the tile computes are read (rows [nt, rows) are zero rows); the
// caller keeps 2 * pairs within them. Unpack gives the pairs of dims 0-3 | 8-11 | ... and 4-7 |
// 12-15 | ..., two 128-bit lane permutes restore dim order.
inline const uint32_t* RepackValues(const uint16_t* tile, int pairs, int padded) {
  uint32_t* vt = Grow(ThreadScratch().v, static_cast<size_t>(padded) * kDim);
  std::memset(vt + static_cast<size_t>(pairs) * kDim, 0,
              static_cast<size_t>(padded - pairs) * kDim * sizeof(uint32_t));
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int t = 0; t < pairs; ++t) {
    const uint16_t* a = tile + 2 * t * kTileStride;
    const uint16_t* b = a + kTileStride;
    for (int d = 0; d < kDim; d += 32) {
      const __m512i x = _mm512_loadu_si512(a + d);
      const __m512i y = _mm512_loadu_si512(b + d);
      const __m512i lo = _mm512_unpacklo_epi16(x, y);
      const __m512i hi = _mm512_unpackhi_epi16(x, y);
      _mm512_storeu_si512(vt + t * kDim + d, _mm512_permutex2var_epi64(lo, first, hi));
      _mm512_storeu_si512(vt + t * kDim + d + 16, _mm512_permutex2var_epi64(lo, second, hi));
    }
  }
  return vt;
}

struct Bf16Tile {
  static constexpr int kLanes = Vec::kLanes;
  static constexpr int kKeyPad = 16;
  using KeyT = uint16_t;

  // Decoding: the scalar decoders' values (sparse_mla_format.h), bf16-exact, stored as their bf16
  // bits (the top half of each fp32 value).
  static void ToBf16(const float* src, int n, uint16_t* dst) {
    for (int d = 0; d < n; d += 16) Store16(dst + d, _mm512_loadu_ps(src + d));
  }
  static void Store16(uint16_t* dst, __m512 bf16_exact) {
    const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(bf16_exact), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(bits));
  }
  // float8_e4m3fn bytes to fp32 (Fp8Magnitudex16, sparse_mla_avx512_vec.h: no fp32 subnormal is
  // formed); 0x7F/0xFF are NaN (all ones).
  static __m512 Fp8ToFloatx16(const uint8_t* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7F));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    const __m512 v = Fp8Magnitudex16(mag);
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
    const __m512i bits = _mm512_or_si512(_mm512_castps_si512(v), sign);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(bits, nan, _mm512_set1_epi32(-1)));
  }
  // Nope dims: bf16(fp8 * scale), one scale per 64 dims (a NaN stays a NaN in its top half).
  static void DecodeNope(const uint8_t* nope, const float* scales, uint16_t* dst) {
    for (int g = 0; g < 7; ++g) {
      const __m512 s = _mm512_set1_ps(scales[g]);
      for (int d = g * 64; d < (g + 1) * 64; d += 16) {
        Store16(dst + d, Vec::RoundBf16(_mm512_mul_ps(Fp8ToFloatx16(nope + d), s)));
      }
    }
  }
  static void DecodeBf16(const uint8_t* src, int n, uint16_t* dst) { std::memcpy(dst, src, 2 * n); }
  // Never reached (Supports declines float16 problems); rounds to bf16 for completeness.
  static void DecodeFp16(const uint8_t* src, int n, uint16_t* dst) {
    alignas(64) float row[kDim];
    DecodeFp16X86(src, n, row);
    for (int d = 0; d < n; ++d) dst[d] = FloatToBf16(row[d]);
  }
  // TQ4: 16 code bytes -> 32 values, bf16(codebook[n] * scale) (dim 2t from the low nibble of
  // byte t, 2t + 1 from the high nibble). fp16 problems never come here (declined); they keep the
  // x86 decoder's fp16 rounding for completeness.
  static void DecodeTq4(const uint8_t* codes, float scale, bool fp16, uint16_t* dst) {
    if (fp16) {
      alignas(64) float row[kDim];
      DecodeTq4X86(codes, scale, fp16, row);
      for (int d = 0; d < kDim; ++d) dst[d] = FloatToBf16(row[d]);
      return;
    }
    const __m512 book = _mm512_loadu_ps(kTq4Codebook);
    const __m512 s = _mm512_set1_ps(scale);
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    auto value = [&](__m512i n) {
      return Vec::RoundBf16(_mm512_mul_ps(_mm512_permutexvar_ps(n, book), s));
    };
    for (int t = 0; t < 256; t += 16) {
      const __m512i b =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + t)));
      const __m512 even = value(_mm512_and_si512(b, _mm512_set1_epi32(15)));
      const __m512 odd = value(_mm512_srli_epi32(b, 4));
      Store16(dst + 2 * t, _mm512_permutex2var_ps(even, lo, odd));
      Store16(dst + 2 * t + 16, _mm512_permutex2var_ps(even, hi, odd));
    }
  }
  static void ZeroRow(uint16_t* dst) { std::memset(dst, 0, kDim * sizeof(uint16_t)); }
};

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
