// AVX-512 (F/BW/VL) + FMA build of the sparse MLA kernel (compiled with -mavx512f -mavx512bw
// -mavx512vl -mfma -mf16c; chosen only when the probe reports them and XCR0 shows the OS saves
// the ZMM and opmask state): 16 heads per vector, register-blocked score and P·V micro-kernels of
// sparse_mla_tile.h within the 32 ZMM registers; token decoding shares the x86 decoders.
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

#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA avx512

#include "sparse_mla_format.h"
#include "sparse_mla_x86.h"

namespace attnrt::sparse_mla::avx512 {

struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Max(V x, V y) { return _mm512_max_ps(x, y); }  // y when either is NaN
  // Exp8's polynomial on 16 lanes, scaled by 2^n with VSCALEFPS (saturates to 0 / inf itself).
  static V Exp(V x) {
    const V lo = _mm512_set1_ps(-87.3f);
    const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));  // NaN passes through
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), _mm512_scalef_ps(y, n));
  }
  static V RoundBf16(V x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    const V r = _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(-65536)));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
  }
  static V RoundFp16(V x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// Scores: 4 head vectors (64 heads) × 4 keys, 3 × 8, 2 × 8 or 1 × 16 (16-24 accumulators, the
// key values broadcast from memory); P·V: 6 heads × 4 d-vectors (24 accumulators).
struct Blocking {
  static constexpr int kScoreHv = 4;
  static constexpr int kScoreKeys[5] = {0, 16, 8, 8, 4};
  static constexpr int kPvHeads = 6, kPvDv = 4;
};

}  // namespace attnrt::sparse_mla::avx512

#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::avx512 {

struct Math {
  static constexpr int kLanes = Vec::kLanes;
  static constexpr int kKeyPad = 16;
  using KeyT = float;
  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
    DecodeNopeX86(nope, scales, dst);
  }
  static void DecodeBf16(const uint8_t* src, int n, float* dst) { DecodeBf16X86(src, n, dst); }
  static void DecodeFp16(const uint8_t* src, int n, float* dst) { DecodeFp16X86(src, n, dst); }
  static void DecodeTq4(const uint8_t* codes, float scale, bool fp16, float* dst) {
    DecodeTq4X86(codes, scale, fp16, dst);
  }
  static void ZeroRow(float* dst) { ZeroRowX86(dst); }
  static void ScoreTile(const float* qt, int hp, const float* tile, int rows, float* s) {
    ScoreTileBlocked<Vec, Blocking>(qt, hp, tile, rows, s);
  }
  static void PvTile(const float* p, int hp, int nt, const float* tile, const float* alpha, int nh,
                     float* o) {
    PvTileBlocked<Vec, Blocking>(p, hp, nt, tile, alpha, nh, o);
  }
};

}  // namespace attnrt::sparse_mla::avx512

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAvx512(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity) {
  return avx512::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
