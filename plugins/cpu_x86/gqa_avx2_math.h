// AVX2 + FMA float32 helpers shared by the AVX2 GroupQueryAttention files (gqa_kernels_avx2.cpp,
// gqa_flash_avx2.cpp): horizontal sums, tail masks, exp and the softmax row operations. Include it
// only from translation units built with -mavx2 -mfma.
//
// Everything has internal linkage: an external inline function here would be emitted by both AVX2
// files, which is harmless only while no baseline file emits it too; internal linkage removes the
// question (see gqa_pipeline.h for why a shared AVX2 copy would be fatal for a baseline caller).
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error "gqa_avx2_math.h is for translation units built with -mavx2 -mfma only"
#endif

#include <immintrin.h>
#include <stdint.h>

namespace attnrt::cpu {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lanes [0, n) set, for a tail of n in [1, 7] elements.
inline __m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 88: Cephes expf (range reduction with ln2 split in two, degree-6 polynomial on
// [-ln2/2, ln2/2]), max relative error ~1.2e-7 (about 1 ulp), so softmax keeps float rounding
// accuracy. Below ln(FLT_MIN) the result is 0, where expf would return a denormal of no weight in
// a softmax sum (exactly 0 for -inf). NaN stays NaN (docs/gqa-semantics.md, non-finite values): the
// clamps take x as their second operand, which MAXPS/MINPS return when either operand is NaN.
inline __m256 Exp(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.33654475f);
  const __m256 underflow = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(min_x, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

// max of x[0, n), n >= 1.
inline float RowMax(const float* x, int64_t n) {
  if (n < 8) {
    float m = x[0];
    for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  __m256 vm = _mm256_loadu_ps(x);
  int64_t i = 8;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  // The tail re-reads up to 7 elements already seen, harmless for a maximum.
  if (i < n) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + n - 8));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// x = exp(x - m) over [0, n); returns the sum.
inline float RowExpSum(float* x, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vm)),
                                   _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    acc = _mm256_add_ps(acc, e);
  }
  return HorizontalSum(acc);
}

// y *= alpha over [0, n).
inline void RowScale(float alpha, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

}  // namespace
}  // namespace attnrt::cpu
