// The AVX-512 FMA chains of machine_limits.cpp. Only this file is built with -mavx512f -mfma; it
// runs only after __builtin_cpu_supports confirmed both (with the OS-enabled ZMM state).
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized inside the header (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "machine_limits.h"

namespace attnrt_bench {

float FmaChainsAvx512(int64_t iterations, float seed) {
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 c = _mm512_set1_ps(1e-6f);
  __m512 a[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) a[k] = _mm512_set1_ps(seed + static_cast<float>(k));
  for (int64_t i = 0; i < iterations; ++i) {  // kFmaChains independent FMAs per iteration
#pragma GCC unroll 12
    for (int k = 0; k < kFmaChains; ++k) a[k] = _mm512_fmadd_ps(a[k], m, c);
  }
  __m512 sum = a[0];
  for (int k = 1; k < kFmaChains; ++k) sum = _mm512_add_ps(sum, a[k]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace attnrt_bench
