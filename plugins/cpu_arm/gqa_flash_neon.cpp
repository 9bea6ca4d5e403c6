// gqa.flash.neon: the block operations on Advanced SIMD (AArch64 baseline), register-blocked over 4
// query rows so each K and V vector decoded serves 4 rows (the G heads of a decode token, or 4 rows
// of a prompt tile). Quantized K/V rows (int8, int4, fp8 e4m3fn) and float16/bfloat16 rows are
// decoded 8 elements at a time in registers with the naive NEON kernel's loaders
// (gqa_neon_cache.h), right where they are used; the float32 query and probabilities are never
// quantized. The driver (plugins/cpu_common/gqa_flash.cpp) does the tiling and the online softmax.
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_neon_cache.h"
#include "gqa_neon_math.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

constexpr int64_t kRowBlock = 4;

const void* KvRow(const GqaFlashKv& kv, int64_t j) {
  return static_cast<const unsigned char*>(kv.data) + static_cast<size_t>(j) * kv.row_bytes;
}

// scores[r*ld + j] = scale * <q row r, k row j> for kRows rows from q.
template <GqaCacheType kType, int kRows>
void ScoreRows(const float* q, const GqaFlashKv& k, int64_t keys, int64_t h, float scale,
               float* scores, int64_t ld) {
  for (int64_t j = 0; j < keys; ++j) {
    const void* row = KvRow(k, j);
    float32x4_t lo[kRows], hi[kRows];
    for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = vdupq_n_f32(0.0f);
    for (int64_t d = 0; d < h; d += 8) {
      const F32x8 x = LoadCache8<kType>(row, k.scale, k.per_channel, d);
      for (int r = 0; r < kRows; ++r) {
        lo[r] = vfmaq_f32(lo[r], vld1q_f32(q + r * h + d), x.lo);
        hi[r] = vfmaq_f32(hi[r], vld1q_f32(q + r * h + d + 4), x.hi);
      }
    }
    for (int r = 0; r < kRows; ++r)
      scores[r * ld + j] = scale * vaddvq_f32(vaddq_f32(lo[r], hi[r]));
  }
}

template <GqaCacheType kType>
void ScoresOf(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
              float scale, float* scores, int64_t ld) {
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    ScoreRows<kType, kRowBlock>(q + i * h, k, keys, h, scale, scores + i * ld, ld);
  }
  for (; i < rows; ++i) ScoreRows<kType, 1>(q + i * h, k, keys, h, scale, scores + i * ld, ld);
}

// acc[r*h ..] += sum_j p[r*ld + j] * v row j for kRows rows, 8 columns at a time so the kRows
// accumulators stay in registers across the keys.
template <GqaCacheType kType, int kRows>
void AccumulateRows(const float* p, int64_t ld, const GqaFlashKv& v, int64_t keys, int64_t h,
                    float* acc) {
  for (int64_t d = 0; d < h; d += 8) {
    float32x4_t lo[kRows], hi[kRows];
    for (int r = 0; r < kRows; ++r) {
      lo[r] = vld1q_f32(acc + r * h + d);
      hi[r] = vld1q_f32(acc + r * h + d + 4);
    }
    for (int64_t j = 0; j < keys; ++j) {
      const F32x8 x = LoadCache8<kType>(KvRow(v, j), v.scale, v.per_channel, d);
      for (int r = 0; r < kRows; ++r) {
        const float pj = p[r * ld + j];
        lo[r] = vfmaq_n_f32(lo[r], x.lo, pj);
        hi[r] = vfmaq_n_f32(hi[r], x.hi, pj);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      vst1q_f32(acc + r * h + d, lo[r]);
      vst1q_f32(acc + r * h + d + 4, hi[r]);
    }
  }
}

template <GqaCacheType kType>
void AccumulateOf(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                  int64_t h, float* acc) {
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    AccumulateRows<kType, kRowBlock>(p + i * ld, ld, v, keys, h, acc + i * h);
  }
  for (; i < rows; ++i) AccumulateRows<kType, 1>(p + i * ld, ld, v, keys, h, acc + i * h);
}

template <GqaCacheType kType>
void DequantizeOf(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  for (int64_t j = 0; j < keys; ++j) {
    const void* row = KvRow(kv, j);
    for (int64_t d = 0; d < h; d += 8) {
      const F32x8 x = LoadCache8<kType>(row, kv.scale, kv.per_channel, d);
      vst1q_f32(out + j * h + d, x.lo);
      vst1q_f32(out + j * h + d + 4, x.hi);
    }
  }
}

// Returns fn<kType>(args...) for the cache type `type`.
#define ATTNRT_NEON_DISPATCH(type, fn, ...)                \
  switch (type) {                                          \
    case GqaCacheType::kFloat16:                           \
      return fn<GqaCacheType::kFloat16>(__VA_ARGS__);      \
    case GqaCacheType::kBFloat16:                          \
      return fn<GqaCacheType::kBFloat16>(__VA_ARGS__);     \
    case GqaCacheType::kInt8:                              \
      return fn<GqaCacheType::kInt8>(__VA_ARGS__);         \
    case GqaCacheType::kInt4:                              \
      return fn<GqaCacheType::kInt4>(__VA_ARGS__);         \
    case GqaCacheType::kFloat8E4M3Fn:                      \
      return fn<GqaCacheType::kFloat8E4M3Fn>(__VA_ARGS__); \
    case GqaCacheType::kFloat8E5M2:                        \
      return fn<GqaCacheType::kFloat8E5M2>(__VA_ARGS__);   \
    case GqaCacheType::kBlockQ8_0:                         \
      return fn<GqaCacheType::kBlockQ8_0>(__VA_ARGS__);    \
    case GqaCacheType::kBlockQ4_0:                         \
      return fn<GqaCacheType::kBlockQ4_0>(__VA_ARGS__);    \
    case GqaCacheType::kFloat32:                           \
      break;                                               \
  }                                                        \
  return fn<GqaCacheType::kFloat32>(__VA_ARGS__)

// The prefetch hints are left to the hardware prefetchers of AArch64 cores, which follow the
// sequential K/V rows of a block.
void Scores(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const void* /*prefetch*/, size_t /*prefetch_bytes*/) {
  ATTNRT_NEON_DISPATCH(k.type, ScoresOf, q, rows, k, keys, h, scale, scores, ld);
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                int64_t h, float* acc, const void* /*prefetch*/, size_t /*prefetch_bytes*/) {
  ATTNRT_NEON_DISPATCH(v.type, AccumulateOf, p, rows, ld, v, keys, h, acc);
}

void Dequantize(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  ATTNRT_NEON_DISPATCH(kv.type, DequantizeOf, kv, keys, h, out);
}

#undef ATTNRT_NEON_DISPATCH

}  // namespace

const GqaFlashOps kGqaFlashOpsNeon = {&Scores,   &Accumulate, &Dequantize, &RowMax, &RowExpSum,
                                      &RowScale, 1,           nullptr,     nullptr, nullptr};

const GqaFlashOps kGqaFlashOpsDotProdApprox = {&GqaFlashScoresDotProdApprox,
                                               &Accumulate,
                                               &Dequantize,
                                               &RowMax,
                                               &RowExpSum,
                                               &RowScale,
                                               1,
                                               nullptr,
                                               nullptr,
                                               nullptr};

}  // namespace attnrt::cpu
