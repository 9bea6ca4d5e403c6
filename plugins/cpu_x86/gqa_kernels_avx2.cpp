// gqa.naive.avx2: the row pipeline on AVX2 + FMA, with F16C for float16 tensors. The only naive
// file built with -mavx2 -mfma -mf16c; reached only after gqa.naive.avx2's supports() saw AVX2 and
// FMA usable (CPUID and OS-enabled YMM state), and F16C too when the problem has float16 tensors:
// the F16C instructions here run for float16 rows only.
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gqa_convert.h"
#include "gqa_kernels.h"
#include "gqa_pipeline.h"
#include "gqa_quant.h"

namespace attnrt::cpu_x86 {
namespace {

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lanes [0, n) set, for a tail of n in [1, 7] elements.
__m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 88: Cephes expf (range reduction with ln2 split in two, degree-6 polynomial on
// [-ln2/2, ln2/2]); about 1 ulp, so softmax keeps float rounding accuracy. Below ln(FLT_MIN) the
// result is 0, where expf would return a denormal of no weight in a softmax sum.
__m256 Exp(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.33654475f);
  const __m256 underflow = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, min_x), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

// Per-tensor scale broadcast, or the 8 per-channel scales of elements [i, i + 8).
__m256 Scale8(const GqaCacheRow& row, int64_t i) {
  return row.per_channel ? _mm256_loadu_ps(row.scale + i) : _mm256_set1_ps(row.scale[0]);
}

// Elements [i, i + 8) of a cache row as float32: widened, or q * scale (the product rounded to
// float32 before any accumulation, as a dequantized row would hold it).
template <GqaCacheType kType>
__m256 LoadCache8(const GqaCacheRow& row, int64_t i) {
  if constexpr (kType == GqaCacheType::kFloat32) {
    return _mm256_loadu_ps(static_cast<const float*>(row.data) + i);
  } else if constexpr (kType == GqaCacheType::kFloat16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row.data) + i)));
  } else if constexpr (kType == GqaCacheType::kBFloat16) {
    const __m128i bits = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row.data) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  } else if constexpr (kType == GqaCacheType::kInt8) {
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row.data) + i));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), Scale8(row, i));
  } else if constexpr (kType == GqaCacheType::kInt4) {
    // 4 bytes hold elements i..i+7; each byte goes to two lanes, the even one keeps the low nibble.
    int32_t packed;
    memcpy(&packed, static_cast<const uint8_t*>(row.data) + i / 2, sizeof packed);
    const __m128i pairs =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(packed),
                         _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_cvtepu8_epi32(pairs), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
        _mm256_set1_epi32(0xF));
    const __m256i q = _mm256_sub_epi32(nibbles, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), Scale8(row, i));
  } else {
    static_assert(kType == GqaCacheType::kFloat8E4M3Fn);
    // e4m3fn to float32 bits: rebias normals (7 -> 127); subnormals are mantissa * 2^-9; S.1111.111
    // is NaN. As Float8E4M3FnToFloat, without arithmetic on float32 subnormals.
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row.data) + i)));
    const __m256i exponent = _mm256_and_si256(_mm256_srli_epi32(v, 3), _mm256_set1_epi32(0xF));
    const __m256i mantissa = _mm256_and_si256(v, _mm256_set1_epi32(0x7));
    const __m256i normal =
        _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(120)), 23),
                        _mm256_slli_epi32(mantissa, 20));
    const __m256i subnormal =
        _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(0x1p-9f)));
    __m256i bits =
        _mm256_blendv_epi8(normal, subnormal, _mm256_cmpeq_epi32(exponent, _mm256_setzero_si256()));
    const __m256i is_nan =
        _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), _mm256_set1_epi32(0x7F));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), is_nan);
    bits =
        _mm256_or_si256(bits, _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), Scale8(row, i));
  }
}

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

  static void Scale(float alpha, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] *= alpha;
  }

  static float Max(const float* x, int64_t n) {
    if (n < 8) {
      float m = x[0];
      for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
      return m;
    }
    __m256 vm = _mm256_loadu_ps(x);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    // The tail re-reads up to 7 elements already seen, harmless for a maximum.
    if (i < n) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + n - 8));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }

  static float ExpSum(float* x, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
      _mm256_storeu_ps(x + i, e);
      acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
      const __m256i mask = TailMask(n - i);
      const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vm)),
                                     _mm256_castsi256_ps(mask));
      _mm256_maskstore_ps(x + i, mask, e);
      acc = _mm256_add_ps(acc, e);
    }
    return HorizontalSum(acc);
  }
};

}  // namespace

void GqaAttendRowsAvx2(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<Avx2Ops>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu_x86
