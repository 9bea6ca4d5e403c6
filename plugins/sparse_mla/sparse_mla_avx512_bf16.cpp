// AVX512-BF16 build of the sparse MLA kernel (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512bf16 -mfma -mf16c; chosen only when the probe reports AVX512_BF16 with the AVX-512 state
// saved by the OS, and only for bfloat16 queries). Every operand the golden multiplies is
// bf16-exact here: the query, the decoded keys (K = V) and the rounded probabilities P. VDPBF16PS
// multiplies bf16 pairs exactly and adds both products to an fp32 accumulator (the odd element's
// product first), so scores and P·V are the golden's arithmetic in another summation order, at
// twice the products per instruction of an fp32 FMA. The instruction ignores MXCSR: it reads
// denormal inputs (bf16 operands and the fp32 accumulator) as zero and flushes denormal results to
// zero (docs/sparse-mla.md, bf16 kernels and Arm).
//
// The tile holds bf16 keys (Math::KeyT = uint16_t), one row of 512 per key. Scores pair the dims:
// the query block repacked as [256][hp] 32-bit pairs (heads in lanes) against each key's dim pair
// broadcast from its row. P·V pairs the keys: the tile repacked as [key / 2][512] pairs (dims in
// lanes) against P[2t][h], P[2t + 1][h] broadcast as one 32-bit pair.
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
#include <cstring>
#include <vector>

#define SPARSE_MLA_ISA avx512_bf16

#include "sparse_mla_format.h"
#include "sparse_mla_x86.h"
// After the two above (it uses their decoders).
#include "sparse_mla_bf16.h"

namespace attnrt::sparse_mla::avx512_bf16 {

// s[j][h] for kHv head vectors × kKb keys: per dim pair, kHv query-pair vectors and one broadcast
// key pair per key.
template <int kHv, int kKb>
inline void ScoreBlock(const uint32_t* qp, int hp, const uint16_t* k, float* s) {
  __m512 acc[kKb][kHv];
  for (int j = 0; j < kKb; ++j) {
    for (int v = 0; v < kHv; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < kPairs; ++p) {
    __m512i q[kHv];
    for (int v = 0; v < kHv; ++v) q[v] = _mm512_loadu_si512(qp + p * hp + v * 16);
    for (int j = 0; j < kKb; ++j) {
      uint32_t pair;
      std::memcpy(&pair, k + j * kTileStride + 2 * p, 4);
      const __m512i b = _mm512_set1_epi32(static_cast<int>(pair));
      for (int v = 0; v < kHv; ++v) acc[j][v] = Dp(acc[j][v], q[v], b);
    }
  }
  for (int j = 0; j < kKb; ++j) {
    for (int v = 0; v < kHv; ++v) _mm512_storeu_ps(s + j * hp + v * 16, acc[j][v]);
  }
}

template <int kHv, int kKb>
inline void ScoreHeads(const uint32_t* qp, int hp, const uint16_t* k, int rows, float* s) {
  for (int j = 0; j < rows; j += kKb) ScoreBlock<kHv, kKb>(qp, hp, k + j * kTileStride, s + j * hp);
}

// o[h] = alpha[h] o[h] + sum_t P pair (t, h) · V pair t for kHb heads × kDv dim vectors.
template <int kHb, int kDv>
inline void PvBlock(const uint32_t* pp, int hp, int pairs, const uint32_t* vt, const float* alpha,
                    float* o) {
  __m512 acc[kHb][kDv];
  for (int h = 0; h < kHb; ++h) {
    const __m512 a = _mm512_set1_ps(alpha[h]);
    for (int v = 0; v < kDv; ++v)
      acc[h][v] = _mm512_mul_ps(a, _mm512_loadu_ps(o + h * kDim + v * 16));
  }
  for (int t = 0; t < pairs; ++t) {
    __m512i x[kDv];
    for (int v = 0; v < kDv; ++v) x[v] = _mm512_loadu_si512(vt + t * kDim + v * 16);
    for (int h = 0; h < kHb; ++h) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(pp[t * hp + h]));
      for (int v = 0; v < kDv; ++v) acc[h][v] = Dp(acc[h][v], x[v], b);
    }
  }
  for (int h = 0; h < kHb; ++h) {
    for (int v = 0; v < kDv; ++v) _mm512_storeu_ps(o + h * kDim + v * 16, acc[h][v]);
  }
}

template <int kHb>
inline void PvHeads(const uint32_t* pp, int hp, int pairs, const uint32_t* vt, const float* alpha,
                    float* o) {
  constexpr int kDv = 4;
  for (int d = 0; d < kDim; d += kDv * 16) PvBlock<kHb, kDv>(pp, hp, pairs, vt + d, alpha, o + d);
}

struct Math : Bf16Tile {
  // s[j][h] = sum_d qt[d][h] k_j[d]: the query repacked into dim pairs, then blocks of 4 head
  // vectors × 4 keys, 3 × 8, 2 × 8 or 1 × 16 (16-24 accumulators).
  static void ScoreTile(const float* qt, int hp, const uint16_t* tile, int rows, float* s) {
    const uint32_t* qp = RepackQuery(qt, hp);
    const int nv = hp / 16;
    int v = 0;
    for (; v + 4 <= nv; v += 4) ScoreHeads<4, 4>(qp + v * 16, hp, tile, rows, s + v * 16);
    switch (nv - v) {
      case 3:
        ScoreHeads<3, 8>(qp + v * 16, hp, tile, rows, s + v * 16);
        break;
      case 2:
        ScoreHeads<2, 8>(qp + v * 16, hp, tile, rows, s + v * 16);
        break;
      case 1:
        ScoreHeads<1, 16>(qp + v * 16, hp, tile, rows, s + v * 16);
        break;
      default:
        break;
    }
  }

  // o[h] = alpha[h] o[h] + sum_j p[j][h] k_j: P and the tile repacked into key pairs (a zero
  // partner for an odd last key), then blocks of 6 heads × 4 dim vectors (24 accumulators).
  static void PvTile(const float* p, int hp, int nt, const uint16_t* tile, const float* alpha,
                     int nh, float* o) {
    Scratch& scratch = ThreadScratch();
    const int pairs = (nt + 1) / 2;
    if (scratch.p.size() < static_cast<size_t>(pairs) * hp) {
      scratch.p.resize(static_cast<size_t>(pairs) * hp);
    }
    uint32_t* pp = scratch.p.data();
    for (int t = 0; t < pairs; ++t) {
      const bool odd_tail = 2 * t + 1 >= nt;
      for (int h = 0; h < hp; h += 16) {
        const __m512 lo = _mm512_loadu_ps(p + 2 * t * hp + h);
        const __m512 hi =
            odd_tail ? _mm512_setzero_ps() : _mm512_loadu_ps(p + (2 * t + 1) * hp + h);
        _mm512_storeu_si512(pp + t * hp + h, PairUp(lo, hi));
      }
    }
    const uint32_t* vt = RepackValues(tile, pairs, pairs);
    int h = 0;
    for (; h + 6 <= nh; h += 6) PvHeads<6>(pp + h, hp, pairs, vt, alpha + h, o + h * kDim);
    pp += h;
    alpha += h;
    o += h * kDim;
    switch (nh - h) {
      case 5:
        PvHeads<5>(pp, hp, pairs, vt, alpha, o);
        break;
      case 4:
        PvHeads<4>(pp, hp, pairs, vt, alpha, o);
        break;
      case 3:
        PvHeads<3>(pp, hp, pairs, vt, alpha, o);
        break;
      case 2:
        PvHeads<2>(pp, hp, pairs, vt, alpha, o);
        break;
      case 1:
        PvHeads<1>(pp, hp, pairs, vt, alpha, o);
        break;
      default:
        break;
    }
  }
};

}  // namespace attnrt::sparse_mla::avx512_bf16

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAvx512Bf16(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                      char* error, size_t error_capacity) {
  return avx512_bf16::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
