// e4m3fn codes to bfloat16 by byte-table lookups (AVX512-VBMI's VPERMI2B/VPERMT2B): the tables
// of the 128 magnitudes' bfloat16 bits, a low-byte and a high-byte one, 64 bytes to a register.
// Every e4m3fn value is a bfloat16 value, so the lookups are exact. Included only by files built
// with -mavx512vbmi (gqa_flash_amx_fp8.cpp, gqa_flash_amx_decode.cpp); internal to each of them.
#pragma once

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

// bfloat16 bits of the magnitude codes 0..127 (the sign is bit 7 of the code, bit 15 here).
// e4m3fn: exponent bias 7, no infinities, S.1111.111 NaN (float16's quiet NaN widened:
// 0x7FC0); exponent 0 is m * 2^-9, normalized here (bfloat16 reaches 2^-133).
constexpr uint16_t E4M3FnBits(int c) {
  const int e = c >> 3;
  const int m = c & 7;
  if (c == 0x7F) return 0x7FC0;
  if (e == 0) {
    if (m == 0) return 0;
    const int top = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m = 2^top + rest
    return static_cast<uint16_t>(((118 + top) << 7) | ((m - (1 << top)) << (7 - top)));
  }
  return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
}

// The low and the high bytes of the 128 magnitudes' bfloat16 bits: VPERMI2B's two 64-byte tables
// each (code bits 0-5 pick a byte, bit 6 the table, bit 7 is ignored).
struct alignas(64) ByteTables {
  uint8_t low[128];
  uint8_t high[128];
};

constexpr ByteTables MakeTables() {
  ByteTables t{};
  for (int c = 0; c < 128; ++c) {
    const uint16_t bits = E4M3FnBits(c);
    t.low[c] = static_cast<uint8_t>(bits & 0xFF);
    t.high[c] = static_cast<uint8_t>(bits >> 8);
  }
  return t;
}

constexpr ByteTables kE4M3FnTables = MakeTables();

struct Tables {
  __m512i low0, low1, high0, high1;
};

inline Tables LoadTables() {
  const ByteTables& t = kE4M3FnTables;
  return {_mm512_load_si512(t.low), _mm512_load_si512(t.low + 64), _mm512_load_si512(t.high),
          _mm512_load_si512(t.high + 64)};
}

// The bfloat16 bits of the 64 codes of x, as their low bytes and their high bytes (byte k of
// each: code k's; the sign, bit 7 of the code, put back into the high byte).
struct CodeBytes {
  __m512i low, high;
};

__attribute__((always_inline)) inline CodeBytes LookUp(const Tables& t, __m512i x) {
  const __m512i low = _mm512_permutex2var_epi8(t.low0, x, t.low1);
  // high | (x & 0x80): the sign.
  const __m512i high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.high0, x, t.high1), x,
                                                 _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  return {low, high};
}

}  // namespace
}  // namespace attnrt::cpu
