// Token formats of the sparse MLA KV caches and the 16-bit conversions (CANN's
// MixedQuantSparseFlashMla README): decoding one token into its 512-value logical K (= V) vector,
// nope (448) then rope (64), every value rounded to the 16-bit type the golden computes in.
// Included by each ISA file before its Math (inside the ISA namespace, so each ISA build has its
// own copy); it uses nothing of Math.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "attnrt/ops/sparse_mla.h"

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t x = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Round to nearest even (finite inputs; the kernel never produces NaN from finite inputs).
inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u)
    return static_cast<uint16_t>((x >> 16) | ((x & 0xFFFF) ? 0x40 : 0));
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

inline float Fp16ToFloat(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -24);
  } else if (e == 31) {
    v = m == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(m + 1024), e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

inline uint16_t FloatToFp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  int e = 0;
  std::frexp(a, &e);
  int m = static_cast<int>(std::nearbyint(std::ldexp(a, 11 - e)));
  int exponent = e - 1 + 15;
  if (m == 2048) {
    m = 1024;
    ++exponent;
  }
  if (exponent >= 31) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(exponent << 10) | static_cast<uint16_t>(m - 1024);
}

inline float RoundFp16(float f) { return Fp16ToFloat(FloatToFp16(f)); }

// float8_e4m3fn (OCP FP8): bias 7, subnormals 2^-6 * m/8, S.1111.111 NaN.
struct Fp8Table {
  float value[256];
  Fp8Table() {
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                       : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
      if (e == 15 && m == 7) v = NAN;
      value[c] = (c & 0x80) ? -v : v;
    }
  }
};

inline const Fp8Table& Fp8() {
  static const Fp8Table table;
  return table;
}

constexpr float kTq4Codebook[16] = {-0.12091285f, -0.09111122f, -0.07112455f, -0.05513602f,
                                    -0.04132067f, -0.02874970f, -0.01700489f, -0.00568677f,
                                    0.00547294f,  0.01680406f,  0.02857605f,  0.04108622f,
                                    0.05492980f,  0.07101817f,  0.09115373f,  0.12037795f};

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Bytes per token of a side's storage (quant_mode 2: the whole 584-byte share of a block).
inline int64_t TokenBytes(int quant_mode, bool cmp) {
  switch (quant_mode) {
    case 1:
      return ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES;
    case 2:
      return ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;
    default:
      return cmp ? ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES : 2 * ATTNRT_SPARSE_MLA_HEAD_DIM;
  }
}

// Scalar reference decoders; Math (of the ISA file) provides the vector versions with the same
// results, and the kernel body's DecodeToken goes through Math.
// Nope dims: bf16(fp8 * scale), the product in fp32 (exact before the one rounding, modes 1/2).
inline void ScalarDecodeNope(const uint8_t* nope, const float* scales, float* dst) {
  const Fp8Table& t = Fp8();
  for (int g = 0; g < 7; ++g) {
    for (int d = g * 64; d < (g + 1) * 64; ++d) dst[d] = RoundBf16(t.value[nope[d]] * scales[g]);
  }
}

// n bf16 values (little-endian) to fp32, exact.
inline void ScalarDecodeBf16(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; ++d) dst[d] = Bf16ToFloat(LoadU16(src + 2 * d));
}

// TQ4 codes (256 bytes, dim 2t in the low nibble of byte t) to bf16(codebook[n] * scale).
inline void ScalarDecodeTq4Bf16(const uint8_t* codes, float scale, float* dst) {
  for (int t = 0; t < 256; ++t) {
    dst[2 * t] = RoundBf16(kTq4Codebook[codes[t] & 15] * scale);
    dst[2 * t + 1] = RoundBf16(kTq4Codebook[codes[t] >> 4] * scale);
  }
}

// n fp16 values (little-endian) to fp32, exact.
inline void ScalarDecodeFp16(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; ++d) dst[d] = Fp16ToFloat(LoadU16(src + 2 * d));
}

// TQ4 codes to fp16(codebook[n] * scale) (an fp16 quant_mode 3 problem).
inline void ScalarDecodeTq4Fp16(const uint8_t* codes, float scale, float* dst) {
  for (int t = 0; t < 256; ++t) {
    dst[2 * t] = RoundFp16(kTq4Codebook[codes[t] & 15] * scale);
    dst[2 * t + 1] = RoundFp16(kTq4Codebook[codes[t] >> 4] * scale);
  }
}

inline void WriteError(char* buffer, size_t capacity, const char* message) {
  if (buffer != nullptr && capacity > 0) std::snprintf(buffer, capacity, "%s", message);
}

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
