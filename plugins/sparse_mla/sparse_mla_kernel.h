// The sparse MLA kernel body (the algorithm of CANN's golden, docs/sparse-mla.md), shared by every
// ISA build. Masks, index scan, token addressing, the online softmax, split-KV and the output
// rules are one code; the ISA file supplies the arithmetic through the tile interface below. The
// drivers on the host's pool (workers, split-KV passes and merge) are in sparse_mla_run.h.
//
// Per work unit (a query row and a range of heads, or a part of the row's keys under split-KV):
// the row's keys are the ori window [lo, hi) in position order, then the selected compressed
// tokens in index order (HCA: the causal prefix; CSA: the golden's top-k scan); with
// topk_value_mode 3 (global slot ids) the row's ori_sparse_indices entries, then its
// cmp_sparse_indices entries, -1 skipped. Keys are decoded to
// bf16-exact floats (fp16 for an fp16 quant_mode 3 problem) in tiles of 128, and each head runs the
// golden's tiled online softmax: m starts at the sink (or -inf), l at 1 (or 0); per tile
// m' = max(m, max s), P = exp(s - m'), l = exp(m - m') l + sum P, O = exp(m - m') O + sum round(P)
// v. out = round(O / l), lse = m + ln l. Rows with no key, NaN scores and non-finite sinks:
// docs/sparse-mla.md.
//
// ---- The tile interface: what an ISA file provides -------------------------------------------
// The ISA file defines SPARSE_MLA_ISA (a namespace name, so instantiations never merge at link
// time), includes sparse_mla_format.h, defines in namespace attnrt::sparse_mla::SPARSE_MLA_ISA:
//
//   struct Vec {            // one vector of fp32 lanes; heads lie in lanes in the softmax
//     using V = ...;  static constexpr int kLanes;     // 1 (scalar), 4 (NEON), 8 (AVX2), 16
//     Zero, Set1(float), Load/Store(float*) (unaligned), Broadcast(const float*),
//     Fma(a, b, c) = a*b + c, Add, Sub, Mul,
//     Max(x, y): y when either is NaN (x86 MAXPS), Exp (NaN stays NaN, exp(-inf) = 0,
//       exp(0) = 1 exactly, <= 2 ulp), RoundBf16 / RoundFp16 (nearest even, kept as fp32)
//   };
//   struct Math {
//     static constexpr int kLanes = Vec::kLanes;
//     static constexpr int kKeyPad;   // tile rows are computed in multiples of this (<= 128);
//                                     // rows [nt, padded) are zero keys whose scores are unused
//     // The tile: rows of 512 KeyT values, row j = decoded key j (K = V), row stride kTileStride
//     // (sparse_mla_tile.h: 528, against L1 set conflicts).
//     using KeyT = float;             // a bf16 Math may store uint16_t pairs instead
//     // Decoding one token into tile row `dst` (values exactly the scalar decoders' of
//     // sparse_mla_format.h, as fp32 or as the Math's KeyT):
//     static void DecodeNope(const uint8_t* fp8, const float* scales7, KeyT* dst);  // dims 0..447
//     static void DecodeBf16(const uint8_t* src, int n, KeyT* dst);
//     static void DecodeFp16(const uint8_t* src, int n, KeyT* dst);
//     static void DecodeTq4(const uint8_t* codes256, float scale, bool fp16, KeyT* dst);
//     static void ZeroRow(KeyT* dst);
//     // Scores: s[j * hp + h] = sum_d qt[d * hp + h] * k_j[d], j < rows (a multiple of kKeyPad),
//     // h < hp (heads padded to kLanes; qt's padding lanes are zero). Unscaled.
//     static void ScoreTile(const float* qt, int hp, const KeyT* tile, int rows, float* s);
//     // Optional, for problems of at most min(kLanes / 2, 8) heads: the same scores from the
//     // query rows qr[h][d] (fp32, h < nh), padding lanes [nh, hp) set to 0 (ScoreTileFewHeads).
//     static void ScoreFewHeads(const float* qr, int nh, int hp, const KeyT* tile, int rows,
//                               float* s);
//     // P·V with the rescale: o[h][d] = alpha[h] * o[h][d] + sum_{j < nt} p[j * hp + h] * k_j[d]
//     // for h < nh (o row stride 512); p holds round(P) (bf16- or fp16-exact floats).
//     static void PvTile(const float* p, int hp, int nt, const KeyT* tile, const float* alpha,
//                        int nh, float* o);
//   };
// then includes this file. sparse_mla_tile.h has register-blocked ScoreTile / PvTile written over
// Vec (ScoreTileBlocked, PvTileBlocked; blocking from a Cfg of the ISA file); a Math may use its
// own instead (e.g. a bf16 Math storing the tile as bf16 pairs for a dot-product instruction and
// repacking p). The query layout qt[d][hp] (fp32, heads in lanes) and the softmax (SoftmaxTile over
// Vec) are the body's. Every lane computes its head with the same operations, so a head's result
// never depends on which heads share its vectors: outputs do not depend on the partition.
// ----------------------------------------------------------------------------------------------
#ifndef SPARSE_MLA_ISA
#error "define SPARSE_MLA_ISA before including sparse_mla_kernel.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "attnrt/plugin.h"
#include "sparse_mla_tile.h"

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

constexpr int kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int64_t kTile = 128;  // the golden's S2 tile
constexpr int kAhead = 4;       // keys between a token's L1 prefetch and its decoding
constexpr float kInf = std::numeric_limits<float>::infinity();
static_assert(kTile % Math::kKeyPad == 0, "kKeyPad must divide the tile");

struct Row {
  bool valid = false;
  int64_t b = 0;
  int64_t lo = 0, hi = 0;  // ori window
};

// The softmax state of one (row, head range, key range): O (nh rows of 512), m and l per head.
struct Partial {
  float* o = nullptr;
  float* m = nullptr;
  float* l = nullptr;
};

enum class Pass { kAll, kScores, kAttend };

// One part of a split row: its raw scores and per-tile maxima (pass 1), its state (pass 2).
struct SplitPart {
  int64_t tiles = 0;
  std::vector<float> scores;  // [tile][kTile][hp]
  std::vector<float> maxima;  // [tile][hp]: max of the scaled scores (NaN ignored)
  Partial state;
};

// A token's bytes: the record (and, for quant_mode 2 in blocks, its scale record).
struct TokenRef {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
};

// Fields of ABI 1.6 read only when the core's structs hold them (a core built for 1.5 or older
// passes shorter structs and never a problem that needs them).
inline bool HasAbi16Fields(const attnrt_sparse_mla_args& a) {
  return a.problem->struct_size >=
             offsetof(attnrt_sparse_mla_problem, ori_topk) + sizeof(int64_t) &&
         a.struct_size >= offsetof(attnrt_sparse_mla_args, ori_sparse_indices) + sizeof(void*);
}

// Bytes from one PA_BBND block to the next: the problem's block stride, or the compact size.
inline int64_t BlockStride(const attnrt_sparse_mla_args& a, bool cmp, int64_t compact) {
  if (!HasAbi16Fields(a)) return compact;
  const int64_t stride = cmp ? a.problem->cmp_block_stride : a.problem->ori_block_stride;
  return stride > 0 ? stride : compact;
}

// Logical position of a physical slot (topk_value_mode 2) through the batch's used cmp blocks,
// or -1 when no used block of the batch holds it.
inline int64_t PhysicalToLogical(const attnrt_sparse_mla_args& a, int64_t b, int64_t slot) {
  const attnrt_sparse_mla_problem& p = *a.problem;
  const int64_t bs = p.cmp_block_size;
  const int64_t block = slot / bs;
  const int64_t used = (int64_t{attnrt_sparse_mla_batch_at(&a, b)->cmp_len} + bs - 1) / bs;
  const int32_t* table = a.cmp_block_table + b * p.cmp_max_blocks;
  for (int64_t col = 0; col < used; ++col) {
    if (table[col] == block) return col * bs + slot % bs;
  }
  return -1;
}

template <typename T>
class AlignedBuffer {
 public:
  void Resize(size_t n) {
    if (n <= size_) return;
    std::free(data_);
    data_ = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = n;
  }
  ~AlignedBuffer() { std::free(data_); }
  T* data() { return data_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// Whether a Math scores few-head problems with the dims in lanes (ScoreFewHeads).
template <class M>
constexpr bool ScoresFewHeads() {
  return requires(const float* q, const typename M::KeyT* t, float* s) {
    M::ScoreFewHeads(q, 1, 1, t, 2, s);
  };
}
constexpr bool kMathScoresFewHeads = ScoresFewHeads<Math>();

inline int64_t PadHeads(int64_t nh) {
  return (nh + Math::kLanes - 1) / Math::kLanes * Math::kLanes;
}

class Worker {
 public:
  explicit Worker(const attnrt_sparse_mla_args& args)
      : a_(args), p_(*args.problem), attr_(p_.attributes) {
    fp16_ = p_.q_dtype.code == ATTNRT_DTYPE_CODE_FLOAT;
    slots_ = attr_.topk_value_mode == 3 && HasAbi16Fields(args);
    // Decided for the problem, not per head group: a head's bits never depend on the partition.
    few_heads_ =
        kMathScoresFewHeads && p_.num_heads <= std::min<int64_t>(Math::kLanes / 2, kMaxDotHeads);
    if (attr_.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
      ori_stride_ =
          BlockStride(args, false, p_.ori_block_size * TokenBytes(attr_.quant_mode, false));
      cmp_stride_ = BlockStride(args, true, p_.cmp_block_size * TokenBytes(attr_.quant_mode, true));
    }
    const int64_t hp = PadHeads(p_.num_heads);
    tile_.Resize(static_cast<size_t>(kTile) * kTileStride);
    qt_.Resize(static_cast<size_t>(hp) * kD);
    s_.Resize(static_cast<size_t>(kTile * hp));
    o_.Resize(static_cast<size_t>(p_.num_heads) * kD);
    state_.Resize(static_cast<size_t>(3 * hp));
  }

  // Heads [h0, h1) of `row` over all its keys, written to the outputs.
  void RunHeads(int64_t row, int64_t h0, int64_t h1) {
    Row r;
    int64_t i = 0;
    if (!Locate(row, &r, &i)) {
      WriteZero(row, h0, h1);
      return;
    }
    Select(&r, i, Batch(r.b));
    const int64_t hp = PadHeads(h1 - h0);
    SplitPart whole;
    whole.state = {o_.data(), state_.data(), state_.data() + hp};
    Compute(row, r, h0, h1, 0, NumKeys(r), true, nullptr, Pass::kAll, whole);
    Finish(row, h0, h1, whole.state);
  }

  // Split-KV (docs/sparse-mla.md): part `part` of `parts` of the row's key tiles for heads
  // [h0, h1). Pass 1 (kScores) stores the part's raw scores and per-tile maxima in `split`; pass 2
  // (kAttend) starts from m = the running max the golden has at the part's first tile (the sink
  // and every earlier part's tile maxima, `m_start`), so every P is the golden's, and leaves the
  // part's O, m, l in `split.state` (l and O from 0, the sink's 1 in part 0). False for a row with
  // no output.
  bool RunPart(int64_t row, int64_t h0, int64_t h1, int64_t part, int64_t parts, Pass pass,
               const float* m_start, SplitPart& split) {
    Row r;
    int64_t i = 0;
    if (!Locate(row, &r, &i)) return false;
    Select(&r, i, Batch(r.b));
    const int64_t n = NumKeys(r);
    const int64_t tiles = (n + kTile - 1) / kTile;
    const int64_t k0 = std::min(n, tiles * part / parts * kTile);
    const int64_t k1 = std::min(n, tiles * (part + 1) / parts * kTile);
    const int64_t hp = PadHeads(h1 - h0);
    if (pass == Pass::kScores) {
      split.tiles = (k1 - k0 + kTile - 1) / kTile;
      split.scores.resize(static_cast<size_t>(split.tiles * kTile * hp));
      split.maxima.resize(static_cast<size_t>(split.tiles * hp));
    }
    Compute(row, r, h0, h1, k0, k1, part == 0, m_start, pass, split);
    return true;
  }

  // Split-KV, phase 2: the LSE merge of the parts (m = max m_i, l = sum w_i l_i, O = sum w_i O_i,
  // w_i = exp(m_i - m)), then the outputs as for an unsplit row.
  void MergeParts(int64_t row, int64_t h0, int64_t h1, const SplitPart* split, int64_t n) {
    Row r;
    int64_t i = 0;
    if (!Locate(row, &r, &i)) {
      WriteZero(row, h0, h1);
      return;
    }
    const int64_t nh = h1 - h0;
    Partial out{o_.data(), state_.data(), state_.data() + PadHeads(nh)};
    auto part = [&](int64_t k) -> const Partial& { return split[k].state; };
    for (int64_t h = 0; h < nh; ++h) {
      float m = part(0).m[h];
      for (int64_t k = 1; k < n; ++k) m = std::max(m, part(k).m[h]);
      float l = 0.0f;
      float* o = out.o + h * kD;
      std::fill(o, o + kD, 0.0f);
      for (int64_t k = 0; k < n; ++k) {
        // m_i == m also for m = -inf (a part with no key): weight 1 of a zero O and l.
        const float w = part(k).m[h] == m ? 1.0f : std::exp(part(k).m[h] - m);
        l += w * part(k).l[h];
        const float* ok = part(k).o + h * kD;
        for (int d = 0; d < kD; ++d) o[d] += w * ok[d];
      }
      out.m[h] = m;
      out.l[h] = l;
    }
    Finish(row, h0, h1, out);
  }

 private:
  int64_t NumKeys(const Row& r) const { return r.hi - r.lo + static_cast<int64_t>(cmp_.size()); }

  // The online softmax over keys [k0, k1) (tile-aligned at k0) for heads [h0, h1) into
  // split.state (kAll, kAttend: m from m_start when given), or the raw scores and tile maxima
  // into split (kScores).
  void Compute(int64_t row, const Row& r, int64_t h0, int64_t h1, int64_t k0, int64_t k1,
               bool with_sink, const float* m_start, Pass pass, SplitPart& split) {
    const Partial st = split.state;
    const attnrt_sparse_mla_batch& x = Batch(r.b);
    const int64_t n_ori = r.hi - r.lo;
    const int nh = static_cast<int>(h1 - h0);
    const int hp = static_cast<int>(PadHeads(nh));
    // q rows to fp32 (exact), transposed: qt[d][h], padding heads zero. In blocks of kQBlock dims,
    // so the stores of a block (kQBlock * hp floats) stay in L1: qt itself (512 * hp floats) does
    // not fit, and the transpose cost as much as the scores of a 128-key row before. Few-head
    // problems keep the rows as they are (qr[h][d], for ScoreFewHeads).
    const uint16_t* q = static_cast<const uint16_t*>(a_.q) + (row * p_.num_heads + h0) * kD;
    float* qt = qt_.data();
    constexpr int kQBlock = 16;
    if (few_heads_) {
      for (int i = 0; i < nh * kD; ++i) qt[i] = fp16_ ? Fp16ToFloat(q[i]) : Bf16ToFloat(q[i]);
    }
    for (int d0 = 0; d0 < kD && !few_heads_; d0 += kQBlock) {
      float* block = qt + d0 * hp;
      for (int h = 0; h < nh; ++h) {
        const uint16_t* src = q + h * kD + d0;
        if (fp16_) {
          for (int j = 0; j < kQBlock; ++j) block[j * hp + h] = Fp16ToFloat(src[j]);
        } else {
          for (int j = 0; j < kQBlock; ++j) block[j * hp + h] = Bf16ToFloat(src[j]);
        }
      }
      for (int j = 0; j < kQBlock; ++j) {
        for (int h = nh; h < hp; ++h) block[j * hp + h] = 0.0f;
      }
    }
    float* alpha = state_.data() + 2 * hp;
    if (pass != Pass::kScores) {
      std::fill_n(st.o, static_cast<size_t>(nh) * kD, 0.0f);  // nh >= 1
      for (int h = 0; h < hp; ++h) {
        const bool sink = with_sink && a_.sinks != nullptr && h < nh;
        st.m[h] = m_start != nullptr ? m_start[h] : sink ? a_.sinks[h0 + h] : -kInf;
        st.l[h] = sink ? 1.0f : 0.0f;
      }
    }
    auto token = [&](int64_t key) {
      if (slots_) {
        return key < n_ori
                   ? Slot(a_.ori_kv, p_.ori_block_size, ori_stride_, ori_[key], false)
                   : Slot(a_.cmp_kv, p_.cmp_block_size, cmp_stride_, cmp_[key - n_ori], true);
      }
      return key < n_ori ? Ori(r.b, r.lo + key, x) : Cmp(r.b, cmp_[key - n_ori], x);
    };
    for (int64_t t0 = k0; t0 < k1; t0 += kTile) {
      const int nt = static_cast<int>(std::min(kTile, k1 - t0));
      const int rows = (nt + Math::kKeyPad - 1) / Math::kKeyPad * Math::kKeyPad;
      typename Math::KeyT* tile = tile_.data();
      for (int j = 0; j < nt; ++j) {
        const int64_t key = t0 + j;
        if (j + kAhead < nt) Prefetch<3>(token(key + kAhead), key + kAhead >= n_ori);  // to L1
        Decode(token(key), key >= n_ori, tile + j * kTileStride);
      }
      for (int j = nt; j < rows; ++j) Math::ZeroRow(tile + j * kTileStride);
      // The next tile's token rows (gathered through the indices: no hardware prefetcher follows
      // them) are fetched toward L2 while this tile computes.
      const int64_t next_end = std::min(k1, t0 + 2 * kTile);
      for (int64_t key = t0 + kTile; key < next_end; ++key) Prefetch<2>(token(key), key >= n_ori);
      const int64_t t = (t0 - k0) / kTile;
      float* s = pass == Pass::kAll ? s_.data() : split.scores.data() + t * kTile * hp;
      if (pass != Pass::kAttend) Score(qt, nh, hp, tile, rows, s);
      if (pass == Pass::kScores) {
        TileMax<Vec>(s, hp, nt, attr_.softmax_scale, split.maxima.data() + t * hp);
        continue;
      }
      SoftmaxTile<Vec>(s, hp, nt, attr_.softmax_scale, fp16_, st.m, st.l, alpha);
      Math::PvTile(s, hp, nt, tile, alpha, nh, st.o);
    }
  }

  template <class M = Math>
  void Score(const float* q, int nh, int hp, const typename M::KeyT* tile, int rows,
             float* s) const {
    if constexpr (ScoresFewHeads<M>()) {
      if (few_heads_) return M::ScoreFewHeads(q, nh, hp, tile, rows, s);
    }
    M::ScoreTile(q, hp, tile, rows, s);
  }

  // attn_out and softmax_lse of heads [h0, h1) from the final state.
  void Finish(int64_t row, int64_t h0, int64_t h1, Partial st) const {
    uint16_t* out = static_cast<uint16_t*>(a_.attn_out) + (row * p_.num_heads + h0) * kD;
    for (int64_t h = 0; h < h1 - h0; ++h) {
      const float* oh = st.o + h * kD;
      uint16_t* dst = out + h * kD;
      const float l = st.l[h];
      // Non-finite sinks and scores (docs/sparse-mla.md): decided once per (row, head).
      const float sink = a_.sinks != nullptr ? a_.sinks[h0 + h] : 0.0f;
      float lse = st.m[h] + std::log(l);
      if (a_.sinks != nullptr && !(sink < kInf)) {  // NaN or +inf: the sink is the answer
        lse = sink;
        WriteConstant(dst, sink == kInf ? 0.0f : sink);
      } else if (!(l == l)) {  // a NaN score (or +inf: inf - inf)
        lse = l;
        WriteConstant(dst, l);
      } else if (!(l > 0.0f)) {  // no key and no sink: weight 0 in an LSE merge
        lse = -kInf;
        WriteConstant(dst, 0.0f);
      } else if (fp16_) {
        const float inv = 1.0f / l;
        for (int d = 0; d < kD; ++d) dst[d] = FloatToFp16(oh[d] * inv);
      } else {
        StoreBf16Row(oh, 1.0f / l, dst);
      }
      if (a_.softmax_lse != nullptr) a_.softmax_lse[row * p_.num_heads + h0 + h] = lse;
    }
  }

  // dst[d] = FloatToBf16(o[d] * inv) for the 512 values of a head, written branch-free so that the
  // compiler vectorizes it (the scalar conversion cost a sixth of a 128-key row).
  static void StoreBf16Row(const float* o, float inv, uint16_t* dst) {
    for (int d = 0; d < kD; ++d) {
      uint32_t x;
      const float v = o[d] * inv;
      std::memcpy(&x, &v, 4);
      const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
      const uint32_t special = (x >> 16) | ((x & 0xFFFFu) != 0 ? 0x40u : 0u);  // inf, NaN
      dst[d] = static_cast<uint16_t>((x & 0x7F800000u) == 0x7F800000u ? special : rounded);
    }
  }

  // Row -> (batch, i) and the ori window; false for rows with no output (zeroed).
  bool Locate(int64_t row, Row* r, int64_t* i_out) const {
    int64_t b = 0, i = 0;
    if (attr_.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
      // Batches are ordered by q_start; the last batch whose start is <= row.
      int64_t lo = 0, hi = p_.batch_size;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (Batch(mid).q_start <= row)
          lo = mid;
        else
          hi = mid;
      }
      // Empty batches share a start: skip forward to the one that holds the row.
      b = lo;
      while (b < p_.batch_size && Batch(b).q_start + Batch(b).q_capacity <= row) ++b;
      if (b >= p_.batch_size || Batch(b).q_start > row) return false;
      i = row - Batch(b).q_start;
    } else {
      b = row / p_.q_rows;
      i = row % p_.q_rows;
    }
    const attnrt_sparse_mla_batch& x = Batch(b);
    if (i >= x.s1) return false;
    if (slots_) {  // global slot ids: no mask; Select fills the window [0, ori entries)
      r->b = b;
      r->valid = true;
      *i_out = i;
      return true;
    }
    const int64_t thr = int64_t{x.s2} - x.s1 + i + 1;  // right-down alignment
    if (thr <= 0) return false;
    r->b = b;
    r->lo = 0;
    r->hi = x.s2;
    if (attr_.ori_mask_mode == ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW) {  // ori window
      r->lo = attr_.ori_win_left == -1 ? 0 : std::max<int64_t>(thr - 1 - attr_.ori_win_left, 0);
      r->hi = attr_.ori_win_right == -1 ? x.s2 : std::min<int64_t>(thr + attr_.ori_win_right, x.s2);
    } else if (attr_.ori_mask_mode == ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL) {
      r->hi = std::min<int64_t>(thr, x.s2);
    }
    r->hi = std::max(r->hi, r->lo);
    r->valid = true;
    *i_out = i;
    return true;
  }

  // The compressed keys of the row (cmp mask, top-k scan), duplicates kept, in index order. Global
  // slot ids: the row's ori and cmp slots (-1 skipped), the ori window [0, ori slots).
  void Select(Row* r, int64_t i, const attnrt_sparse_mla_batch& x) {
    cmp_.clear();
    if (slots_) {
      const int64_t q_row = x.q_start + i;
      ori_.clear();
      const int32_t* ori = a_.ori_sparse_indices + q_row * p_.ori_topk;
      for (int64_t k = 0; k < p_.ori_topk; ++k) {
        if (ori[k] != -1) ori_.push_back(ori[k]);
      }
      r->lo = 0;
      r->hi = static_cast<int64_t>(ori_.size());
      if (p_.scenario == ATTNRT_SPARSE_MLA_SWA) return;
      const int32_t* cmp = a_.cmp_sparse_indices + q_row * p_.topk;
      for (int64_t k = 0; k < p_.topk; ++k) {
        if (cmp[k] != -1) cmp_.push_back(cmp[k]);
      }
      return;
    }
    if (p_.scenario == ATTNRT_SPARSE_MLA_SWA) return;
    int64_t n = int64_t{x.s2} / attr_.cmp_ratio;
    if (attr_.cmp_mask_mode == ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL) {
      const int64_t t = int64_t{x.cmp_total} - x.s1 + i + 1;
      n = t >= 0 ? t / attr_.cmp_ratio : -((-t + attr_.cmp_ratio - 1) / attr_.cmp_ratio);
    }
    n = std::clamp<int64_t>(n, 0, x.cmp_len);
    if (p_.scenario == ATTNRT_SPARSE_MLA_HCA) {
      for (int64_t j = 0; j < n; ++j) cmp_.push_back(j);
      return;
    }
    const int64_t q_row = x.q_start + i;
    const int32_t* idx = a_.cmp_sparse_indices + q_row * p_.topk;
    const int64_t count = std::min<int64_t>(p_.topk, n);
    for (int64_t k = 0; k < count; ++k) {
      int64_t v = idx[k];
      if (v == -1) break;
      if (attr_.topk_value_mode == 2) v = PhysicalToLogical(a_, r->b, v);
      if (v < 0 || v >= n) continue;
      cmp_.push_back(v);
    }
  }

  // Logical token j of a KV side (PA: through the block table).
  TokenRef Ori(int64_t b, int64_t j, const attnrt_sparse_mla_batch& x) const {
    return Side(a_.ori_kv, a_.ori_block_table, p_.ori_block_size, p_.ori_max_blocks, x.ori_start, b,
                j, false);
  }
  TokenRef Cmp(int64_t b, int64_t j, const attnrt_sparse_mla_batch& x) const {
    return Side(a_.cmp_kv, a_.cmp_block_table, p_.cmp_block_size, p_.cmp_max_blocks, x.cmp_start, b,
                j, true);
  }

  TokenRef Side(const uint8_t* base, const int32_t* table, int64_t bs, int64_t max_blocks,
                int64_t start, int64_t b, int64_t j, bool cmp) const {
    const int qm = attr_.quant_mode;
    const int64_t token_bytes = TokenBytes(qm, cmp);
    if (attr_.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
      return {base + (start + j) * token_bytes, nullptr};
    }
    return InBlock(base, bs, cmp ? cmp_stride_ : ori_stride_, table[b * max_blocks + j / bs],
                   j % bs, cmp);
  }

  // Global slot id block * bs + offset of a PA_BBND cache.
  TokenRef Slot(const uint8_t* base, int64_t bs, int64_t block_stride, int64_t slot,
                bool cmp) const {
    return InBlock(base, bs, block_stride, slot / bs, slot % bs, cmp);
  }

  // Token `off` of PA_BBND block `block` (blocks block_stride bytes apart).
  TokenRef InBlock(const uint8_t* base, int64_t bs, int64_t block_stride, int64_t block,
                   int64_t off, bool cmp) const {
    const int qm = attr_.quant_mode;
    const int64_t token_bytes = TokenBytes(qm, cmp);
    const uint8_t* block_base = base + block * block_stride;
    if (qm != 2) return {block_base + off * token_bytes, nullptr};
    // quant_mode 2: feature records (nope e4m3[448] | rope bf16[64]), then scale records.
    return {block_base + off * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES,
            block_base + bs * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES +
                off * ATTNRT_SPARSE_MLA_MODE2_SCALE_BYTES};
  }

  // GCC 12 drops __builtin_prefetch calls in this body at -O1 and above (the built library had
  // no prefetch instruction at all), so on x86-64 the instructions are written out.
  template <int kLocality>
  static void PrefetchLine(const uint8_t* p) {
#if defined(__x86_64__)
    if constexpr (kLocality == 3) {
      __asm__ volatile("prefetcht0 %0" : : "m"(*p));
    } else {
      __asm__ volatile("prefetcht1 %0" : : "m"(*p));
    }
#else
    __builtin_prefetch(p, 0, kLocality);
#endif
  }

  template <int kLocality>
  void Prefetch(TokenRef t, bool cmp) const {
    const int qm = attr_.quant_mode;
    const int64_t bytes = qm == 2 ? ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES : TokenBytes(qm, cmp);
    for (int64_t k = 0; k < bytes; k += 64) PrefetchLine<kLocality>(t.data + k);
    PrefetchLine<kLocality>(t.data + bytes - 1);
    if (t.scale != nullptr) PrefetchLine<kLocality>(t.scale);
  }

  // One token into a tile row: quant_mode 1, quant_mode 2 (feature + e8m0 scale records),
  // quant_mode 3 ori (16-bit, q's dtype) and cmp (TQ4) tokens.
  void Decode(TokenRef t, bool cmp, typename Math::KeyT* dst) const {
    const int qm = attr_.quant_mode;
    constexpr int kNope = ATTNRT_SPARSE_MLA_NOPE_DIM, kRope = ATTNRT_SPARSE_MLA_ROPE_DIM;
    if (qm == 2 && t.scale != nullptr) {
      float scales[7];
      for (int g = 0; g < 7; ++g) {
        // e8m0: 2^(e - 127) built from its bits (e = 0: the subnormal 2^-127), 0xFF NaN.
        const uint32_t e = t.scale[g];
        const uint32_t bits = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : e << 23;
        std::memcpy(&scales[g], &bits, 4);
      }
      Math::DecodeNope(t.data, scales, dst);
      Math::DecodeBf16(t.data + kNope, kRope, dst + kNope);
      return;
    }
    if (qm == 1) {
      float scales[7];
      for (int g = 0; g < 7; ++g) scales[g] = Bf16ToFloat(LoadU16(t.data + 576 + 2 * g));
      Math::DecodeNope(t.data + 128, scales, dst);
      Math::DecodeBf16(t.data, kRope, dst + kNope);
      return;
    }
    if (!cmp) {
      if (fp16_) {
        Math::DecodeFp16(t.data, kD, dst);
      } else {
        Math::DecodeBf16(t.data, kD, dst);
      }
      return;
    }
    // TQ4: byte t holds dim 2t in its low nibble, 2t+1 in its high nibble (CANN's TQ4 format).
    Math::DecodeTq4(t.data, Fp16ToFloat(LoadU16(t.data + 256)), fp16_, dst);
  }

  // A row that sees no key: attn_out 0 and softmax_lse -inf (an LSE merge weights it 0), or with
  // sinks the sink alone: lse = sink, attn_out 0 (NaN for a NaN sink).
  void WriteZero(int64_t row, int64_t h0, int64_t h1) const {
    uint16_t* out = static_cast<uint16_t*>(a_.attn_out) + (row * p_.num_heads + h0) * kD;
    for (int64_t h = h0; h < h1; ++h) {
      const float sink = a_.sinks != nullptr ? a_.sinks[h] : -kInf;
      WriteConstant(out + (h - h0) * kD, sink == sink ? 0.0f : sink);
      if (a_.softmax_lse != nullptr) a_.softmax_lse[row * p_.num_heads + h] = sink;
    }
  }

  void WriteConstant(uint16_t* dst, float value) const {
    const uint16_t bits = fp16_ ? FloatToFp16(value) : FloatToBf16(value);
    std::fill(dst, dst + kD, bits);
  }

  // Entry b of the run's batches (through batch_stride, ABI 1.13).
  const attnrt_sparse_mla_batch& Batch(int64_t b) const {
    return *attnrt_sparse_mla_batch_at(&a_, b);
  }
  const attnrt_sparse_mla_args& a_;
  const attnrt_sparse_mla_problem& p_;
  const attnrt_sparse_mla_attributes& attr_;
  bool fp16_ = false;
  bool slots_ = false;      // topk_value_mode 3: global slot ids
  bool few_heads_ = false;  // scores with the dims in lanes (Math::ScoreFewHeads)
  int64_t ori_stride_ = 0, cmp_stride_ = 0;
  AlignedBuffer<typename Math::KeyT> tile_;
  AlignedBuffer<float> qt_, s_, o_, state_;
  std::vector<int64_t> cmp_;
  std::vector<int64_t> ori_;  // global slot ids of the row's ori keys
};

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA

#include "sparse_mla_run.h"
