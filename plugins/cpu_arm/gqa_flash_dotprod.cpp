// Scores of cpu_arm.gqa.flash.dotprod_approx, the opt-in approximate path: for an int8 PER_TENSOR K
// block each float32 query row is quantized to int8 (symmetric, per row: s_q = max|q| / 127,
// rounded to nearest even) and multiplied with the cached codes by SDOT (FEAT_DotProd) in exact
// int32 arithmetic; score = scale * s_q * k_scale * dot. This changes the numeric contract (the
// float32 query is quantized), which is why the kernel ranks below every exact kernel and runs only
// when pinned: the counterpart of ONNX Runtime's opt-in ORT_MLAS_QKGEMM_S8_APPROX_VNNI path (its
// GroupQueryAttention CPU implementation notes), with the same scope (int8 PER_TENSOR K; V and P.V
// stay exact). Every other block (float32 tiles, which the driver makes for tiles taller than its
// fused limit) takes the exact NEON scores.
//
// The only file built with +dotprod; reached only after the kernel's supports() saw FEAT_DotProd.
// It calls only intrinsics and its own internal functions, never std:: inline or template code
// (see gqa_pipeline.h for why).
#include <arm_neon.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_run.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "gqa_flash_dotprod.cpp must be built with +dotprod"
#endif

namespace attnrt::cpu {
namespace {

// Query rows quantized at once; the driver's fused tiles have at most 8 rows.
constexpr int64_t kRowChunk = 8;

// q8 = round(q / s_q) for one row of h floats; returns s_q (1 for an all-zero row, NaN for a row
// with a NaN).
float QuantizeRow(const float* q, int64_t h, int8_t* q8) {
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int64_t d = 0; d < h; d += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(q + d)));
  const float max_abs = vmaxvq_f32(m);
  // A NaN (NaN max) keeps s_q NaN, so the row's scores are NaN as in the exact kernels.
  const float s = max_abs == 0.0f ? 1.0f : max_abs / 127.0f;
  const float inv = 1.0f / s;
  for (int64_t d = 0; d < h; d += 8) {
    const int32x4_t lo = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(q + d), inv));
    const int32x4_t hi = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(q + d + 4), inv));
    vst1_s8(q8 + d, vqmovn_s16(vcombine_s16(vqmovn_s32(lo), vqmovn_s32(hi))));
  }
  return s;
}

// <q8, k8> over h int8 elements (h a multiple of 8), exact in int32.
int32_t DotInt8(const int8_t* q8, const int8_t* k8, int64_t h) {
  int32x4_t acc = vdupq_n_s32(0);
  int64_t d = 0;
  for (; d + 16 <= h; d += 16) acc = vdotq_s32(acc, vld1q_s8(q8 + d), vld1q_s8(k8 + d));
  int32x2_t tail = vdup_n_s32(0);
  if (d < h) tail = vdot_s32(tail, vld1_s8(q8 + d), vld1_s8(k8 + d));
  return vaddvq_s32(acc) + vaddv_s32(tail);
}

}  // namespace

void GqaFlashScoresDotProdApprox(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys,
                                 int64_t h, float scale, float* scores, int64_t ld,
                                 const void* prefetch, size_t prefetch_bytes) {
  if (k.type != GqaCacheType::kInt8 || k.per_channel || h > kGqaDotProdMaxHeadSize) {
    kGqaFlashOpsNeon.scores(q, rows, k, keys, h, scale, scores, ld, prefetch, prefetch_bytes);
    return;
  }
  int8_t q8[kRowChunk][kGqaDotProdMaxHeadSize];
  float row_scale[kRowChunk];
  for (int64_t i0 = 0; i0 < rows; i0 += kRowChunk) {
    const int64_t n = rows - i0 < kRowChunk ? rows - i0 : kRowChunk;
    for (int64_t r = 0; r < n; ++r) {
      row_scale[r] = scale * k.scale[0] * QuantizeRow(q + (i0 + r) * h, h, q8[r]);
    }
    for (int64_t j = 0; j < keys; ++j) {
      const auto* k8 = reinterpret_cast<const int8_t*>(static_cast<const unsigned char*>(k.data) +
                                                       static_cast<size_t>(j) * k.row_bytes);
      for (int64_t r = 0; r < n; ++r) {
        scores[(i0 + r) * ld + j] = row_scale[r] * static_cast<float>(DotInt8(q8[r], k8, h));
      }
    }
  }
}

}  // namespace attnrt::cpu
