// gqa.naive.neon: the row pipeline on Advanced SIMD (AArch64 baseline), K/V rows of every cache
// type dequantized 8 elements at a time in registers (gqa_neon_cache.h) where Dot and Axpy use
// them. The float32 query and probabilities are never quantized; products of a quantized element
// and its scale are rounded to float32 before the fused multiply-add, as a dequantized row would
// hold them, so results differ from the scalar kernel by float reassociation only.
#include <arm_neon.h>
#include <stdint.h>

#include "gqa_convert.h"
#include "gqa_kernels.h"
#include "gqa_neon_cache.h"
#include "gqa_neon_math.h"
#include "gqa_pipeline.h"
#include "gqa_quant.h"

namespace attnrt::cpu {
namespace {

template <GqaCacheType kType>
float DotCache(const float* q, const GqaCacheRow& k, int64_t n) {
  // Four accumulators hide the FMA latency.
  float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
  float32x4_t acc2 = vdupq_n_f32(0.0f), acc3 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const F32x8 a = LoadCache8<kType>(k.data, k.scale, k.per_channel, i);
    const F32x8 b = LoadCache8<kType>(k.data, k.scale, k.per_channel, i + 8);
    acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), a.lo);
    acc1 = vfmaq_f32(acc1, vld1q_f32(q + i + 4), a.hi);
    acc2 = vfmaq_f32(acc2, vld1q_f32(q + i + 8), b.lo);
    acc3 = vfmaq_f32(acc3, vld1q_f32(q + i + 12), b.hi);
  }
  for (; i + 8 <= n; i += 8) {
    const F32x8 a = LoadCache8<kType>(k.data, k.scale, k.per_channel, i);
    acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), a.lo);
    acc1 = vfmaq_f32(acc1, vld1q_f32(q + i + 4), a.hi);
  }
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
  auto step = [&](int64_t j, float x) { sum += q[j] * x; };
  ForEachCacheElement(k, i, n, step);
  return sum;
}

template <GqaCacheType kType>
void AxpyCache(float alpha, const GqaCacheRow& v, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const F32x8 x = LoadCache8<kType>(v.data, v.scale, v.per_channel, i);
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), x.lo, alpha));
    vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), x.hi, alpha));
  }
  auto step = [&](int64_t j, float x) { y[j] += alpha * x; };
  ForEachCacheElement(v, i, n, step);
}

// Elements [i, i + 8) of a T row as float32.
F32x8 LoadWide8(const void* x, GqaFloatType type, int64_t i) {
  switch (type) {
    case GqaFloatType::kFloat16:
      return LoadCacheRaw8<GqaCacheType::kFloat16>(x, i);
    case GqaFloatType::kBFloat16:
      return LoadCacheRaw8<GqaCacheType::kBFloat16>(x, i);
    case GqaFloatType::kFloat32:
      break;
  }
  return LoadCacheRaw8<GqaCacheType::kFloat32>(x, i);
}

struct NeonOps {
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
    for (; i + 8 <= n; i += 8) {
      const F32x8 w = LoadWide8(x, type, i);
      vst1q_f32(y + i, w.lo);
      vst1q_f32(y + i + 4, w.hi);
    }
    for (; i < n; ++i) y[i] = LoadElement(x, type, i);
  }

  static void AddWidened(const void* x, GqaFloatType type, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const F32x8 w = LoadWide8(x, type, i);
      vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), w.lo));
      vst1q_f32(y + i + 4, vaddq_f32(vld1q_f32(y + i + 4), w.hi));
    }
    for (; i < n; ++i) y[i] += LoadElement(x, type, i);
  }

  // The shared conversions: they round to nearest even and quiet NaN exactly as the reference
  // does, independent of the FPCR's default-NaN setting.
  static void Narrow(const float* x, GqaFloatType type, void* y, int64_t n) {
    NarrowRow(x, type, y, n);
  }

  static void Scale(float alpha, float* y, int64_t n) { RowScale(alpha, y, n); }
  static float Max(const float* x, int64_t n) { return RowMax(x, n); }
  static float ExpSum(float* x, int64_t n, float m) { return RowExpSum(x, n, m); }
};

}  // namespace

void GqaAttendRowsNeon(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<NeonOps>(run, scratch, unit_begin, unit_end);
}

void GqaAttendRowsPagedNeon(const GqaRun& run, float* scratch, int64_t unit_begin,
                            int64_t unit_end) {
  AttendRows<NeonOps, true>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu
