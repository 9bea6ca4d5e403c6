// Register-blocked fp32 micro-kernels of the sparse MLA tile, written once over a small vector type
// (the ISA file's Vec, see the interface in sparse_mla_kernel.h) and instantiated by each ISA file
// for its Math::ScoreTile / Math::PvTile. Heads lie in vector lanes:
//   qt  [512][hp]   the query block transposed (hp = heads padded to Vec::kLanes, zero padding)
//   k   [rows][512] the decoded key tile, row-major (K = V in MLA: the same rows serve P·V), rows
//                   kTileStride floats apart
//   s/p [rows][hp]  scores, then the rounded probabilities, one row per key
//   o   [nh][512]   the fp32 output accumulators
// Scores: for each d, kHv head vectors of qt are loaded and kKb key values broadcast; kHv * kKb
// accumulators stay in registers across all 512 dims, and each lane sums its head's products in
// dim order (one FMA chain per (head, key), as the scalar build's loop). P·V: kHb heads × kDv
// d-vectors of O stay in registers across the tile's keys; per key, kDv vectors of the key row
// are loaded and P[j][h] broadcast. Included inside the ISA namespace (one copy per ISA build).
// The blocking comes from the ISA file's Cfg: kScoreHv (head vectors per score block, 1..4),
// kScoreKeys[v] (keys per block for v head vectors), kScoreTail (keys per tail block, dividing
// them; Math::kKeyPad), kScoreDims (dims per score pass), kPvHeads (1..8), kPvDv (d-vectors per
// P·V block), kPvKeys (keys per P·V chunk).
#pragma once

#include <cstdint>

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

constexpr int kTileDim = ATTNRT_SPARSE_MLA_HEAD_DIM;
// Floats between tile rows: 512 + 16, so that rows 2 KiB apart do not all map to the same few L1
// sets (a P·V pass reuses 64 rows × 256 bytes across every head block).
constexpr int kTileStride = kTileDim + 16;

template <class Vec, int kHv, int kKb>
inline void ScoreBlock(const float* qt, int hp, const float* k, int d0, int d1, float* s) {
  using V = typename Vec::V;
  constexpr int L = Vec::kLanes;
  V acc[kKb][kHv];
  for (int j = 0; j < kKb; ++j) {
    for (int v = 0; v < kHv; ++v) {
      acc[j][v] = d0 == 0 ? Vec::Zero() : Vec::Load(s + j * hp + v * L);
    }
  }
  for (int d = d0; d < d1; ++d) {
    V q[kHv];
    for (int v = 0; v < kHv; ++v) q[v] = Vec::Load(qt + d * hp + v * L);
    for (int j = 0; j < kKb; ++j) {
      const V b = Vec::Broadcast(k + j * kTileStride + d);
      for (int v = 0; v < kHv; ++v) acc[j][v] = Vec::Fma(q[v], b, acc[j][v]);
    }
  }
  for (int j = 0; j < kKb; ++j) {
    for (int v = 0; v < kHv; ++v) Vec::Store(s + j * hp + v * L, acc[j][v]);
  }
}

// Keys [0, rows) (rows a multiple of kTail, a divisor of kKb) against kHv head vectors starting at
// qt, dims [d0, d1) added to s (started at d0 = 0): blocks of kKb keys, then of kTail.
template <class Vec, int kHv, int kKb, int kTail>
inline void ScoreHeads(const float* qt, int hp, const float* k, int rows, int d0, int d1,
                       float* s) {
  int j = 0;
  for (; j + kKb <= rows; j += kKb) {
    ScoreBlock<Vec, kHv, kKb>(qt, hp, k + j * kTileStride, d0, d1, s + j * hp);
  }
  if constexpr (kTail < kKb) {
    for (; j < rows; j += kTail) {
      ScoreBlock<Vec, kHv, kTail>(qt, hp, k + j * kTileStride, d0, d1, s + j * hp);
    }
  }
}

// s[j][h] = q_h · k_j for j < rows (a multiple of Cfg::kScoreTail) and every padded head.
// Cfg::kScoreHv: head vectors per block (1..4); Cfg::kScoreKeys[v]: keys per block for v vectors;
// Cfg::kScoreDims: dims per pass, so that the pass's slice of qt and of the tile stay in L1 while
// every key block uses them (the sums continue through s between passes: the same dim order).
template <class Vec, class Cfg>
inline void ScoreTileBlocked(const float* qt, int hp, const float* k, int rows, float* s) {
  constexpr int L = Vec::kLanes;
  constexpr int H = Cfg::kScoreHv;
  const int nv = hp / L;
  for (int d0 = 0; d0 < kTileDim; d0 += Cfg::kScoreDims) {
    const int d1 = d0 + Cfg::kScoreDims;
    int v = 0;
    for (; v + H <= nv; v += H) {
      ScoreHeads<Vec, H, Cfg::kScoreKeys[H], Cfg::kScoreTail>(qt + v * L, hp, k, rows, d0, d1,
                                                              s + v * L);
    }
    const int rest = nv - v;
    const float* q = qt + v * L;
    float* sv = s + v * L;
    if constexpr (H > 3) {
      if (rest == 3)
        ScoreHeads<Vec, 3, Cfg::kScoreKeys[3], Cfg::kScoreTail>(q, hp, k, rows, d0, d1, sv);
    }
    if constexpr (H > 2) {
      if (rest == 2)
        ScoreHeads<Vec, 2, Cfg::kScoreKeys[2], Cfg::kScoreTail>(q, hp, k, rows, d0, d1, sv);
    }
    if constexpr (H > 1) {
      if (rest == 1)
        ScoreHeads<Vec, 1, Cfg::kScoreKeys[1], Cfg::kScoreTail>(q, hp, k, rows, d0, d1, sv);
    }
  }
}

// Scores for problems of few heads (at most half a vector's lanes: heads in lanes would leave
// most lanes padding), with the dims in lanes instead: qr [nh][512] the query rows (fp32); for each
// (key, head) one FMA chain per lane over dims d = lane (mod kLanes), then Vec::ReduceAdd. kNh
// heads × kKb keys of accumulators stay in registers across the 512 dims; s[j][h] is written for
// h < kNh, the padding lanes [kNh, hp) get 0 (what zero query lanes score). A (key, head) pair's
// arithmetic does not depend on the other heads or keys of its block.
template <class Vec, int kNh, int kKb>
inline void ScoreDotBlock(const float* qr, const float* k, int hp, float* s) {
  using V = typename Vec::V;
  constexpr int L = Vec::kLanes;
  V acc[kKb][kNh];
  for (int j = 0; j < kKb; ++j) {
    for (int h = 0; h < kNh; ++h) acc[j][h] = Vec::Zero();
  }
  for (int d = 0; d < kTileDim; d += L) {
    V q[kNh];
    for (int h = 0; h < kNh; ++h) q[h] = Vec::Load(qr + h * kTileDim + d);
    for (int j = 0; j < kKb; ++j) {
      const V x = Vec::Load(k + j * kTileStride + d);
      for (int h = 0; h < kNh; ++h) acc[j][h] = Vec::Fma(q[h], x, acc[j][h]);
    }
  }
  for (int j = 0; j < kKb; ++j) {
    for (int h = 0; h < kNh; ++h) s[j * hp + h] = Vec::ReduceAdd(acc[j][h]);
    for (int h = kNh; h < hp; ++h) s[j * hp + h] = 0.0f;
  }
}

// Keys [0, rows) in blocks of up to 16 accumulators (kKb keys), then one key at a time.
template <class Vec, int kNh>
inline void ScoreDotHeads(const float* qr, int hp, const float* k, int rows, float* s) {
  constexpr int kKb = kNh <= 2 ? 8 : kNh <= 4 ? 4 : 2;
  int j = 0;
  for (; j + kKb <= rows; j += kKb) {
    ScoreDotBlock<Vec, kNh, kKb>(qr, k + j * kTileStride, hp, s + j * hp);
  }
  for (; j < rows; ++j) ScoreDotBlock<Vec, kNh, 1>(qr, k + j * kTileStride, hp, s + j * hp);
}

constexpr int kMaxDotHeads = 8;

// s[j][h] = q_h · k_j for j < rows and h < nh (1 <= nh <= kMaxDotHeads), 0 for h in [nh, hp):
// the instantiation for nh heads (kNh counts up to it).
template <class Vec, int kNh = 1>
inline void ScoreTileFewHeads(const float* qr, int nh, int hp, const float* k, int rows, float* s) {
  if constexpr (kNh < kMaxDotHeads) {
    if (nh > kNh) return ScoreTileFewHeads<Vec, kNh + 1>(qr, nh, hp, k, rows, s);
  }
  ScoreDotHeads<Vec, kNh>(qr, hp, k, rows, s);
}

template <class Vec, int kHb, int kDv>
inline void PvBlock(const float* p, int hp, int j0, int j1, const float* k, const float* alpha,
                    float* o) {
  using V = typename Vec::V;
  constexpr int L = Vec::kLanes;
  V acc[kHb][kDv];
  for (int h = 0; h < kHb; ++h) {
    for (int v = 0; v < kDv; ++v) acc[h][v] = Vec::Load(o + h * kTileDim + v * L);
    if (j0 == 0) {
      const V a = Vec::Set1(alpha[h]);
      for (int v = 0; v < kDv; ++v) acc[h][v] = Vec::Mul(a, acc[h][v]);
    }
  }
  for (int j = j0; j < j1; ++j) {
    V x[kDv];
    for (int v = 0; v < kDv; ++v) x[v] = Vec::Load(k + j * kTileStride + v * L);
    for (int h = 0; h < kHb; ++h) {
      const V b = Vec::Broadcast(p + j * hp + h);
      for (int v = 0; v < kDv; ++v) acc[h][v] = Vec::Fma(b, x[v], acc[h][v]);
    }
  }
  for (int h = 0; h < kHb; ++h) {
    for (int v = 0; v < kDv; ++v) Vec::Store(o + h * kTileDim + v * L, acc[h][v]);
  }
}

// o[h] = alpha[h] o[h] + sum_{j < nt} p[j][h] k_j for h < nh: Cfg::kPvHeads heads (1..8) ×
// Cfg::kPvDv d-vectors per block (kPvDv * kLanes divides 512), keys in chunks of Cfg::kPvKeys;
// within a chunk the d-blocks are the outer loop, so that the chunk's d-slice of the key rows
// (kPvKeys × kPvDv vectors) and its probabilities stay in L1 while every head block uses them (O
// continues through memory between chunks: the same key order for every output element).
template <class Vec, class Cfg>
inline void PvTileBlocked(const float* p, int hp, int nt, const float* k, const float* alpha,
                          int nh, float* o) {
  constexpr int H = Cfg::kPvHeads, D = Cfg::kPvDv;
  for (int j0 = 0; j0 < nt; j0 += Cfg::kPvKeys) {
    const int j1 = j0 + Cfg::kPvKeys < nt ? j0 + Cfg::kPvKeys : nt;
    for (int d = 0; d < kTileDim; d += D * Vec::kLanes) {
      const float* kd = k + d;
      int h = 0;
      for (; h + H <= nh; h += H) {
        PvBlock<Vec, H, D>(p + h, hp, j0, j1, kd, alpha + h, o + h * kTileDim + d);
      }
      const float* ph = p + h;
      const float* ah = alpha + h;
      float* oh = o + h * kTileDim + d;
      // The tail: fewer heads, the same d-vectors.
      switch (nh - h) {
        case 7:
          if constexpr (H > 7) PvBlock<Vec, 7, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 6:
          if constexpr (H > 6) PvBlock<Vec, 6, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 5:
          if constexpr (H > 5) PvBlock<Vec, 5, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 4:
          if constexpr (H > 4) PvBlock<Vec, 4, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 3:
          if constexpr (H > 3) PvBlock<Vec, 3, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 2:
          if constexpr (H > 2) PvBlock<Vec, 2, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        case 1:
          if constexpr (H > 1) PvBlock<Vec, 1, D>(ph, hp, j0, j1, kd, ah, oh);
          break;
        default:
          break;
      }
    }
  }
}

// Per padded head: the max over keys [0, nt) of scale * s (a NaN score never raises it).
template <class Vec>
inline void TileMax(const float* s, int hp, int nt, float scale, float* out) {
  using V = typename Vec::V;
  constexpr int L = Vec::kLanes;
  const V sc = Vec::Set1(scale);
  for (int h = 0; h < hp; h += L) {
    V mx = Vec::Set1(-__builtin_inff());
    for (int j = 0; j < nt; ++j) mx = Vec::Max(Vec::Mul(sc, Vec::Load(s + j * hp + h)), mx);
    Vec::Store(out + h, mx);
  }
}

// The golden's online softmax step for one tile, heads in lanes (every lane the same arithmetic,
// so a head's result does not depend on its lane): s (raw dot products, rows [0, nt)) becomes the
// rounded P in place; m, l per padded head are updated and alpha = exp(m_old - m_new) written.
// Vec::Max(x, y) returns y when either is NaN (a NaN score never raises the max; a NaN sink stays).
template <class Vec>
inline void SoftmaxTile(float* s, int hp, int nt, float scale, bool fp16, float* m, float* l,
                        float* alpha) {
  using V = typename Vec::V;
  constexpr int L = Vec::kLanes;
  const V sc = Vec::Set1(scale);
  for (int h = 0; h < hp; h += L) {
    V mx = Vec::Load(m + h);
    for (int j = 0; j < nt; ++j) {
      const V x = Vec::Mul(sc, Vec::Load(s + j * hp + h));
      Vec::Store(s + j * hp + h, x);
      mx = Vec::Max(x, mx);
    }
    const V a = Vec::Exp(Vec::Sub(Vec::Load(m + h), mx));
    V sum = Vec::Zero();
    for (int j = 0; j < nt; ++j) {
      const V pj = Vec::Exp(Vec::Sub(Vec::Load(s + j * hp + h), mx));
      sum = Vec::Add(sum, pj);
      Vec::Store(s + j * hp + h, fp16 ? Vec::RoundFp16(pj) : Vec::RoundBf16(pj));
    }
    Vec::Store(l + h, Vec::Add(Vec::Mul(a, Vec::Load(l + h)), sum));
    Vec::Store(m + h, mx);
    Vec::Store(alpha + h, a);
  }
}

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
