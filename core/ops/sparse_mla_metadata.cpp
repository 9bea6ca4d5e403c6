// Sparse MLA metadata: signature and balanced work partition (layout in
// abi/attnrt/ops/sparse_mla.h).
#include "core/ops/sparse_mla_metadata.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/ops/tensor_checks.h"

namespace attnrt::core::sparse_mla {
namespace {

constexpr int kHeader = ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS;

class Fnv1a {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= p[i];
      hash_ *= 1099511628211ull;
    }
  }
  template <typename T>
  void Value(T v) {
    Bytes(&v, sizeof(v));
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

// Heads per work item: the whole head range when there are enough rows to keep every worker busy,
// otherwise smaller groups, down to 4 heads: each group decodes the row's keys again, which costs
// about as much as the scores and PV products of one head.
int64_t HeadsPerGroup(int64_t rows, int64_t heads, int64_t workers) {
  int64_t g = heads;
  while (g > 4 && rows * ((heads + g - 1) / g) < 4 * workers) g = (g + 1) / 2;
  return g;
}

// Keys a row sees, for balancing only (an upper bound: ori window, cmp prefix, top-k width).
int64_t RowCost(const attnrt_sparse_mla_problem& p, const attnrt_sparse_mla_batch& x, int64_t i) {
  const attnrt_sparse_mla_attributes& a = p.attributes;
  if (i >= x.s1) return 1;
  if (a.topk_value_mode == 3) return p.ori_topk + p.topk + 1;  // the lists' widths
  const int64_t thr = int64_t{x.s2} - x.s1 + i + 1;
  if (thr <= 0) return 1;
  int64_t lo = 0, hi = x.s2;
  if (a.ori_mask_mode == 4) {
    lo = a.ori_win_left == -1 ? 0 : std::max<int64_t>(thr - 1 - a.ori_win_left, 0);
    hi = a.ori_win_right == -1 ? x.s2 : std::min<int64_t>(thr + a.ori_win_right, x.s2);
  } else if (a.ori_mask_mode == 3) {
    hi = std::min<int64_t>(thr, x.s2);
  }
  int64_t keys = std::max<int64_t>(hi - lo, 0);
  if (p.scenario != ATTNRT_SPARSE_MLA_SWA) {
    int64_t n = x.cmp_len;
    if (a.cmp_mask_mode == 3) {
      const int64_t t = int64_t{x.cmp_total} - x.s1 + i + 1;
      n = t <= 0 ? 0 : std::min<int64_t>(t / a.cmp_ratio, x.cmp_len);
    }
    keys += p.scenario == ATTNRT_SPARSE_MLA_CSA ? std::min<int64_t>(n, p.topk) : n;
  }
  return keys + 1;
}

}  // namespace

uint64_t Signature(const attnrt_sparse_mla_attributes& a, const attnrt_tensor* const* inputs,
                   size_t num_inputs) {
  Fnv1a h;
  for (int32_t v : {a.quant_mode, a.rope_head_dim, a.cmp_ratio, a.ori_mask_mode, a.cmp_mask_mode,
                    a.ori_win_left, a.ori_win_right, a.layout_q, a.layout_kv, a.topk_value_mode,
                    a.return_softmax_lse}) {
    h.Value(v);
  }
  h.Value(a.softmax_scale);
  for (size_t i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    if (i == ATTNRT_SPARSE_MLA_INPUT_METADATA) continue;
    const attnrt_tensor* t = i < num_inputs ? inputs[i] : nullptr;
    h.Value(static_cast<uint8_t>(t != nullptr));
    if (t == nullptr) continue;
    h.Value(t->dtype.code);
    h.Value(t->dtype.bits);
    h.Value(t->ndim);
    for (int32_t d = 0; d < t->ndim; ++d) h.Value(t->shape[d]);
    const bool lengths =
        i == ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q ||
        i == ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV ||
        i == ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV || i == ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q ||
        i == ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV ||
        i == ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV || i == ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV;
    if (lengths && t->data != nullptr) {
      h.Bytes(static_cast<const char*>(t->data) + t->byte_offset,
              static_cast<size_t>(NumElements(*t)) * sizeof(int32_t));
    }
  }
  return h.hash();
}

Status BuildMetadata(const attnrt_sparse_mla_problem& p,
                     const std::vector<attnrt_sparse_mla_batch>& batches, uint64_t signature,
                     int32_t num_workers, int32_t* out) {
  const int64_t workers =
      std::clamp<int64_t>(num_workers, 1, ATTNRT_SPARSE_MLA_METADATA_MAX_WORKERS);
  const int64_t rows =
      p.attributes.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND ? p.q_rows : p.batch_size * p.q_rows;
  const int64_t hpg = HeadsPerGroup(rows, p.num_heads, workers);
  const int64_t groups = (p.num_heads + hpg - 1) / hpg;
  const int64_t items = rows * groups;
  if (items > INT32_MAX) {
    return InvalidArgument(StrCat("q: ", rows, " query rows x ", groups,
                                  " head groups exceed the int32 work items of the metadata"));
  }
  // Cost per row (rows of no batch, past cu_seqlens_q's end, cost 1: they are only zeroed).
  std::vector<int64_t> cost(static_cast<size_t>(rows), 1);
  for (const auto& x : batches) {
    for (int64_t i = 0; i < x.q_capacity; ++i) cost[x.q_start + i] = RowCost(p, x, i);
  }
  int64_t total = 0;
  for (int64_t c : cost) total += c * groups;
  int32_t words[ATTNRT_SPARSE_MLA_METADATA_SIZE] = {};
  words[0] = ATTNRT_SPARSE_MLA_METADATA_MAGIC;
  words[1] = ATTNRT_SPARSE_MLA_METADATA_VERSION;
  words[2] = static_cast<int32_t>(static_cast<uint32_t>(signature));
  words[3] = static_cast<int32_t>(static_cast<uint32_t>(signature >> 32));
  words[4] = static_cast<int32_t>(rows);
  words[5] = static_cast<int32_t>(hpg);
  words[6] = static_cast<int32_t>(groups);
  words[7] = static_cast<int32_t>(workers);
  words[8] = static_cast<int32_t>(items);
  // Greedy contiguous split: worker w ends where the running cost passes (w + 1) / workers.
  int64_t item = 0, acc = 0;
  for (int64_t w = 0; w < workers; ++w) {
    words[kHeader + 2 * w] = static_cast<int32_t>(item);
    const int64_t target = total * (w + 1) / workers;
    while (item < items && (acc < target || w + 1 == workers)) acc += cost[item++ / groups];
    words[kHeader + 2 * w + 1] = static_cast<int32_t>(item);
  }
  std::memcpy(out, words, sizeof(words));
  return Status::Ok();
}

Status CheckMetadata(const attnrt_sparse_mla_problem& p,
                     const std::vector<attnrt_sparse_mla_batch>& batches, uint64_t signature,
                     const int32_t* md) {
  const std::string regenerate =
      "; run the sparse_mla_metadata op with this op's attributes and inputs";
  if (md[0] != ATTNRT_SPARSE_MLA_METADATA_MAGIC) {
    return InvalidArgument(StrCat("metadata[0]: expected the magic ",
                                  ATTNRT_SPARSE_MLA_METADATA_MAGIC, ", got ", md[0],
                                  " (not made by the metadata op)", regenerate));
  }
  if (md[1] != ATTNRT_SPARSE_MLA_METADATA_VERSION) {
    return InvalidArgument(StrCat("metadata[1]: expected layout version ",
                                  ATTNRT_SPARSE_MLA_METADATA_VERSION, ", got ", md[1], regenerate));
  }
  const uint64_t got =
      uint64_t{static_cast<uint32_t>(md[2])} | (uint64_t{static_cast<uint32_t>(md[3])} << 32);
  if (got != signature) {
    return InvalidArgument(
        StrCat("metadata: made for other attributes, shapes or sequence lengths (signature ",
               std::hex, got, ", these inputs have ", signature, ")", std::dec, regenerate));
  }
  // The signature matches, so the table is ours unless the buffer was altered. Every word the
  // layout defines is checked: the header against this problem, the worker table against the
  // partition the metadata op makes for that many workers, and the reserved and unused words
  // against zero. The kernel trusts the table for memory accesses.
  const int32_t workers = md[7];
  if (workers < 1 || workers > ATTNRT_SPARSE_MLA_METADATA_MAX_WORKERS) {
    return InvalidArgument(StrCat("metadata[7]: expected a worker count of 1 to ",
                                  ATTNRT_SPARSE_MLA_METADATA_MAX_WORKERS, ", got ", workers,
                                  regenerate));
  }
  int32_t expected[ATTNRT_SPARSE_MLA_METADATA_SIZE];
  ATTNRT_RETURN_IF_ERROR(BuildMetadata(p, batches, signature, workers, expected));
  for (int k = 4; k < ATTNRT_SPARSE_MLA_METADATA_SIZE; ++k) {
    if (md[k] == expected[k]) continue;
    std::string what;
    if (k == 4) {
      what = "number of rows";
    } else if (k == 5) {
      what = "heads per group";
    } else if (k == 6) {
      what = "number of head groups";
    } else if (k == 8) {
      what = "total items";
    } else if (k < kHeader) {
      what = "reserved word, zero";
    } else if (k < kHeader + 2 * workers) {
      const int w = (k - kHeader) / 2;
      what = StrCat((k - kHeader) % 2 == 0 ? "first item" : "end item", " of worker ", w, " of ",
                    workers);
    } else {
      what = StrCat("unused word past the ", workers, " workers' table, zero");
    }
    return InvalidArgument(StrCat("metadata[", k, "]: expected ", expected[k], " (", what,
                                  "), got ", md[k], regenerate));
  }
  return Status::Ok();
}

}  // namespace attnrt::core::sparse_mla
