// The AVX2/FMA inner loops of machine_limits.cpp. Only this file is built with -mavx2 -mfma; its
// functions run only after __builtin_cpu_supports confirmed both.
#include <immintrin.h>

#include "machine_limits.h"

namespace attnrt_bench {

double ReadSumAvx2(const float* data, size_t count) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  size_t i = 0;
  for (; i + 64 <= count; i += 64) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(data + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(data + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(data + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(data + i + 24));
    a4 = _mm256_add_ps(a4, _mm256_load_ps(data + i + 32));
    a5 = _mm256_add_ps(a5, _mm256_load_ps(data + i + 40));
    a6 = _mm256_add_ps(a6, _mm256_load_ps(data + i + 48));
    a7 = _mm256_add_ps(a7, _mm256_load_ps(data + i + 56));
  }
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  double total = 0;
  for (float lane : lanes) total += lane;
  for (; i < count; ++i) total += data[i];
  return total;
}

float FmaChainsAvx2(int64_t iterations, float seed) {
  const __m256 m = _mm256_set1_ps(0.999999f);
  const __m256 c = _mm256_set1_ps(1e-6f);
  __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 1), a2 = _mm256_set1_ps(seed + 2);
  __m256 a3 = _mm256_set1_ps(seed + 3), a4 = _mm256_set1_ps(seed + 4),
         a5 = _mm256_set1_ps(seed + 5);
  __m256 a6 = _mm256_set1_ps(seed + 6), a7 = _mm256_set1_ps(seed + 7),
         a8 = _mm256_set1_ps(seed + 8);
  __m256 a9 = _mm256_set1_ps(seed + 9), a10 = _mm256_set1_ps(seed + 10);
  __m256 a11 = _mm256_set1_ps(seed + 11);
  for (int64_t i = 0; i < iterations; ++i) {  // kFmaChains = 12 FMAs per iteration
    a0 = _mm256_fmadd_ps(a0, m, c);
    a1 = _mm256_fmadd_ps(a1, m, c);
    a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c);
    a4 = _mm256_fmadd_ps(a4, m, c);
    a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c);
    a7 = _mm256_fmadd_ps(a7, m, c);
    a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c);
    a10 = _mm256_fmadd_ps(a10, m, c);
    a11 = _mm256_fmadd_ps(a11, m, c);
  }
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace attnrt_bench
