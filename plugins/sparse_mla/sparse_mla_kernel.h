// The sparse MLA kernel body (the algorithm of CANN's golden, docs/sparse-mla.md), shared by the
// scalar and the AVX2 builds: each ISA file defines SPARSE_MLA_ISA (a namespace name, so the two
// instantiations never merge at link time) and a Math struct with Dot / Axpy / Scale over 512
// floats, then includes this file. Everything else (masks, index scan, token decoding, rounding) is
// one code.
//
// Per work item (query row, head group) from the metadata: the row's keys are the ori window
// [lo, hi) in position order, then the selected compressed tokens in index order (HCA: the causal
// prefix; CSA: the golden's top-k scan). Keys are decoded to bf16-exact floats (fp16 for an fp16
// quant_mode 3 problem) in tiles of 128, and each head runs the golden's tiled online softmax:
// m starts at the sink (or -inf), l at 1 (or 0); per tile m' = max(m, max s), P = exp(s - m'),
// l = exp(m - m') l + sum P, O = exp(m - m') O + sum round(P) v. out = round(O / l),
// lse = m + ln l. Rows with no key, NaN scores and non-finite sinks: docs/sparse-mla.md.
#ifndef SPARSE_MLA_ISA
#error "define SPARSE_MLA_ISA before including sparse_mla_kernel.h"
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "attnrt/plugin.h"
#include "sparse_mla_format.h"

namespace attnrt::sparse_mla::SPARSE_MLA_ISA {

constexpr int kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int64_t kTile = 128;      // the golden's S2 tile
constexpr int64_t kHeadBlock = 16;  // heads sharing each decoded key while it is in L1
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Row {
  bool valid = false;
  int64_t b = 0;
  int64_t lo = 0, hi = 0;  // ori window
};

// Logical position of a physical slot (topk_value_mode 2) through the batch's used cmp blocks,
// or -1 when no used block of the batch holds it.
inline int64_t PhysicalToLogical(const attnrt_sparse_mla_args& a, int64_t b, int64_t slot) {
  const attnrt_sparse_mla_problem& p = *a.problem;
  const int64_t bs = p.cmp_block_size;
  const int64_t block = slot / bs;
  const int64_t used = (int64_t{a.batches[b].cmp_len} + bs - 1) / bs;
  const int32_t* table = a.cmp_block_table + b * p.cmp_max_blocks;
  for (int64_t col = 0; col < used; ++col) {
    if (table[col] == block) return col * bs + slot % bs;
  }
  return -1;
}

class Worker {
 public:
  Worker(const attnrt_sparse_mla_args& args, int64_t heads_per_group)
      : a_(args), p_(*args.problem), attr_(p_.attributes) {
    fp16_ = p_.q_dtype.code == ATTNRT_DTYPE_CODE_FLOAT;
    keys_.resize(static_cast<size_t>(kTile) * kD);
    q_.resize(static_cast<size_t>(heads_per_group) * kD);
    o_.resize(static_cast<size_t>(heads_per_group) * kD);
    scores_.resize(static_cast<size_t>(kHeadBlock * kTile));
    probs_.resize(static_cast<size_t>(kHeadBlock * kTile));
  }

  void RunItem(int64_t item, int64_t heads_per_group, int64_t groups) {
    const int64_t row = item / groups;
    const int64_t h0 = (item % groups) * heads_per_group;
    const int64_t h1 = std::min(p_.num_heads, h0 + heads_per_group);
    Row r;
    int64_t i = 0;
    if (!Locate(row, &r, &i)) {
      WriteZero(row, h0, h1);
      return;
    }
    const attnrt_sparse_mla_batch& x = a_.batches[r.b];
    Select(r, i, x);
    const int64_t n_ori = r.hi - r.lo;
    const int64_t n_keys = n_ori + static_cast<int64_t>(cmp_.size());
    const int64_t nh = h1 - h0;
    // q rows to fp32 (exact), O to zero, softmax state from the sinks.
    const uint16_t* q = static_cast<const uint16_t*>(a_.q) + (row * p_.num_heads + h0) * kD;
    for (int64_t k = 0; k < nh * kD; ++k) q_[k] = fp16_ ? Fp16ToFloat(q[k]) : Bf16ToFloat(q[k]);
    std::fill(o_.begin(), o_.begin() + nh * kD, 0.0f);
    float m[ATTNRT_SPARSE_MLA_MAX_HEADS], l[ATTNRT_SPARSE_MLA_MAX_HEADS];
    for (int64_t h = 0; h < nh; ++h) {
      m[h] = a_.sinks != nullptr ? a_.sinks[h0 + h] : -std::numeric_limits<float>::infinity();
      l[h] = a_.sinks != nullptr ? 1.0f : 0.0f;
    }
    for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
      const int64_t nt = std::min(kTile, n_keys - t0);
      for (int64_t j = 0; j < nt; ++j) {
        const int64_t key = t0 + j;
        float* dst = keys_.data() + j * kD;
        if (key < n_ori) {
          DecodeOri(r.b, r.lo + key, x, dst);
        } else {
          DecodeCmp(r.b, cmp_[key - n_ori], x, dst);
        }
      }
      // Blocks of kHeadBlock heads: each decoded key (2 KiB) is used by every head of the block
      // while it is in L1, instead of streaming the whole tile once per head.
      for (int64_t hb = 0; hb < nh; hb += kHeadBlock) {
        const int64_t nb = std::min(kHeadBlock, nh - hb);
        for (int64_t j = 0; j < nt; ++j) {
          const float* k = keys_.data() + j * kD;
          for (int64_t h = 0; h < nb; ++h) {
            scores_[h * kTile + j] = attr_.softmax_scale * Math::Dot(q_.data() + (hb + h) * kD, k);
          }
        }
        for (int64_t h = 0; h < nb; ++h) {
          float* s = scores_.data() + h * kTile;
          float* pr = probs_.data() + h * kTile;
          float tile_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < nt; ++j) tile_max = std::max(tile_max, s[j]);
          const float m_new = std::max(m[hb + h], tile_max);
          const float alpha = std::exp(m[hb + h] - m_new);
          float sum = 0.0f;
          for (int64_t j = 0; j < nt; ++j) {
            const float pj = std::exp(s[j] - m_new);
            sum += pj;
            pr[j] = fp16_ ? RoundFp16(pj) : RoundBf16(pj);
          }
          l[hb + h] = alpha * l[hb + h] + sum;
          m[hb + h] = m_new;
          if (alpha != 1.0f) Math::Scale(o_.data() + (hb + h) * kD, alpha);
        }
        for (int64_t j = 0; j < nt; ++j) {
          const float* k = keys_.data() + j * kD;
          for (int64_t h = 0; h < nb; ++h) {
            const float pj = probs_[h * kTile + j];
            if (pj != 0.0f) Math::Axpy(o_.data() + (hb + h) * kD, pj, k);
          }
        }
      }
    }
    uint16_t* out = static_cast<uint16_t*>(a_.attn_out) + (row * p_.num_heads + h0) * kD;
    for (int64_t h = 0; h < nh; ++h) {
      const float* oh = o_.data() + h * kD;
      uint16_t* dst = out + h * kD;
      // Non-finite sinks and scores (docs/sparse-mla.md): decided once per (row, head).
      const float sink = a_.sinks != nullptr ? a_.sinks[h0 + h] : 0.0f;
      float lse = m[h] + std::log(l[h]);
      if (a_.sinks != nullptr && !(sink < kInf)) {  // NaN or +inf: the sink is the answer
        lse = sink;
        WriteConstant(dst, sink == kInf ? 0.0f : sink);
      } else if (!(l[h] == l[h])) {  // a NaN score (or +inf: inf - inf)
        lse = l[h];
        WriteConstant(dst, l[h]);
      } else if (!(l[h] > 0.0f)) {  // no key and no sink: weight 0 in an LSE merge
        lse = -kInf;
        WriteConstant(dst, 0.0f);
      } else {
        const float inv = 1.0f / l[h];
        for (int d = 0; d < kD; ++d) {
          const float v = oh[d] * inv;
          dst[d] = fp16_ ? FloatToFp16(v) : FloatToBf16(v);
        }
      }
      if (a_.softmax_lse != nullptr) a_.softmax_lse[row * p_.num_heads + h0 + h] = lse;
    }
  }

 private:
  // Row -> (batch, i) and the ori window; false for rows with no output (zeroed).
  bool Locate(int64_t row, Row* r, int64_t* i_out) const {
    int64_t b = 0, i = 0;
    if (attr_.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
      // Batches are ordered by q_start; the last batch whose start is <= row.
      int64_t lo = 0, hi = p_.batch_size;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (a_.batches[mid].q_start <= row)
          lo = mid;
        else
          hi = mid;
      }
      // Empty batches share a start: skip forward to the one that holds the row.
      b = lo;
      while (b < p_.batch_size && a_.batches[b].q_start + a_.batches[b].q_capacity <= row) ++b;
      if (b >= p_.batch_size || a_.batches[b].q_start > row) return false;
      i = row - a_.batches[b].q_start;
    } else {
      b = row / p_.q_rows;
      i = row % p_.q_rows;
    }
    const attnrt_sparse_mla_batch& x = a_.batches[b];
    if (i >= x.s1) return false;
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

  // The compressed keys of the row (cmp mask, top-k scan), duplicates kept, in index order.
  void Select(const Row& r, int64_t i, const attnrt_sparse_mla_batch& x) {
    cmp_.clear();
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
      if (attr_.topk_value_mode == 2) v = PhysicalToLogical(a_, r.b, v);
      if (v < 0 || v >= n) continue;
      cmp_.push_back(v);
    }
  }

  // Address of logical token j of a KV side (PA: through the block table).
  void DecodeOri(int64_t b, int64_t j, const attnrt_sparse_mla_batch& x, float* dst) const {
    DecodeSide(a_.ori_kv, a_.ori_block_table, p_.ori_block_size, p_.ori_max_blocks, x.ori_start, b,
               j, false, dst);
  }
  void DecodeCmp(int64_t b, int64_t j, const attnrt_sparse_mla_batch& x, float* dst) const {
    DecodeSide(a_.cmp_kv, a_.cmp_block_table, p_.cmp_block_size, p_.cmp_max_blocks, x.cmp_start, b,
               j, true, dst);
  }

  void DecodeSide(const uint8_t* base, const int32_t* table, int64_t bs, int64_t max_blocks,
                  int64_t start, int64_t b, int64_t j, bool cmp, float* dst) const {
    const int qm = attr_.quant_mode;
    const int64_t token_bytes = TokenBytes(qm, cmp);
    if (attr_.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
      const int64_t block = table[b * max_blocks + j / bs];
      const int64_t off = j % bs;
      const uint8_t* block_base = base + block * bs * token_bytes;
      if (qm == 2) {
        DecodeMode2(block_base + off * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES,
                    block_base + bs * ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES +
                        off * ATTNRT_SPARSE_MLA_MODE2_SCALE_BYTES,
                    dst);
        return;
      }
      DecodeToken(block_base + off * token_bytes, qm, cmp, fp16_, dst);
      return;
    }
    DecodeToken(base + (start + j) * token_bytes, qm, cmp, fp16_, dst);
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

  const attnrt_sparse_mla_args& a_;
  const attnrt_sparse_mla_problem& p_;
  const attnrt_sparse_mla_attributes& attr_;
  bool fp16_ = false;
  std::vector<float> keys_, q_, o_, scores_, probs_;
  std::vector<int64_t> cmp_;
};

struct Job {
  const attnrt_sparse_mla_args* args = nullptr;
  std::atomic<bool> failed{false};
};

inline void RunWorkers(void* user_data, size_t begin, size_t end) {
  auto* job = static_cast<Job*>(user_data);
  const attnrt_sparse_mla_args& a = *job->args;
  const int32_t* md = a.metadata;
  const int64_t hpg = md[5], groups = md[6];
  try {
    Worker worker(a, hpg);
    for (size_t w = begin; w < end; ++w) {
      const int64_t first = md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w];
      const int64_t last = md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w + 1];
      for (int64_t item = first; item < last; ++item) worker.RunItem(item, hpg, groups);
    }
  } catch (...) {
    job->failed = true;  // only std::bad_alloc can come here; reported by Run
  }
}

// Runs every work item of the metadata on the host's pool.
inline int32_t Run(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                   char* error, size_t error_capacity) {
  Job job;
  job.args = &args;
  const size_t workers = static_cast<size_t>(args.metadata[7]);
  host.parallel_for(host.host_context, workers, 1, &RunWorkers, &job);
  if (job.failed) {
    WriteError(error, error_capacity, "out of memory for the per-worker key tiles");
    return ATTNRT_ERROR_OUT_OF_MEMORY;
  }
  return ATTNRT_OK;
}

}  // namespace attnrt::sparse_mla::SPARSE_MLA_ISA
