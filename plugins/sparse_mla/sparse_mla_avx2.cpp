// AVX2 + FMA build of the sparse MLA kernel (compiled with -mavx2 -mfma; chosen only when the
// probe reports both and the OS saves the YMM state).
#include <immintrin.h>

#include <cstddef>

#define SPARSE_MLA_ISA avx2

namespace attnrt::sparse_mla::avx2 {

struct Math {
  static float Dot(const float* q, const float* k) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    for (int d = 0; d < 512; d += 32) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), acc1);
      acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 16), _mm256_loadu_ps(k + d + 16), acc2);
      acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 24), _mm256_loadu_ps(k + d + 24), acc3);
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void Axpy(float* o, float p, const float* v) {
    const __m256 pv = _mm256_set1_ps(p);
    for (int d = 0; d < 512; d += 8) {
      _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(o + d)));
    }
  }
  static void Scale(float* o, float a) {
    const __m256 av = _mm256_set1_ps(a);
    for (int d = 0; d < 512; d += 8)
      _mm256_storeu_ps(o + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + d)));
  }
};

}  // namespace attnrt::sparse_mla::avx2

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAvx2(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity) {
  return avx2::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
