// AVX2 + FMA build of the sparse MLA kernel (compiled with -mavx2 -mfma; chosen only when the
// probe reports both and the OS saves the YMM state).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA avx2

namespace attnrt::sparse_mla::avx2 {

struct Math {
  static float Dot(const float* q, const float* k) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    for (int d = 0; d < 512; d += 32) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), acc1);
      acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 16), _mm256_loadu_ps(k + d + 16), acc2);
      acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 24), _mm256_loadu_ps(k + d + 24), acc3);
    }
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void Axpy(float* o, float p, const float* v) {
    const __m256 pv = _mm256_set1_ps(p);
    for (int d = 0; d < 512; d += 8) {
      _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(o + d)));
    }
  }
  static void Scale(float* o, float a) {
    const __m256 av = _mm256_set1_ps(a);
    for (int d = 0; d < 512; d += 8)
      _mm256_storeu_ps(o + d, _mm256_mul_ps(av, _mm256_loadu_ps(o + d)));
  }

  // Round to nearest even bf16, kept in fp32 (the integer form of FloatToBf16); NaN stays NaN.
  static __m256 RoundBf16(__m256 x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    const __m256 r = _mm256_castsi256_ps(_mm256_and_si256(rounded, _mm256_set1_epi32(-65536)));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }

  // float8_e4m3fn bytes to fp32: the 7 magnitude bits shifted into an fp32 pattern are the value
  // times 2^-120 (fp32 subnormals cover the e4m3 subnormals exactly); 0x7F/0xFF are NaN.
  static __m256 Fp8ToFloat(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7F));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)),
                             _mm256_set1_ps(1.329227995784916e36f));  // 2^120
    const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F)));
    v = _mm256_or_ps(v, nan);  // all-ones bits: a NaN
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
  }

  static void DecodeNope(const uint8_t* nope, const float* scales, float* dst) {
    for (int g = 0; g < 7; ++g) {
      const __m256 s = _mm256_set1_ps(scales[g]);
      for (int d = g * 64; d < (g + 1) * 64; d += 8) {
        _mm256_storeu_ps(dst + d, RoundBf16(_mm256_mul_ps(Fp8ToFloat(nope + d), s)));
      }
    }
  }

  static void DecodeBf16(const uint8_t* src, int n, float* dst) {
    for (int d = 0; d < n; d += 8) {
      const __m256i h =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d)));
      _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
  }

  // 8 code bytes -> 16 values: the low nibbles are the even dims, the high nibbles the odd dims.
  static void DecodeTq4Bf16(const uint8_t* codes, float scale, float* dst) {
    const float* book = Codebook();
    const __m256 lo_book = _mm256_loadu_ps(book);
    const __m256 hi_book = _mm256_loadu_ps(book + 8);
    const __m256 s = _mm256_set1_ps(scale);
    auto lookup = [&](__m256i n) {
      const __m256 a = _mm256_permutevar8x32_ps(lo_book, n);
      const __m256 b = _mm256_permutevar8x32_ps(hi_book, n);
      const __m256 use_hi = _mm256_castsi256_ps(_mm256_slli_epi32(n, 28));  // bit 3 -> sign bit
      return RoundBf16(_mm256_mul_ps(_mm256_blendv_ps(a, b, use_hi), s));
    };
    for (int t = 0; t < 256; t += 8) {
      const __m256i b =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + t)));
      const __m256 even = lookup(_mm256_and_si256(b, _mm256_set1_epi32(15)));
      const __m256 odd = lookup(_mm256_srli_epi32(b, 4));
      const __m256 l = _mm256_unpacklo_ps(even, odd);  // pairs of t' 0,1 | 4,5
      const __m256 h = _mm256_unpackhi_ps(even, odd);  // pairs of t' 2,3 | 6,7
      _mm256_storeu_ps(dst + 2 * t, _mm256_permute2f128_ps(l, h, 0x20));
      _mm256_storeu_ps(dst + 2 * t + 8, _mm256_permute2f128_ps(l, h, 0x31));
    }
  }

  // The TQ4 codebook of sparse_mla_format.h (declared here, defined after it).
  static const float* Codebook();
};

}  // namespace attnrt::sparse_mla::avx2

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

const float* avx2::Math::Codebook() { return avx2::kTq4Codebook; }

int32_t RunAvx2(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity) {
  return avx2::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
