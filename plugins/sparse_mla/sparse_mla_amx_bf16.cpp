// AMX-BF16 build of the sparse MLA kernel (compiled with the AVX512_BF16 flags plus -mamx-tile
// -mamx-bf16; chosen only when CPUID reports AMX-TILE and AMX-BF16, XCR0 shows the OS saves the
// tile state, Linux granted this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM), and only
// for bfloat16 queries). The arithmetic is the AVX512-BF16 kernel's: TDPBF16PS multiplies bf16
// pairs exactly and accumulates in fp32 with denormal inputs read as zero and denormal results
// flushed (docs/sparse-mla.md, bf16 kernels and Arm), on 16 × 16 fp32 tiles.
//   Scores, S (keys × heads) = K · Qᵀ: A = 16 keys × 32 dims straight from the bf16 key tile
//   (rows kTileStride apart),
//   B = 16 dim pairs × 16 heads of the repacked query ([256][hp] pairs), C = 16 keys × 16 heads,
//   stored as the body's s[j][h].
//   P·V, O (heads × dims) += Pᵀ · V: A = 16 heads × 32 keys of Pᵀ (bf16), B = 16 key pairs ×
//   16 dims of the repacked tile ([keys / 2][512] pairs), C = 16 heads × 16 dims of O.
// The tile configuration is loaded at each call and released after it (tiles are per thread).
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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#define SPARSE_MLA_ISA amx_bf16

#include "sparse_mla_format.h"
#include "sparse_mla_x86.h"
// After the two above (it uses their decoders).
#include "sparse_mla_bf16.h"

namespace attnrt::sparse_mla::amx_bf16 {

// Palette 1, tiles 0-7 of 16 rows × 64 bytes: 0-3 accumulators, 4 the A operand, 5-7 B operands.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

inline void LoadTiles() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

// s[kb..kb+16)[g * 16..) for kNg head groups of 16 (qp and s already offset to the first group).
template <int kNg>
inline void ScoreGroups(const uint32_t* qp, int hp, const uint16_t* tile, int rows, float* s) {
  const size_t stride = static_cast<size_t>(hp) * sizeof(uint32_t);
  for (int kb = 0; kb < rows; kb += 16) {
    _tile_zero(0);
    if constexpr (kNg > 1) _tile_zero(1);
    if constexpr (kNg > 2) _tile_zero(2);
    if constexpr (kNg > 3) _tile_zero(3);
    const uint16_t* a = tile + static_cast<size_t>(kb) * kTileStride;
    for (int ks = 0; ks < kDim / 32; ++ks) {
      _tile_loadd(4, a + ks * 32, kTileStride * sizeof(uint16_t));
      const uint32_t* b = qp + static_cast<size_t>(ks) * 16 * hp;
      _tile_loadd(5, b, stride);
      _tile_dpbf16ps(0, 4, 5);
      if constexpr (kNg > 1) {
        _tile_loadd(6, b + 16, stride);
        _tile_dpbf16ps(1, 4, 6);
      }
      if constexpr (kNg > 2) {
        _tile_loadd(7, b + 32, stride);
        _tile_dpbf16ps(2, 4, 7);
      }
      if constexpr (kNg > 3) {
        _tile_loadd(5, b + 48, stride);
        _tile_dpbf16ps(3, 4, 5);
      }
    }
    float* out = s + static_cast<size_t>(kb) * hp;
    _tile_stored(0, out, stride);
    if constexpr (kNg > 1) _tile_stored(1, out + 16, stride);
    if constexpr (kNg > 2) _tile_stored(2, out + 32, stride);
    if constexpr (kNg > 3) _tile_stored(3, out + 48, stride);
  }
}

// 16 output rows (o, row stride 512) += Pᵀ rows (pt, row stride kp) · V pairs (vt), 64 dims per
// step in four accumulators.
inline void PvGroup(const uint16_t* pt, int kp, const uint32_t* vt, float* o) {
  constexpr size_t kRow = kDim * sizeof(float);
  constexpr size_t kPairRow = kDim * sizeof(uint32_t);
  for (int d0 = 0; d0 < kDim; d0 += 64) {
    _tile_loadd(0, o + d0, kRow);
    _tile_loadd(1, o + d0 + 16, kRow);
    _tile_loadd(2, o + d0 + 32, kRow);
    _tile_loadd(3, o + d0 + 48, kRow);
    for (int ks = 0; ks < kp; ks += 32) {
      _tile_loadd(4, pt + ks, static_cast<size_t>(kp) * sizeof(uint16_t));
      const uint32_t* b = vt + static_cast<size_t>(ks / 2) * kDim + d0;
      _tile_loadd(5, b, kPairRow);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, b + 16, kPairRow);
      _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(7, b + 32, kPairRow);
      _tile_dpbf16ps(2, 4, 7);
      _tile_loadd(5, b + 48, kPairRow);
      _tile_dpbf16ps(3, 4, 5);
    }
    _tile_stored(0, o + d0, kRow);
    _tile_stored(1, o + d0 + 16, kRow);
    _tile_stored(2, o + d0 + 32, kRow);
    _tile_stored(3, o + d0 + 48, kRow);
  }
}

struct Math : Bf16Tile {
  static void ScoreTile(const float* qt, int hp, const uint16_t* tile, int rows, float* s) {
    const uint32_t* qp = RepackQuery(qt, hp);
    LoadTiles();
    const int groups = hp / 16;
    for (int g = 0; g < groups; g += 4) {
      const uint32_t* q = qp + g * 16;
      float* out = s + g * 16;
      switch (std::min(4, groups - g)) {
        case 4:
          ScoreGroups<4>(q, hp, tile, rows, out);
          break;
        case 3:
          ScoreGroups<3>(q, hp, tile, rows, out);
          break;
        case 2:
          ScoreGroups<2>(q, hp, tile, rows, out);
          break;
        default:
          ScoreGroups<1>(q, hp, tile, rows, out);
          break;
      }
    }
    _tile_release();
  }

  static void PvTile(const float* p, int hp, int nt, const uint16_t* tile, const float* alpha,
                     int nh, float* o) {
    // O rescaled by alpha first (the accumulator tiles start from it).
    for (int h = 0; h < nh; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h]);
      float* row = o + static_cast<size_t>(h) * kDim;
      for (int d = 0; d < kDim; d += 16)
        _mm512_storeu_ps(row + d, _mm512_mul_ps(a, _mm512_loadu_ps(row + d)));
    }
    // Keys padded to the 32 of one TDPBF16PS step: zero probabilities and zero value pairs.
    const int kp = (nt + 31) / 32 * 32;
    const int rows = (nt + kKeyPad - 1) / kKeyPad * kKeyPad;
    const int hr = (nh + 15) / 16 * 16;
    Scratch& scratch = ThreadScratch();
    if (scratch.pt.size() < static_cast<size_t>(hr) * kp)
      scratch.pt.resize(static_cast<size_t>(hr) * kp);
    // Pᵀ: row h holds the pairs (P[2t][h], P[2t + 1][h]), gathered 16 key pairs at a time
    // (keys >= nt and heads >= nh zero). P is bf16-exact: PairUp keeps each value's top half.
    auto* pt = reinterpret_cast<uint32_t*>(scratch.pt.data());
    const int kp2 = kp / 2;
    const __m512i step =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(2 * hp));
    for (int h = 0; h < hr; ++h) {
      uint32_t* row = pt + static_cast<size_t>(h) * kp2;
      if (h >= nh) {
        std::memset(row, 0, static_cast<size_t>(kp2) * sizeof(uint32_t));
        continue;
      }
      for (int t0 = 0; t0 < kp2; t0 += 16) {
        const int even = std::clamp((nt - 2 * t0 + 1) / 2, 0, 16);  // keys 2t < nt
        const int odd = std::clamp((nt - 2 * t0) / 2, 0, 16);       // keys 2t + 1 < nt
        const float* base = p + static_cast<size_t>(2 * t0) * hp + h;
        const __m512 lo = _mm512_mask_i32gather_ps(
            _mm512_setzero_ps(), static_cast<__mmask16>((1u << even) - 1), step, base, 4);
        const __m512 hi = _mm512_mask_i32gather_ps(
            _mm512_setzero_ps(), static_cast<__mmask16>((1u << odd) - 1), step, base + hp, 4);
        _mm512_storeu_si512(row + t0, PairUp(lo, hi));
      }
    }
    const uint32_t* vt = RepackValues(tile, rows / 2, kp / 2);
    LoadTiles();
    for (int h0 = 0; h0 < hr; h0 += 16) {
      float* out = o + static_cast<size_t>(h0) * kDim;
      if (h0 + 16 <= nh) {
        PvGroup(scratch.pt.data() + static_cast<size_t>(h0) * kp, kp, vt, out);
        continue;
      }
      // A partial group: through 16 rows of scratch (O has only nh rows).
      if (scratch.o.size() < 16 * static_cast<size_t>(kDim)) scratch.o.resize(16 * kDim);
      float* tmp = scratch.o.data();
      const size_t live = static_cast<size_t>(nh - h0) * kDim;
      std::memcpy(tmp, out, live * sizeof(float));
      std::memset(tmp + live, 0, (16 * kDim - live) * sizeof(float));
      PvGroup(scratch.pt.data() + static_cast<size_t>(h0) * kp, kp, vt, tmp);
      std::memcpy(out, tmp, live * sizeof(float));
    }
    _tile_release();
  }
};

}  // namespace attnrt::sparse_mla::amx_bf16

#include "sparse_mla_kernel.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {

int32_t RunAmxBf16(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                   char* error, size_t error_capacity) {
  return amx_bf16::Run(host, args, error, error_capacity);
}

}  // namespace attnrt::sparse_mla
