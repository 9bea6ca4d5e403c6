// NEON float32 helpers shared by the NEON GroupQueryAttention files (gqa_kernels_neon.cpp,
// gqa_flash_neon.cpp): exp and the softmax row operations, the counterparts of cpu_x86's
// gqa_avx2_math.h (same Cephes polynomial, so both architectures round alike).
//
// Internal linkage throughout, for the reason gqa_pipeline.h gives.
#pragma once

#if !defined(__aarch64__)
#error "gqa_neon_math.h is for AArch64 translation units"
#endif

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

namespace attnrt::cpu {
namespace {

// exp(x) for x <= 88: Cephes expf (range reduction with ln2 split in two, degree-6 polynomial on
// [-ln2/2, ln2/2]), max relative error ~1.2e-7 (about 1 ulp), so softmax keeps float rounding
// accuracy. Below ln(FLT_MIN) the result is 0, where expf would return a denormal of no weight in
// a softmax sum.
inline float32x4_t Exp(float32x4_t x) {
  const float32x4_t min_x = vdupq_n_f32(-87.33654475f);
  const uint32x4_t underflow = vcltq_f32(x, min_x);
  x = vminq_f32(vmaxq_f32(x, min_x), vdupq_n_f32(88.0f));
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
  const int32x4_t two_n = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t e = vmulq_f32(p, vreinterpretq_f32_s32(two_n));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), underflow));
}

// max of x[0, n), n >= 1.
inline float RowMax(const float* x, int64_t n) {
  if (n < 4) {
    float m = x[0];
    for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  float32x4_t vm = vld1q_f32(x);
  int64_t i = 4;
  for (; i + 4 <= n; i += 4) vm = vmaxq_f32(vm, vld1q_f32(x + i));
  // The tail re-reads up to 3 elements already seen, harmless for a maximum.
  if (i < n) vm = vmaxq_f32(vm, vld1q_f32(x + n - 4));
  return vmaxvq_f32(vm);
}

// x = exp(x - m) over [0, n); returns the sum. The tail goes through the same vector exp (on a
// padded copy), so every element of a row is rounded alike.
inline float RowExpSum(float* x, int64_t n, float m) {
  const float32x4_t vm = vdupq_n_f32(m);
  float32x4_t acc = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = Exp(vsubq_f32(vld1q_f32(x + i), vm));
    vst1q_f32(x + i, e);
    acc = vaddq_f32(acc, e);
  }
  if (i < n) {
    const size_t tail = static_cast<size_t>(n - i) * sizeof(float);
    float pad[4] = {m, m, m, m};
    memcpy(pad, x + i, tail);
    float32x4_t e = Exp(vsubq_f32(vld1q_f32(pad), vm));
    static const uint32_t kLaneIndex[4] = {0, 1, 2, 3};
    const uint32x4_t lanes =
        vcltq_u32(vld1q_u32(kLaneIndex), vdupq_n_u32(static_cast<uint32_t>(n - i)));
    e = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e), lanes));
    vst1q_f32(pad, e);
    memcpy(x + i, pad, tail);
    acc = vaddq_f32(acc, e);
  }
  return vaddvq_f32(acc);
}

// y *= alpha over [0, n).
inline void RowScale(float alpha, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), alpha));
  for (; i < n; ++i) y[i] *= alpha;
}

}  // namespace
}  // namespace attnrt::cpu
