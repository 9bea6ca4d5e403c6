// AVX2 + FMA build of the sparse MLA kernel (compiled with -mavx2 -mfma -mf16c; chosen only when
// the probe reports them and the OS saves the YMM state): 8 heads per vector, register-blocked
// score and P·V micro-kernels of sparse_mla_tile.h within the 16 YMM registers.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define SPARSE_MLA_ISA avx2

#include "sparse_mla_format.h"
#include "sparse_mla_x86.h"

namespace attnrt::sparse_mla::avx2 {

struct Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static float ReduceAdd(V x) {  // the lanes' sum: halves, then pairs, then the last two
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static V Max(V x, V y) { return _mm256_max_ps(x, y); }  // y when either is NaN
  static V Exp(V x) { return Exp8(x); }
  static V RoundBf16(V x) { return RoundBf16x8(x); }
  static V RoundFp16(V x) { return RoundFp16x8(x); }
};

// Scores: 2 head vectors × 6 keys (12 accumulators, 2 loads and 6 broadcasts per dim), or one
// head vector × 12 keys, 2-key blocks for the tail; P·V: 6 heads × 2 d-vectors (12 accumulators).
struct Blocking {
  static constexpr int kScoreHv = 2;
  static constexpr int kScoreKeys[3] = {0, 12, 6};
  static constexpr int kScoreTail = 2;
  static constexpr int kScoreDims = 32, kPvKeys = 64;
  static constexpr int kPvHeads = 6, kPvDv = 2;
};

}  // namespace attnrt::sparse_mla::avx2

#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::avx2 {

struct Math {
  static constexpr int kLanes = Vec::kLanes;
  static constexpr int kKeyPad = 2;
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
  static void ScoreFewHeads(const float* qr, int nh, int hp, const float* tile, int rows,
                            float* s) {
    ScoreTileFewHeads<Vec>(qr, nh, hp, tile, rows, s);
  }
  static void PvTile(const float* p, int hp, int nt, const float* tile, const float* alpha, int nh,
                     float* o) {
    PvTileBlocked<Vec, Blocking>(p, hp, nt, tile, alpha, nh, o);
  }
};

}  // namespace attnrt::sparse_mla::avx2

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAvx2(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity) {
  return avx2::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
