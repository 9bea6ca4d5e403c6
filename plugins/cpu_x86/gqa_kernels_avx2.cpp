// gqa.naive.avx2: the row pipeline on AVX2 + FMA. The only file built with -mavx2 -mfma; reached
// only after gqa.naive.avx2's supports() saw both usable (CPUID and OS-enabled YMM state).
#include <immintrin.h>
#include <stdint.h>

#include "gqa_kernels.h"
#include "gqa_pipeline.h"

namespace attnrt::cpu_x86 {
namespace {

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lanes [0, n) set, for a tail of n in [1, 7] elements.
__m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 88: Cephes expf (range reduction with ln2 split in two, degree-6 polynomial on
// [-ln2/2, ln2/2]); about 1 ulp, so softmax keeps float rounding accuracy. Below ln(FLT_MIN) the
// result is 0, where expf would return a denormal of no weight in a softmax sum.
__m256 Exp(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.33654475f);
  const __m256 underflow = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, min_x), _mm256_set1_ps(88.0f));
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

struct Avx2Ops {
  static float Dot(const float* a, const float* b, int64_t n) {
    // Four accumulators hide the FMA latency.
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
      acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
      acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    }
    float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
  }

  static void Axpy(float alpha, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += alpha * x[i];
  }

  static void Scale(float alpha, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] *= alpha;
  }

  static float Max(const float* x, int64_t n) {
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

  static float ExpSum(float* x, int64_t n, float m) {
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
};

}  // namespace

void GqaAttendRowsAvx2(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<Avx2Ops>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu_x86
