// What the files built with AMX-TILE and AMX-BF16 (gqa_flash_amx.cpp, gqa_flash_amx_decode.cpp)
// share: the checks that decide whether values can enter a tile product as they are (TDPBF16PS
// reads a bfloat16 subnormal as zero), packing of float32 values into bfloat16 pairs, and the tile
// configuration. Included only by those files; everything here is internal to each of them.
#pragma once

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
#include <stdint.h>

namespace attnrt::cpu {
namespace {

// Lanes of 16 float32 values (as bits) that are no bfloat16 value (a nonzero low half) or a
// subnormal.
inline __mmask16 NotBFloat16Normal(__m512i bits) {
  const __mmask16 low_half = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  // 0 < magnitude < 0x00800000, as magnitude - 1 < 0x007FFFFF unsigned.
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(
      _mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x007FFFFF));
  return low_half | subnormal;
}

// Lanes of 32 bfloat16 values that are subnormal.
inline __mmask32 SubnormalBFloat16(__m512i bits) {
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi16(0x7FFF));
  return _mm512_cmplt_epu16_mask(_mm512_sub_epi16(magnitude, _mm512_set1_epi16(1)),
                                 _mm512_set1_epi16(0x7F));
}

// The high halves of 32 float32 values, lo (elements 0..15) then hi (16..31), in order: the 32
// bfloat16 values, 32-bit lane i holding elements 2i (low half) and 2i + 1.
inline __m512i HighHalves(__m512i lo, __m512i hi) {
  // 16-bit lane k takes 16-bit lane 2k + 1 of (lo, hi).
  const __m512i index =
      _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015,
                        0x001B0019, 0x001F001D, 0x00230021, 0x00270025, 0x002B0029, 0x002F002D,
                        0x00330031, 0x00370035, 0x003B0039, 0x003F003D);
  return _mm512_permutex2var_epi16(lo, index, hi);
}

// LDTILECFG's operand, palette 1: every tile 16 rows of 64 bytes (16 float32 scores, or 16 pairs
// of bfloat16).
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};

// Every tile 16 rows of 64 bytes.
inline void LoadTileConfig() {
  TileConfig config = {};
  config.palette = 1;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

}  // namespace
}  // namespace attnrt::cpu
