// AVX-512 (F/BW/VL) + FMA build of the sparse MLA kernel (compiled with -mavx512f -mavx512bw
// -mavx512vl -mfma; chosen only when the probe reports them and XCR0 shows the OS saves the ZMM
// and opmask state): 16 heads per vector, register-blocked score and P·V micro-kernels of
// sparse_mla_tile.h within the 32 ZMM registers, tokens decoded 16 values per instruction (fp16
// through the AVX512F forms of VCVTPH2PS/VCVTPS2PH, so no F16C is needed).
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

#include <cmath>
#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA avx512

#include "sparse_mla_avx512_vec.h"
#include "sparse_mla_format.h"

namespace attnrt::sparse_mla::avx512 {

// Token decoders, 16 values per step (the x86 decoders' arithmetic on ZMM registers).
// Nope dims: Fp8Magnitudex16 gives each float8_e4m3fn byte's magnitude as an exact fp32 value,
// times scale (one exact multiply: at most 4 x 8 significant bits, rounded as the fp32 product
// of the reference where it over- or underflows), then the byte's sign. The product is rounded to
// bf16 without a NaN test (a NaN product comes from a NaN scale, whose low 16 bits are 0, or from
// 0 x inf: the rounding keeps it NaN); 0x7F/0xFF bytes are NaN (all-ones) afterwards.
inline void DecodeNopex16(const uint8_t* nope, const float* scales, float* dst) {
  const __m512i mag_mask = _mm512_set1_epi32(0x7F);
  const __m512i sign_bit = _mm512_set1_epi32(INT32_MIN);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
  const __m512i high = _mm512_set1_epi32(-65536), nan = _mm512_set1_epi32(-1);
  for (int g = 0; g < 7; ++g) {
    const __m512 s = _mm512_set1_ps(scales[g]);
    for (int d = g * 64; d < (g + 1) * 64; d += 16) {
      const __m512i b =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(nope + d)));
      const __m512i mag = _mm512_and_si512(b, mag_mask);
      const __m512 v = _mm512_mul_ps(Fp8Magnitudex16(mag), s);
      // The byte's sign (bit 7 to bit 31) flips the product's: A ^ (B & C).
      const __m512i x = _mm512_ternarylogic_epi32(_mm512_castps_si512(v), _mm512_slli_epi32(b, 24),
                                                  sign_bit, 0x78);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
      const __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(x, half), lsb), high);
      const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(mag, mag_mask);
      _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, is_nan, nan)));
    }
  }
}

inline void DecodeBf16x16(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; d += 16) {
    const __m512i h =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * d)));
    _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
}

inline void DecodeFp16x16(const uint8_t* src, int n, float* dst) {
  for (int d = 0; d < n; d += 16) {
    _mm512_storeu_ps(
        dst + d,
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * d))));
  }
}

// 16 code bytes -> 32 values through the 16-entry codebook in one register.
inline void DecodeTq4x16(const uint8_t* codes, float scale, bool fp16, float* dst) {
  const __m512 book = _mm512_loadu_ps(kTq4Codebook);
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  auto value = [&](__m512i n) {
    const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(n, book), s);
    return fp16 ? Vec::RoundFp16(v) : Vec::RoundBf16(v);
  };
  for (int t = 0; t < 256; t += 16) {
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + t)));
    const __m512 even = value(_mm512_and_si512(b, _mm512_set1_epi32(15)));
    const __m512 odd = value(_mm512_srli_epi32(b, 4));
    _mm512_storeu_ps(dst + 2 * t, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(dst + 2 * t + 16, _mm512_permutex2var_ps(even, hi, odd));
  }
}

// Scores: 4 head vectors (64 heads) × 6 keys, 3 × 8, 2 × 8 or 1 × 16 (16-24 accumulators, the
// key values broadcast from memory), 2-key blocks for the tail, passes of 128 dims; P·V: 6 heads ×
// 4 d-vectors (24 accumulators) over chunks of 64 keys.
struct Blocking {
  static constexpr int kScoreHv = 4;
  static constexpr int kScoreKeys[5] = {0, 16, 8, 8, 6};
  static constexpr int kScoreTail = 2;
  static constexpr int kScoreDims = 128, kPvKeys = 64;
  static constexpr int kPvHeads = 6, kPvDv = 4;
};

}  // namespace attnrt::sparse_mla::avx512

#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::avx512 {

struct Math {
  static constexpr int kLanes = Vec::kLanes;
  static constexpr int kKeyPad = 2;
  using KeyT = float;
  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
    DecodeNopex16(nope, scales, dst);
  }
  // n is 64 (rope) or 512.
  static void DecodeBf16(const uint8_t* src, int n, float* dst) { DecodeBf16x16(src, n, dst); }
  static void DecodeFp16(const uint8_t* src, int n, float* dst) { DecodeFp16x16(src, n, dst); }
  static void DecodeTq4(const uint8_t* codes, float scale, bool fp16, float* dst) {
    DecodeTq4x16(codes, scale, fp16, dst);
  }
  static void ZeroRow(float* dst) {
    for (int d = 0; d < kTileDim; d += 16) _mm512_storeu_ps(dst + d, _mm512_setzero_ps());
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

}  // namespace attnrt::sparse_mla::avx512

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAvx512(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity) {
  return avx512::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
