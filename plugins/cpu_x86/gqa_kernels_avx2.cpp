// gqa.naive.avx2: the row pipeline on AVX2 + FMA, with F16C for float16 tensors. The only naive
// file built with -mavx2 -mfma -mf16c; reached only after gqa.naive.avx2's supports() saw AVX2 and
// FMA usable (CPUID and OS-enabled YMM state), and F16C too when the problem has float16 tensors:
// the F16C instructions here run for float16 rows only.
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gqa_avx2_cache.h"
#include "gqa_avx2_math.h"
#include "gqa_convert.h"
#include "gqa_kernels.h"
#include "gqa_pipeline.h"
#include "gqa_quant.h"

namespace attnrt::cpu {
namespace {

template <GqaCacheType kType>
float DotCache(const float* q, const GqaCacheRow& k, int64_t n) {
  // Four accumulators hide the FMA latency.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), LoadCache8<kType>(k, i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), LoadCache8<kType>(k, i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), LoadCache8<kType>(k, i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), LoadCache8<kType>(k, i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), LoadCache8<kType>(k, i), acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  auto step = [&](int64_t j, float x) { sum += q[j] * x; };
  ForEachCacheElement(k, i, n, step);
  return sum;
}

template <GqaCacheType kType>
void AxpyCache(float alpha, const GqaCacheRow& v, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadCache8<kType>(v, i), _mm256_loadu_ps(y + i)));
  }
  auto step = [&](int64_t j, float x) { y[j] += alpha * x; };
  ForEachCacheElement(v, i, n, step);
}

// Elements [i, i + 8) of a T row as float32.
__m256 LoadWide8(const void* x, GqaFloatType type, int64_t i) {
  switch (type) {
    case GqaFloatType::kFloat16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i)));
    case GqaFloatType::kBFloat16: {
      const __m128i bits =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    }
    case GqaFloatType::kFloat32:
      break;
  }
  return _mm256_loadu_ps(static_cast<const float*>(x) + i);
}

struct Avx2Ops {
  static float Dot(const float* q, const GqaCacheRow& k, int64_t n) {
    switch (k.type) {
      case GqaCacheType::kFloat16:
        return DotCache<GqaCacheType::kFloat16>(q, k, n);
      case GqaCacheType::kBFloat16:
        return DotCache<GqaCacheType::kBFloat16>(q, k, n);
      case GqaCacheType::kInt8:
        return DotCache<GqaCacheType::kInt8>(q, k, n);
      case GqaCacheType::kInt4:
        return DotCache<GqaCacheType::kInt4>(q, k, n);
      case GqaCacheType::kFloat8E4M3Fn:
        return DotCache<GqaCacheType::kFloat8E4M3Fn>(q, k, n);
      case GqaCacheType::kFloat8E5M2:
        return DotCache<GqaCacheType::kFloat8E5M2>(q, k, n);
      case GqaCacheType::kBlockQ8_0:
        return DotCache<GqaCacheType::kBlockQ8_0>(q, k, n);
      case GqaCacheType::kBlockQ4_0:
        return DotCache<GqaCacheType::kBlockQ4_0>(q, k, n);
      case GqaCacheType::kFloat32:
        break;
    }
    return DotCache<GqaCacheType::kFloat32>(q, k, n);
  }

  static void Axpy(float alpha, const GqaCacheRow& v, float* y, int64_t n) {
    switch (v.type) {
      case GqaCacheType::kFloat16:
        return AxpyCache<GqaCacheType::kFloat16>(alpha, v, y, n);
      case GqaCacheType::kBFloat16:
        return AxpyCache<GqaCacheType::kBFloat16>(alpha, v, y, n);
      case GqaCacheType::kInt8:
        return AxpyCache<GqaCacheType::kInt8>(alpha, v, y, n);
      case GqaCacheType::kInt4:
        return AxpyCache<GqaCacheType::kInt4>(alpha, v, y, n);
      case GqaCacheType::kFloat8E4M3Fn:
        return AxpyCache<GqaCacheType::kFloat8E4M3Fn>(alpha, v, y, n);
      case GqaCacheType::kFloat8E5M2:
        return AxpyCache<GqaCacheType::kFloat8E5M2>(alpha, v, y, n);
      case GqaCacheType::kBlockQ8_0:
        return AxpyCache<GqaCacheType::kBlockQ8_0>(alpha, v, y, n);
      case GqaCacheType::kBlockQ4_0:
        return AxpyCache<GqaCacheType::kBlockQ4_0>(alpha, v, y, n);
      case GqaCacheType::kFloat32:
        break;
    }
    AxpyCache<GqaCacheType::kFloat32>(alpha, v, y, n);
  }

  static void Widen(const void* x, GqaFloatType type, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, LoadWide8(x, type, i));
    for (; i < n; ++i) y[i] = LoadElement(x, type, i);
  }

  static void AddWidened(const void* x, GqaFloatType type, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), LoadWide8(x, type, i)));
    }
    for (; i < n; ++i) y[i] += LoadElement(x, type, i);
  }

  static void Narrow(const float* x, GqaFloatType type, void* y, int64_t n) {
    if (type != GqaFloatType::kFloat16) {
      NarrowRow(x, type, y, n);
      return;
    }
    // VCVTPS2PH rounds to nearest even and quiets NaN exactly as FloatToHalf does.
    auto* dst = static_cast<uint16_t*>(y);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) dst[i] = FloatToHalf(x[i]);
  }

  static void Scale(float alpha, float* y, int64_t n) { RowScale(alpha, y, n); }
  static float Max(const float* x, int64_t n) { return RowMax(x, n); }
  static float ExpSum(float* x, int64_t n, float m) { return RowExpSum(x, n, m); }
};

}  // namespace

void GqaAttendRowsAvx2(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<Avx2Ops>(run, scratch, unit_begin, unit_end);
}

void GqaAttendRowsPagedAvx2(const GqaRun& run, float* scratch, int64_t unit_begin,
                            int64_t unit_end) {
  AttendRows<Avx2Ops, true>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu
