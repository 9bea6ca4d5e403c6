// AVX-512 (F/BW/VL) + FMA float32 helpers shared by the AVX-512 GroupQueryAttention files
// (gqa_kernels_avx512.cpp, gqa_flash_avx512.cpp, gqa_flash_avx512_pv.cpp, gqa_flash_amx.cpp):
// horizontal sums in one fixed order, tail masks, a 16x16 transpose, exp and the softmax row
// operations. Include it only from translation units built with -mavx512f -mavx512bw -mavx512vl
// -mfma.
//
// Everything has internal linkage, for the reason gqa_avx2_math.h gives.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__FMA__)
#error "gqa_avx512_math.h is for translation units built with -mavx512f -mavx512bw -mavx512vl -mfma"
#endif

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

namespace attnrt::cpu {
namespace {

// Lanes [0, n) set: none for n <= 0, all 16 for n >= 16.
inline __mmask16 Mask16(int64_t n) {
  if (n <= 0) return 0;
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << static_cast<unsigned>(n)) - 1u);
}

// Sum of the 16 lanes in the order of HorizontalSums16's tree: 256-bit halves, then 128-bit
// halves, then lanes (0+2, 1+3), then the two. The flash block operations rely on both giving
// the same bits for the same vector (a score must not depend on which key block computed it).
inline float HorizontalSum16(__m512 v) {
  // extractf64x4: AVX512F (extractf32x8 would need AVX512DQ).
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lane i = HorizontalSum16(a[i]) (bitwise), for 16 vectors: about 1 shuffle per vector instead of
// the 8 operations of a reduction each.
inline __m512 HorizontalSums16(const __m512* a) {
  // Pairs (a[2i], a[2i+1]) -> 128-bit blocks [a.b0+a.b2, a.b1+a.b3, b.b0+b.b2, b.b1+b.b3].
  __m512 s1[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    s1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                          _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  }
  // Block k of s2[i] = (b0+b2)+(b1+b3) of a[4i+k]: four partial sums c0..c3 of one vector.
  __m512 s2[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0x88),
                          _mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0xDD));
  }
  // Per block: [v0+v2, w0+w2, v1+v3, w1+w3] for v = s2[0] (x) or s2[2] (y), w the next.
  const __m512 x =
      _mm512_add_ps(_mm512_unpacklo_ps(s2[0], s2[1]), _mm512_unpackhi_ps(s2[0], s2[1]));
  const __m512 y =
      _mm512_add_ps(_mm512_unpacklo_ps(s2[2], s2[3]), _mm512_unpackhi_ps(s2[2], s2[3]));
  // Lane 4k + l = full sum of a[4l + k].
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, z);
}

// r[i] = column i of the 16x16 matrix whose rows were r[0..15].
inline void Transpose16x16(__m512* r) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // Within each 128-bit block: rows 4i..4i+3 of columns (4 per block) now contiguous per lane pair.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512 a = t[4 * i], b = t[4 * i + 1], c = t[4 * i + 2], d = t[4 * i + 3];
    r[4 * i] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[4i + m], block k = column 4k + m of rows 4i..4i+3; gather the 4 blocks of each column.
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);       // blocks 0,2 | 0,2
    const __m512 u1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);       // blocks 1,3 | 1,3
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);  // blocks 0,2 | 0,2
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);  // blocks 1,3 | 1,3
    t[m] = _mm512_shuffle_f32x4(u0, u2, 0x88);                          // column m
    t[4 + m] = _mm512_shuffle_f32x4(u1, u3, 0x88);                      // column 4 + m
    t[8 + m] = _mm512_shuffle_f32x4(u0, u2, 0xDD);                      // column 8 + m
    t[12 + m] = _mm512_shuffle_f32x4(u1, u3, 0xDD);                     // column 12 + m
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// exp(x), the Cephes expf of gqa_avx2_math.h on 16 lanes (same constants, same error: about
// 1 ulp; 0 below ln(FLT_MIN); NaN stays NaN: kept by the unordered compare, passed by the clamps,
// which return their second operand when either is NaN).
inline __m512 Exp16(__m512 x) {
  const __m512 min_x = _mm512_set1_ps(-87.33654475f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, min_x, _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(min_x, x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // p * 2^n in one VSCALEFPS (n in [-126, 127] after the clamps): the same bits as multiplying by
  // 2^n built in the exponent field, with three fewer instructions.
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// max of x[0, n), n >= 1.
inline float RowMax(const float* x, int64_t n) {
  __m512 vm = _mm512_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
  if (i < n)
    vm = _mm512_mask_max_ps(vm, Mask16(n - i), vm, _mm512_maskz_loadu_ps(Mask16(n - i), x + i));
  return _mm512_reduce_max_ps(vm);
}

// x = exp(x - m) over [0, n); returns the sum.
inline float RowExpSum(float* x, int64_t n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 mask = Mask16(n - i);
    const __m512 e =
        _mm512_maskz_mov_ps(mask, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), vm)));
    _mm512_mask_storeu_ps(x + i, mask, e);
    acc = _mm512_add_ps(acc, e);
  }
  return HorizontalSum16(acc);
}

// y *= alpha over [0, n).
inline void RowScale(float alpha, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 mask = Mask16(n - i);
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(mask, y + i)));
  }
}

// x = float(bfloat16(x)) over [0, n), to nearest even, bit for bit gqa_convert.h's
// FloatToBFloat16 (integer rounding: VCVTNEPS2BF16 would read subnormal inputs as zero); NaN stays
// NaN, quieted, with its top payload bits.
inline void RowRoundBFloat16(float* x, int64_t n) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i infinity = _mm512_set1_epi32(0x7F800000);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, x + i));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, magnitude), infinity);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    _mm512_mask_storeu_ps(x + i, mask, _mm512_castsi512_ps(_mm512_and_si512(r, high)));
  }
}

// x = float(float16(x)) over [0, n): VCVTPS2PH to nearest even, then VCVTPH2PS (exact), which
// gqa_convert.h's FloatToHalf and HalfToFloat give bit for bit.
inline void RowRoundHalf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = Mask16(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mask, x + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_mask_storeu_ps(x + i, mask, _mm512_cvtph_ps(h));
  }
}

constexpr size_t kCacheLine = 64;

// Spreads the prefetch of a byte range over `steps` calls of Step(): the next block streams in
// while this one is computed, without a burst that would crowd out the demand loads. Into L2, or
// into L1 with to_l1 (for data needed within the next few microseconds).
class Prefetcher {
 public:
  Prefetcher(const void* begin, size_t bytes, int64_t steps, bool to_l1 = false)
      : next_(static_cast<const char*>(begin)), end_(next_ + bytes), to_l1_(to_l1) {
    const size_t lines = (bytes + kCacheLine - 1) / kCacheLine;
    const size_t n = steps > 0 ? static_cast<size_t>(steps) : 1;
    per_step_ = (lines + n - 1) / n;
  }
  void Step() {
    for (size_t i = 0; i < per_step_ && next_ < end_; ++i, next_ += kCacheLine) {
      if (to_l1_) {
        _mm_prefetch(next_, _MM_HINT_T0);
      } else {
        _mm_prefetch(next_, _MM_HINT_T1);
      }
    }
  }

 private:
  const char* next_;
  const char* end_;
  bool to_l1_;
  size_t per_step_ = 0;
};

}  // namespace
}  // namespace attnrt::cpu
