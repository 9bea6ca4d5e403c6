// The AVX2 build's x86 pieces (AVX2, FMA and F16C; the AVX-512 build has its own on ZMM registers):
// token decoders writing 8 floats per step straight into a tile row, with the scalar decoders'
// results (sparse_mla_format.h), and the Cephes-style exp of the softmax. Included inside the ISA
// namespace after sparse_mla_format.h.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

// Round to nearest even bf16, kept in fp32 (the integer form of FloatToBf16); NaN stays NaN.
inline __m256 RoundBf16x8(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256 r = _mm256_castsi256_ps(_mm256_and_si256(rounded, _mm256_set1_epi32(-65536)));
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Round to nearest even fp16 (F16C), kept in fp32.
inline __m256 RoundFp16x8(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Nope dims: bf16(fp8 * scale) with one scale per 64 dims. Each float8_e4m3fn byte's magnitude
// becomes an exact fp32 value without forming an fp32 subnormal (an x86 multiply with a subnormal
// operand takes a microcode assist of about 100 cycles): normal codes are the 7 magnitude bits
// shifted into an fp32 pattern with the exponent rebiased by an integer add (+120), subnormal
// codes (m * 2^-9, m < 8) are converted from m. One exact multiply by scale (at most 4 × 8
// significant bits; rounded as the reference's fp32 product where it over- or underflows), the
// byte's sign after the multiply, the bf16 rounding without a NaN test (a NaN product comes from
// a NaN scale, whose low 16 bits are 0, or from 0 × inf: the rounding keeps it NaN), and the
// 0x7F/0xFF codes set to NaN (all-ones) last.
inline void DecodeNopeX86(const uint8_t* nope, const float* scales, float* dst) {
  const __m256i mag_mask = _mm256_set1_epi32(0x7F), sign_bit = _mm256_set1_epi32(INT32_MIN);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
  const __m256i high = _mm256_set1_epi32(-65536);
  const __m256i rebias = _mm256_set1_epi32(120 << 23), seven = _mm256_set1_epi32(7);
  const __m256 two_m9 = _mm256_set1_ps(0.001953125f);  // 2^-9
  for (int g = 0; g < 7; ++g) {
    const __m256 s = _mm256_set1_ps(scales[g]);
    for (int d = g * 64; d < (g + 1) * 64; d += 8) {
      const __m256i b =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(nope + d)));
      const __m256i mag = _mm256_and_si256(b, mag_mask);
      const __m256 normal =
          _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), rebias));
      const __m256 small = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), two_m9);
      const __m256 is_normal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, seven));
      __m256 v = _mm256_blendv_ps(small, normal, is_normal);
      v = _mm256_mul_ps(v, s);
      const __m256i x = _mm256_xor_si256(_mm256_castps_si256(v),
                                         _mm256_and_si256(_mm256_slli_epi32(b, 24), sign_bit));
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(x, half), lsb), high);
      const __m256i is_nan = _mm256_cmpeq_epi32(mag, mag_mask);
      _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_or_si256(r, is_nan)));
    }
  }
}

// n (a multiple of 8) bf16 or fp16 values to fp32, exact.
inline void DecodeBf16X86(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; d += 8) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d)));
    _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
  }
}
inline void DecodeFp16X86(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; d += 8) {
    _mm256_storeu_ps(
        dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d))));
  }
}

// TQ4: 8 code bytes -> 16 values (the low nibbles are the even dims, the high nibbles the odd
// dims), codebook[n] * scale rounded to bf16 (fp16 for an fp16 problem).
inline void DecodeTq4X86(const uint8_t* codes, float scale, bool fp16, float* dst) {
  const __m256 lo_book = _mm256_loadu_ps(kTq4Codebook);
  const __m256 hi_book = _mm256_loadu_ps(kTq4Codebook + 8);
  const __m256 s = _mm256_set1_ps(scale);
  auto lookup = [&](__m256i n) {
    const __m256 a = _mm256_permutevar8x32_ps(lo_book, n);
    const __m256 b = _mm256_permutevar8x32_ps(hi_book, n);
    const __m256 use_hi = _mm256_castsi256_ps(_mm256_slli_epi32(n, 28));  // bit 3 -> sign bit
    const __m256 v = _mm256_mul_ps(_mm256_blendv_ps(a, b, use_hi), s);
    return fp16 ? RoundFp16x8(v) : RoundBf16x8(v);
  };
  for (int t = 0; t < 256; t += 8) {
    const __m256i b =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + t)));
    const __m256 even = lookup(_mm256_and_si256(b, _mm256_set1_epi32(15)));
    const __m256 odd = lookup(_mm256_srli_epi32(b, 4));
    const __m256 l = _mm256_unpacklo_ps(even, odd);  // pairs of t' 0,1 | 4,5
    const __m256 h = _mm256_unpackhi_ps(even, odd);  // pairs of t' 2,3 | 6,7
    _mm256_storeu_ps(dst + 2 * t, _mm256_permute2f128_ps(l, h, 0x20));
    _mm256_storeu_ps(dst + 2 * t + 8, _mm256_permute2f128_ps(l, h, 0x31));
  }
}

inline void ZeroRowX86(float* dst) {
  for (int d = 0; d < ATTNRT_SPARSE_MLA_HEAD_DIM; d += 8)
    _mm256_storeu_ps(dst + d, _mm256_setzero_ps());
}

// exp(x) for x <= 0 (the softmax's only inputs; larger x saturate near 2^127): Cephes expf,
// n = round(x log2 e), r = x - n ln 2 in two parts, a degree-6 polynomial, times 2^n. exp(0) = 1
// exactly, x below -87.3 (and -inf) give 0, NaN stays NaN. Within 2 ulp of std::exp.
inline __m256 Exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));  // NaN passes through
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(below, y);
}

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
