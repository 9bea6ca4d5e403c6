// NEON build of the sparse MLA kernel for AArch64. Advanced SIMD is part of the AArch64 baseline
// (Armv8.0-A), so this file needs no extra flag and the kernel runs on every AArch64 CPU whose OS
// exposes ASIMD (the probe's neon flag). Four heads per vector through the register-blocked score
// and P·V micro-kernels of sparse_mla_tile.h; bf16 and fp16 tokens are widened with NEON, the fp8
// and TQ4 tokens go through the scalar reference decoders (sparse_mla_format.h, the same values on
// every ISA).
#if !defined(__aarch64__)
#error "sparse_mla_neon.cpp is for AArch64 translation units"
#endif

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA neon

#include "sparse_mla_format.h"

namespace attnrt::sparse_mla::neon {

struct Vec {
  using V = float32x4_t;
  static constexpr int kLanes = 4;
  static V Zero() { return vdupq_n_f32(0.0f); }
  static V Set1(float x) { return vdupq_n_f32(x); }
  static V Load(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, V x) { vst1q_f32(p, x); }
  static V Broadcast(const float* p) { return vld1q_dup_f32(p); }
  static V Fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static V Add(V a, V b) { return vaddq_f32(a, b); }
  static V Sub(V a, V b) { return vsubq_f32(a, b); }
  static V Mul(V a, V b) { return vmulq_f32(a, b); }
  static float ReduceAdd(V x) { return vaddvq_f32(x); }                // the lanes' sum
  static V Max(V x, V y) { return vbslq_f32(vcgtq_f32(x, y), x, y); }  // y when either is NaN
  // The Cephes polynomial of the x86 builds; 2^n built in the exponent field (n in [-126, 127]
  // after the clamp). NaN passes through (FMAX/FMIN propagate it), below -87.3 the result is 0.
  static V Exp(V x) {
    const V lo = vdupq_n_f32(-87.3f);
    const uint32x4_t below = vcltq_f32(x, lo);
    x = vminq_f32(vdupq_n_f32(88.0f), vmaxq_f32(lo, x));
    const V n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    V r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    V y = vdupq_n_f32(1.9875691500e-4f);
    y = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), y, r);
    y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), y, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    const V v = vmulq_f32(y, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(v), below));
  }
  // Nearest even bf16, kept in fp32 (the integer form of FloatToBf16); NaN stays NaN.
  static V RoundBf16(V x) {
    const uint32x4_t bits = vreinterpretq_u32_f32(x);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
    const uint32x4_t rounded = vaddq_u32(bits, vaddq_u32(vdupq_n_u32(0x7FFF), lsb));
    const V r = vreinterpretq_f32_u32(vandq_u32(rounded, vdupq_n_u32(0xFFFF0000u)));
    return vbslq_f32(vceqq_f32(x, x), r, x);
  }
  // FCVTN rounds by FPCR.RMode, nearest even unless a caller changed it (as MXCSR on x86).
  static V RoundFp16(V x) { return vcvt_f32_f16(vcvt_f16_f32(x)); }
};

// Scores: 4 head vectors (16 heads) × 4 keys, 3 × 4, 2 × 8 or 1 × 8, 128 dims per pass; P·V:
// 6 heads × 4 d-vectors (24 accumulators of the 32 vector registers), 64 keys per pass.
struct Blocking {
  static constexpr int kScoreHv = 4;
  static constexpr int kScoreKeys[5] = {0, 8, 8, 4, 4};
  static constexpr int kScoreTail = 4;
  static constexpr int kScoreDims = 128, kPvKeys = 64;
  static constexpr int kPvHeads = 6, kPvDv = 4;
};

}  // namespace attnrt::sparse_mla::neon

#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::neon {

struct Math {
  static constexpr int kLanes = Vec::kLanes;
  static constexpr int kKeyPad = 4;
  using KeyT = float;
  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
    ScalarDecodeNope(nope, scales, dst);
  }
  // bf16 -> fp32 is a 16-bit left shift, fp16 -> fp32 FCVTL: both exact.
  static void DecodeBf16(const uint8_t* src, int n, float* dst) {
    for (int d = 0; d < n; d += 4) {
      const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(src + 2 * d));
      vst1q_f32(dst + d, vreinterpretq_f32_u32(vshll_n_u16(h, 16)));
    }
  }
  static void DecodeFp16(const uint8_t* src, int n, float* dst) {
    for (int d = 0; d < n; d += 4) {
      const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(src + 2 * d));
      vst1q_f32(dst + d, vcvt_f32_f16(vreinterpret_f16_u16(h)));
    }
  }
  static void DecodeTq4(const uint8_t* codes, float scale, bool fp16, float* dst) {
    if (fp16) {
      ScalarDecodeTq4Fp16(codes, scale, dst);
    } else {
      ScalarDecodeTq4Bf16(codes, scale, dst);
    }
  }
  static void ZeroRow(float* dst) {
    for (int d = 0; d < kTileDim; d += 4) vst1q_f32(dst + d, vdupq_n_f32(0.0f));
  }
  static void ScoreTile(const float* qt, int hp, const float* tile, int rows, float* s) {
    ScoreTileBlocked<Vec, Blocking>(qt, hp, tile, rows, s);
  }
  static void ScoreFewHeads(const float* qr, int nh, int hp, const float* tile, int rows,
                            float* s) {
    ScoreTileFewHeads<Vec>(qr, nh, hp, tile, rows, s);
  }
  static void PvTile(const float* p, int hp, int nt, const float* tile, const float* alpha, int nh,
                     float* o) {
    PvTileBlocked<Vec, Blocking>(p, hp, nt, tile, alpha, nh, o);
  }
};

}  // namespace attnrt::sparse_mla::neon

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunNeon(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity) {
  return neon::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
