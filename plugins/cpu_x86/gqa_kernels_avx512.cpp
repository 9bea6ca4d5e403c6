// gqa.naive.avx512: the row pipeline on AVX-512 (F/BW/VL) + FMA, 16 lanes per vector, cache rows
// dequantized in registers (gqa_avx512_cache.h). The only naive file built with -mavx512f
// -mavx512bw -mavx512vl -mfma; reached only after gqa.naive.avx512's supports() saw AVX-512
// F/BW/VL and FMA usable (CPUID and OS-enabled opmask/ZMM state). Float16 rows convert with the
// AVX512F forms of VCVTPH2PS/VCVTPS2PH, so no F16C is needed.
// GCC 12's AVX-512 intrinsics start masked and widening operations from _mm512_undefined_*()
// values, which -Wmaybe-uninitialized reports at the header's lines (GCC bug 105593); the
// diagnostics are silenced for the header's lines only, not for this file's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning group (Clang would warn that it does not know it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#include <string.h>

#include "gqa_avx512_cache.h"
#include "gqa_avx512_math.h"
#include "gqa_convert.h"
#include "gqa_kernels.h"
#include "gqa_pipeline.h"
#include "gqa_quant.h"

namespace attnrt::cpu {
namespace {

constexpr __mmask16 kLow8 = 0x00FF;

template <GqaCacheType kType>
float DotCache(const float* q, const GqaCacheRow& k, int64_t n) {
  // Four accumulators hide the FMA latency.
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), LoadCache16<kType>(k, i, kAllLanes), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), LoadCache16<kType>(k, i + 16, kAllLanes),
                           acc1);
    acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 32), LoadCache16<kType>(k, i + 32, kAllLanes),
                           acc2);
    acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 48), LoadCache16<kType>(k, i + 48, kAllLanes),
                           acc3);
  }
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), LoadCache16<kType>(k, i, kAllLanes), acc0);
  }
  if (i + 8 <= n) {
    acc1 =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(kLow8, q + i), LoadCache16<kType>(k, i, kLow8), acc1);
    i += 8;
  }
  float sum = HorizontalSum16(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  auto step = [&](int64_t j, float x) { sum += q[j] * x; };
  ForEachCacheElement(k, i, n, step);
  return sum;
}

template <GqaCacheType kType>
void AxpyCache(float alpha, const GqaCacheRow& v, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(
        y + i, _mm512_fmadd_ps(va, LoadCache16<kType>(v, i, kAllLanes), _mm512_loadu_ps(y + i)));
  }
  if (i + 8 <= n) {
    _mm512_mask_storeu_ps(
        y + i, kLow8,
        _mm512_fmadd_ps(va, LoadCache16<kType>(v, i, kLow8), _mm512_maskz_loadu_ps(kLow8, y + i)));
    i += 8;
  }
  auto step = [&](int64_t j, float x) { y[j] += alpha * x; };
  ForEachCacheElement(v, i, n, step);
}

// Elements [i, i + 16) (lanes of mask) of a T row as float32.
__m512 LoadWide16(const void* x, GqaFloatType type, int64_t i, __mmask16 mask) {
  switch (type) {
    case GqaFloatType::kFloat16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(x) + i));
    case GqaFloatType::kBFloat16: {
      const __m256i bits = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(x) + i);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
    case GqaFloatType::kFloat32:
      break;
  }
  return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(x) + i);
}

struct Avx512Ops {
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
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, LoadWide16(x, type, i, kAllLanes));
    if (i < n) {
      const __mmask16 mask = Mask16(n - i);
      _mm512_mask_storeu_ps(y + i, mask, LoadWide16(x, type, i, mask));
    }
  }

  static void AddWidened(const void* x, GqaFloatType type, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(y + i,
                       _mm512_add_ps(_mm512_loadu_ps(y + i), LoadWide16(x, type, i, kAllLanes)));
    }
    if (i < n) {
      const __mmask16 mask = Mask16(n - i);
      _mm512_mask_storeu_ps(
          y + i, mask,
          _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + i), LoadWide16(x, type, i, mask)));
    }
  }

  static void Narrow(const float* x, GqaFloatType type, void* y, int64_t n) {
    if (type != GqaFloatType::kFloat16) {
      NarrowRow(x, type, y, n);
      return;
    }
    // VCVTPS2PH rounds to nearest even and quiets NaN exactly as FloatToHalf does.
    auto* dst = static_cast<uint16_t*>(y);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    if (i < n) {
      const __mmask16 mask = Mask16(n - i);
      _mm256_mask_storeu_epi16(
          dst + i, mask,
          _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mask, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
  }

  static void Scale(float alpha, float* y, int64_t n) { RowScale(alpha, y, n); }
  static float Max(const float* x, int64_t n) { return RowMax(x, n); }
  static float ExpSum(float* x, int64_t n, float m) { return RowExpSum(x, n, m); }
};

}  // namespace

void GqaAttendRowsAvx512(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<Avx512Ops>(run, scratch, unit_begin, unit_end);
}

void GqaAttendRowsPagedAvx512(const GqaRun& run, float* scratch, int64_t unit_begin,
                              int64_t unit_end) {
  AttendRows<Avx512Ops, true>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu
