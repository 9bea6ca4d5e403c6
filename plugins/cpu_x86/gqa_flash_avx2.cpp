// gqa.flash.avx2: the block operations on AVX2 + FMA, register-blocked over 4 query rows so each K
// and V row loaded serves 4 rows (the G heads of a decode token, or 4 rows of a prompt tile), with
// software prefetch of the next K/V block interleaved with the arithmetic. The only flash file
// built with -mavx2 -mfma; reached only after gqa.flash.avx2's supports() saw both usable.
//
// Calls only intrinsics and its own internal functions, never std:: inline or template code: such
// functions would be emitted by the baseline and the AVX2 translation units alike, and the linker
// may keep the AVX2 copy for the scalar kernel (see gqa_pipeline.h).
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_flash.h"

namespace attnrt::cpu_x86 {
namespace {

constexpr int64_t kRowBlock = 4;
constexpr size_t kLine = 64;

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lane i = horizontal sum of a[i]: 8 reductions for the price of about 2.
__m256 HorizontalSums8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // low half: a0..a3 of lanes 0-3, high: of lanes 4-7
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane i = horizontal sum of a[i], for 4 vectors.
__m128 HorizontalSums4(const __m256* a) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// Lanes [0, n) set, for a tail of n in [1, 7] elements.
__m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) for x <= 88, the naive AVX2 kernel's: Cephes expf (range reduction with ln2 split in two,
// degree-6 polynomial on [-ln2/2, ln2/2]), max relative error ~1.2e-7. Below ln(FLT_MIN) the result
// is 0, where expf would return a denormal of no weight in a softmax sum.
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

// Spreads the prefetch of a byte range over `steps` calls of Step(): the next block streams in
// while this one is computed, without a burst that would crowd out the demand loads.
class Prefetcher {
 public:
  Prefetcher(const void* begin, size_t bytes, int64_t steps)
      : next_(static_cast<const char*>(begin)), end_(next_ + bytes) {
    const size_t lines = (bytes + kLine - 1) / kLine;
    const size_t n = steps > 0 ? static_cast<size_t>(steps) : 1;
    per_step_ = (lines + n - 1) / n;
  }
  void Step() {
    for (size_t i = 0; i < per_step_ && next_ < end_; ++i, next_ += kLine) {
      _mm_prefetch(next_, _MM_HINT_T1);
    }
  }

 private:
  const char* next_;
  const char* end_;
  size_t per_step_ = 0;
};

// out[r*ld + c] = scale * <q_r, k_c> for R rows (stride h) and C keys (stride h).
template <int R, int C>
void ScoreBlock(const float* q, const float* k, int64_t h, float scale, float* out, int64_t ld) {
  __m256 acc[R * C];
#pragma GCC unroll 8
  for (int i = 0; i < R * C; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t d = 0; d < h; d += 8) {
    __m256 kv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) kv[c] = _mm256_loadu_ps(k + c * h + d);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * h + d);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r * C + c] = _mm256_fmadd_ps(qv, kv[c], acc[r * C + c]);
    }
  }
  // Lane order of the reductions is acc's: row-major over (row, key).
  float sums[R * C];
  if constexpr (R * C % 4 == 0) {
    int i = 0;
    for (; i + 8 <= R * C; i += 8) _mm256_storeu_ps(sums + i, HorizontalSums8(acc + i));
    for (; i < R * C; i += 4) _mm_storeu_ps(sums + i, HorizontalSums4(acc + i));
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < R * C; ++i) sums[i] = HorizontalSum(acc[i]);
  }
#pragma GCC unroll 12
  for (int i = 0; i < R * C; ++i) out[(i / C) * ld + i % C] = scale * sums[i];
}

template <int C>
void ScoreKeys(const float* q, int64_t rows, const float* k, int64_t h, float scale, float* out,
               int64_t ld) {
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    ScoreBlock<kRowBlock, C>(q + i * h, k, h, scale, out + i * ld, ld);
  }
  for (; i < rows; ++i) ScoreBlock<1, C>(q + i * h, k, h, scale, out + i * ld, ld);
}

// H is a multiple of 8 (the reference rejects other head sizes).
void Scores(const float* q, int64_t rows, const float* k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const float* prefetch, size_t prefetch_bytes) {
  Prefetcher ahead(prefetch, prefetch_bytes, (keys + 2) / 3);
  // Keys outer: three keys stay in L1 while every row of the tile meets them.
  int64_t j = 0;
  for (; j + 3 <= keys; j += 3) {
    ahead.Step();
    ScoreKeys<3>(q, rows, k + j * h, h, scale, scores + j, ld);
  }
  if (j + 2 <= keys) {
    ahead.Step();
    ScoreKeys<2>(q, rows, k + j * h, h, scale, scores + j, ld);
  } else if (j < keys) {
    ahead.Step();
    ScoreKeys<1>(q, rows, k + j * h, h, scale, scores + j, ld);
  }
}

// acc[r*h + 8v ..] += sum_j p[r*ld + j] * v[j*h + 8v ..] for R rows and V vectors of columns, the
// accumulators held in registers across all keys.
template <int R, int V>
void AccumulateBlock(const float* p, int64_t ld, const float* v, int64_t keys, int64_t h,
                     float* acc, Prefetcher& ahead) {
  __m256 sum[R * V];
#pragma GCC unroll 12
  for (int i = 0; i < R * V; ++i) sum[i] = _mm256_loadu_ps(acc + (i / V) * h + (i % V) * 8);
  for (int64_t j = 0; j < keys; ++j) {
    ahead.Step();
    __m256 vv[V];
#pragma GCC unroll 4
    for (int c = 0; c < V; ++c) vv[c] = _mm256_loadu_ps(v + j * h + c * 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p + r * ld + j);
#pragma GCC unroll 4
      for (int c = 0; c < V; ++c) sum[r * V + c] = _mm256_fmadd_ps(pr, vv[c], sum[r * V + c]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R * V; ++i) _mm256_storeu_ps(acc + (i / V) * h + (i % V) * 8, sum[i]);
}

template <int R>
void AccumulateRows(const float* p, int64_t ld, const float* v, int64_t keys, int64_t h, float* acc,
                    Prefetcher& ahead) {
  int64_t d = 0;
  for (; d + 24 <= h; d += 24) AccumulateBlock<R, 3>(p, ld, v + d, keys, h, acc + d, ahead);
  if (d + 16 <= h) {
    AccumulateBlock<R, 2>(p, ld, v + d, keys, h, acc + d, ahead);
    d += 16;
  }
  if (d < h) AccumulateBlock<R, 1>(p, ld, v + d, keys, h, acc + d, ahead);
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const float* v, int64_t keys, int64_t h,
                float* acc, const float* prefetch, size_t prefetch_bytes) {
  const int64_t passes = ((rows + kRowBlock - 1) / kRowBlock) * ((h + 23) / 24);
  Prefetcher ahead(prefetch, prefetch_bytes, passes * keys);
  int64_t i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    AccumulateRows<kRowBlock>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
  }
  for (; i < rows; ++i) AccumulateRows<1>(p + i * ld, ld, v, keys, h, acc + i * h, ahead);
}

float Max(const float* x, int64_t n) {
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

float ExpSum(float* x, int64_t n, float m) {
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

void Scale(float alpha, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

}  // namespace

const GqaFlashOps kGqaFlashOpsAvx2 = {&Scores, &Accumulate, &Max, &ExpSum, &Scale};

}  // namespace attnrt::cpu_x86
