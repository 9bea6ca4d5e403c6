// The AVX-512 builds' softmax vector (16 heads per ZMM register) and fp8 magnitude decoder, shared
// by the fp32 AVX-512 kernel and the bf16 kernels (sparse_mla_avx512.cpp, sparse_mla_bf16.h).
// Included after SPARSE_MLA_ISA is defined, by files compiled with AVX-512 F/BW/VL and FMA.
#pragma once

#include <immintrin.h>

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

// The magnitude (7 low bits) of float8_e4m3fn bytes as exact fp32 values: normal codes (exponent
// field >= 1) are the 7 magnitude bits shifted into an fp32 pattern with the exponent rebiased by
// an integer add (+120); subnormal codes (m * 2^-9, m < 8) are converted from the integer m. No
// fp32 subnormal is formed: an x86 multiply with a subnormal operand takes a microcode assist
// (about 100 cycles), which made a cache holding many fp8 subnormals several times slower to read.
inline __m512 Fp8Magnitudex16(__m512i mag) {
  const __m512 normal = _mm512_castsi512_ps(
      _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
  const __mmask16 subnormal = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
  const __m512 small = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0.001953125f));
  return _mm512_mask_mov_ps(normal, subnormal, small);
}

struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float ReduceAdd(V x) { return _mm512_reduce_add_ps(x); }  // the lanes' sum
  static V Max(V x, V y) { return _mm512_max_ps(x, y); }           // y when either is NaN
  // Exp8's polynomial on 16 lanes, scaled by 2^n with VSCALEFPS (saturates to 0 / inf itself).
  static V Exp(V x) {
    const V lo = _mm512_set1_ps(-87.3f);
    const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));  // NaN passes through
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), _mm512_scalef_ps(y, n));
  }
  static V RoundBf16(V x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    const V r = _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(-65536)));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
  }
  static V RoundFp16(V x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
