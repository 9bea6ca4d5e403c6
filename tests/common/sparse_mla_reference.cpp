// Float64 reference of MixedQuantSparseFlashMla, the operator (the scalar formats and token
// decoders are in sparse_mla_reference_formats.cpp); see sparse_mla_reference.h for its sources.
// Direct loops, no optimisation beyond decoding each visible key once per query row (all heads
// share the single KV head).
#include "sparse_mla_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace attnrt::testref {

namespace {

constexpr int D = kSparseMlaHeadDim;

double RoundToKind(SparseMlaFloat16Kind kind, double x) {
  return kind == SparseMlaFloat16Kind::kBf16 ? RoundToBf16(x) : RoundToFp16(x);
}

uint16_t BitsOfKind(SparseMlaFloat16Kind kind, double x) {
  return kind == SparseMlaFloat16Kind::kBf16 ? DoubleToBf16(x) : DoubleToFp16(x);
}

float ValueOfKind(SparseMlaFloat16Kind kind, uint16_t bits) {
  return kind == SparseMlaFloat16Kind::kBf16 ? Bf16ToFloat(bits) : Fp16ToFloat(bits);
}

}  // namespace

// ---- operator -----------------------------------------------------------------------------------
namespace {

bool Fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

bool HasCmp(const SparseMlaRefInputs& in) { return in.scenario != SparseMlaScenario::kSWA; }

int64_t OriTokenBytes(const SparseMlaRefInputs& in) {
  switch (in.quant_mode) {
    case 1:
      return kQuantMode1TokenBytes;
    case 2:
      return kQuantMode2TokenBytes;
    default:
      return kQuantMode3OriTokenBytes;
  }
}

int64_t CmpTokenBytes(const SparseMlaRefInputs& in) {
  switch (in.quant_mode) {
    case 1:
      return kQuantMode1TokenBytes;
    case 2:
      return kQuantMode2TokenBytes;
    default:
      return kTq4SlotBytes;
  }
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool CheckCuSeqlens(const int32_t* cu, int64_t batch, int64_t rows, const char* name,
                    std::string* error) {
  if (!cu) return Fail(error, std::string(name) + " is required");
  if (cu[0] != 0) return Fail(error, std::string(name) + "[0] must be 0");
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) return Fail(error, std::string(name) + " must be non-decreasing");
  }
  if (cu[batch] > rows) return Fail(error, std::string(name) + " exceeds the tensor's rows");
  return true;
}

bool ValidateSlots(const SparseMlaRefInputs& in, std::string* error);

bool Validate(const SparseMlaRefInputs& in, std::string* error) {
  if (in.quant_mode < 1 || in.quant_mode > 3) return Fail(error, "quant_mode must be 1, 2 or 3");
  if (in.rope_head_dim != 64) return Fail(error, "rope_head_dim must be 64");
  if (in.b < 0 || in.q_n < 1) return Fail(error, "b must be >= 0 and q_n >= 1");
  if (in.layout_q == SparseMlaLayout::kPA_BBND) return Fail(error, "layout_q must be BSND or TND");
  if (in.layout_kv != SparseMlaLayout::kPA_BBND && in.layout_kv != in.layout_q) {
    return Fail(error, "without PA_BBND, layout_q and layout_kv must be equal");
  }
  if (in.quant_mode == 2 && in.layout_kv != SparseMlaLayout::kPA_BBND) {
    return Fail(error, "quant_mode 2 needs layout_kv PA_BBND");
  }
  if (in.quant_mode != 3 && in.q_dtype != SparseMlaFloat16Kind::kBf16) {
    return Fail(error, "quant_mode 1/2 need a bf16 q");
  }
  if (!in.q || !in.ori_kv) return Fail(error, "q and ori_kv are required");
  const bool has_cmp = HasCmp(in);
  const bool csa = in.scenario == SparseMlaScenario::kCSA;
  if (has_cmp != (in.cmp_kv != nullptr)) {
    return Fail(error, "cmp_kv must be present exactly for CSA and HCA");
  }
  if (csa != (in.cmp_sparse_indices != nullptr)) {
    return Fail(error, "cmp_sparse_indices must be present exactly for CSA");
  }
  if (csa && in.cmp_kv_k < 0) return Fail(error, "cmp_kv_k must be >= 0");
  const bool slots = in.topk_value_mode == 3;
  if (in.ori_topk_length || in.cmp_topk_length) {
    return Fail(error, "ori_topk_length / cmp_topk_length are reserved");
  }
  if (!slots && in.ori_sparse_indices) {
    return Fail(error, "ori_sparse_indices is used only with topk_value_mode 3");
  }
  if (has_cmp && in.cmp_ratio < 1) return Fail(error, "cmp_ratio must be >= 1");
  if (in.ori_mask_mode != 0 && in.ori_mask_mode != 3 && in.ori_mask_mode != 4) {
    return Fail(error, "ori_mask_mode must be 0, 3 or 4");
  }
  if (in.cmp_mask_mode != 0 && in.cmp_mask_mode != 3) {
    return Fail(error, "cmp_mask_mode must be 0 or 3");
  }
  if (in.ori_win_left < -1 || in.ori_win_right < -1) return Fail(error, "windows must be >= -1");
  if (in.topk_value_mode < 1 || in.topk_value_mode > 3) {
    return Fail(error, "topk_value_mode must be 1, 2 or 3");
  }
  if (csa && in.topk_value_mode == 2 && in.layout_kv != SparseMlaLayout::kPA_BBND) {
    return Fail(error, "topk_value_mode 2 needs layout_kv PA_BBND");
  }
  if (in.layout_q == SparseMlaLayout::kTND) {
    if (!CheckCuSeqlens(in.cu_seqlens_q, in.b, in.q_t, "cu_seqlens_q", error)) return false;
  } else if (in.q_s < 0) {
    return Fail(error, "q_s must be >= 0");
  }
  if (in.layout_kv == SparseMlaLayout::kTND) {
    if (!CheckCuSeqlens(in.cu_seqlens_ori_kv, in.b, in.ori_kv_t, "cu_seqlens_ori_kv", error)) {
      return false;
    }
    if (has_cmp &&
        !CheckCuSeqlens(in.cu_seqlens_cmp_kv, in.b, in.cmp_kv_t, "cu_seqlens_cmp_kv", error)) {
      return false;
    }
  }
  if (slots) return ValidateSlots(in, error);
  if (in.layout_kv == SparseMlaLayout::kPA_BBND) {
    if (!in.seqused_ori_kv || !in.ori_block_table) {
      return Fail(error, "PA_BBND needs seqused_ori_kv and ori_block_table");
    }
    if (in.ori_kv_block_size < 1) return Fail(error, "ori_kv_block_size must be >= 1");
    if (has_cmp && (!in.cmp_block_table || in.cmp_kv_block_size < 1)) {
      return Fail(error, "PA_BBND with cmp_kv needs cmp_block_table and cmp_kv_block_size >= 1");
    }
  }
  if (has_cmp && in.cmp_residual_kv) {
    for (int64_t b = 0; b < in.b; ++b) {
      if (in.cmp_residual_kv[b] < 0 || in.cmp_residual_kv[b] >= in.cmp_ratio) {
        return Fail(error, "cmp_residual_kv values must lie in [0, cmp_ratio)");
      }
    }
  }
  return true;
}

// Every entry of one slot-id tensor: -1 or a slot in [0, block_nums * block_size).
bool CheckSlotEntries(const int32_t* idx, int64_t rows, int64_t width, int64_t slots,
                      const char* name, std::string* error) {
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t k = 0; k < width; ++k) {
      const int64_t v = idx[row * width + k];
      if (v == -1 || (v >= 0 && v < slots)) continue;
      return Fail(error, std::string(name) + "[" + std::to_string(row) + "][" + std::to_string(k) +
                             "] = " + std::to_string(v) + " outside [0, " + std::to_string(slots) +
                             ") (or -1)");
    }
  }
  return true;
}

// topk_value_mode 3 (called after the checks shared with the other modes).
bool ValidateSlots(const SparseMlaRefInputs& in, std::string* error) {
  if (in.layout_kv != SparseMlaLayout::kPA_BBND) {
    return Fail(error, "topk_value_mode 3 needs layout_kv PA_BBND");
  }
  if (in.scenario == SparseMlaScenario::kHCA) {
    return Fail(error, "topk_value_mode 3 has no HCA: cmp_kv needs cmp_sparse_indices");
  }
  if (!in.ori_sparse_indices || in.ori_kv_w < 1) {
    return Fail(error, "topk_value_mode 3 needs ori_sparse_indices with ori_kv_w >= 1");
  }
  if (in.ori_mask_mode != 0 || in.cmp_mask_mode != 0) {
    return Fail(error, "topk_value_mode 3 needs ori_mask_mode 0 and cmp_mask_mode 0");
  }
  if (in.ori_block_table || in.cmp_block_table || in.seqused_ori_kv || in.seqused_cmp_kv ||
      in.cu_seqlens_ori_kv || in.cu_seqlens_cmp_kv || in.cmp_residual_kv) {
    return Fail(error,
                "topk_value_mode 3 takes no block table, seqused_*_kv, cu_seqlens_*_kv or "
                "cmp_residual_kv");
  }
  if (in.ori_kv_block_size < 1 || in.ori_kv_block_nums < 0) {
    return Fail(error, "ori_kv_block_size must be >= 1");
  }
  const int64_t rows = in.layout_q == SparseMlaLayout::kBSND ? in.b * in.q_s : in.q_t;
  if (!CheckSlotEntries(in.ori_sparse_indices, rows, in.ori_kv_w,
                        in.ori_kv_block_nums * in.ori_kv_block_size, "ori_sparse_indices", error)) {
    return false;
  }
  if (in.scenario == SparseMlaScenario::kCSA) {
    if (in.cmp_kv_block_size < 1 || in.cmp_kv_block_nums < 0) {
      return Fail(error, "cmp_kv_block_size must be >= 1");
    }
    if (!CheckSlotEntries(in.cmp_sparse_indices, rows, in.cmp_kv_k,
                          in.cmp_kv_block_nums * in.cmp_kv_block_size, "cmp_sparse_indices",
                          error)) {
      return false;
    }
  }
  return true;
}

// First row of batch b's query rows in the q tensor (BSND: b * q_s; TND: cu_seqlens_q[b]).
int64_t QueryRowBase(const SparseMlaRefInputs& in, int64_t b) {
  return in.layout_q == SparseMlaLayout::kBSND ? b * in.q_s : in.cu_seqlens_q[b];
}

// Address of logical token j of batch b in one KV tensor (ori or cmp). For quant_mode 2 (block-
// planar) `feature`/`scales` are the two records; otherwise `feature` is the token.
struct KvSide {
  const uint8_t* data;
  int64_t token_bytes;
  int64_t bsnd_s;
  int64_t tnd_t;
  const int32_t* cu;
  int64_t block_nums;
  int64_t block_size;
  int64_t block_stride;
  const int32_t* block_table;
  int64_t block_table_cols;
  const char* name;
};

KvSide OriSide(const SparseMlaRefInputs& in) {
  const int64_t bytes = OriTokenBytes(in);
  return {in.ori_kv,
          bytes,
          in.ori_kv_s,
          in.ori_kv_t,
          in.cu_seqlens_ori_kv,
          in.ori_kv_block_nums,
          in.ori_kv_block_size,
          in.ori_kv_block_stride ? in.ori_kv_block_stride : in.ori_kv_block_size * bytes,
          in.ori_block_table,
          in.ori_block_table_cols,
          "ori"};
}

KvSide CmpSide(const SparseMlaRefInputs& in) {
  const int64_t bytes = CmpTokenBytes(in);
  return {in.cmp_kv,
          bytes,
          in.cmp_kv_s,
          in.cmp_kv_t,
          in.cu_seqlens_cmp_kv,
          in.cmp_kv_block_nums,
          in.cmp_kv_block_size,
          in.cmp_kv_block_stride ? in.cmp_kv_block_stride : in.cmp_kv_block_size * bytes,
          in.cmp_block_table,
          in.cmp_block_table_cols,
          "cmp"};
}

bool LocateToken(const SparseMlaRefInputs& in, const KvSide& side, int64_t b, int64_t j,
                 const uint8_t** feature, const uint8_t** scales, std::string* error) {
  auto fail = [&](const std::string& why) {
    return Fail(error, std::string(side.name) + " token " + std::to_string(j) + " of batch " +
                           std::to_string(b) + ": " + why);
  };
  if (j < 0) return fail("negative position");
  *scales = nullptr;
  switch (in.layout_kv) {
    case SparseMlaLayout::kBSND:
      if (j >= side.bsnd_s) return fail("beyond the BSND capacity");
      *feature = side.data + (b * side.bsnd_s + j) * side.token_bytes;
      return true;
    case SparseMlaLayout::kTND: {
      const int64_t row = side.cu[b] + j;
      if (row >= side.tnd_t) return fail("beyond the TND rows");
      *feature = side.data + row * side.token_bytes;
      return true;
    }
    case SparseMlaLayout::kPA_BBND: {
      const int64_t col = j / side.block_size;
      const int64_t off = j % side.block_size;
      if (col >= side.block_table_cols) return fail("beyond the block table");
      const int64_t block = side.block_table[b * side.block_table_cols + col];
      if (block < 0 || block >= side.block_nums) {
        return fail("block id " + std::to_string(block) + " out of range");
      }
      const uint8_t* base = side.data + block * side.block_stride;
      if (in.quant_mode == 2) {
        *feature = base + off * kQuantMode2FeatureBytes;
        *scales = base + side.block_size * kQuantMode2FeatureBytes + off * kQuantMode2ScaleBytes;
      } else {
        *feature = base + off * side.token_bytes;
      }
      return true;
    }
  }
  return fail("bad layout");
}

// topk_value_mode 2. CHOICE: a physical slot x = block_id * bs + off is mapped back to the logical
// index col * bs + off through the first column `col` of the batch's cmp block
// table holding block_id; the causal filter then applies to that logical index and the gather
// reads the same physical slot. A slot whose block is not in the batch's table is skipped like an
// out-of-range index. Returns -1 when unmapped.
int64_t PhysicalToLogical(const SparseMlaRefInputs& in, int64_t b, int64_t x) {
  if (x < 0) return -1;
  const int64_t bs = in.cmp_kv_block_size;
  const int64_t block = x / bs;
  for (int64_t col = 0; col < in.cmp_block_table_cols; ++col) {
    if (in.cmp_block_table[b * in.cmp_block_table_cols + col] == block) return col * bs + x % bs;
  }
  return -1;
}

bool GetLengths(const SparseMlaRefInputs& in, int64_t b, SparseMlaBatchLengths* len,
                std::string* error) {
  // Effective lengths.
  const bool tnd_q = in.layout_q == SparseMlaLayout::kTND;
  const bool tnd_kv = in.layout_kv == SparseMlaLayout::kTND;
  if (in.seqused_q) {
    len->s1 = in.seqused_q[b];
  } else {
    len->s1 = tnd_q ? in.cu_seqlens_q[b + 1] - in.cu_seqlens_q[b] : in.q_s;
  }
  const int64_t q_capacity = tnd_q ? in.cu_seqlens_q[b + 1] - in.cu_seqlens_q[b] : in.q_s;
  if (len->s1 < 0 || len->s1 > q_capacity) {
    return Fail(error, "S1 of batch " + std::to_string(b) + " outside [0, rows of the batch]");
  }
  if (in.seqused_ori_kv) {
    len->s2 = in.seqused_ori_kv[b];
  } else {
    len->s2 = tnd_kv ? in.cu_seqlens_ori_kv[b + 1] - in.cu_seqlens_ori_kv[b] : in.ori_kv_s;
  }
  if (len->s2 < 0) return Fail(error, "negative S2 in batch " + std::to_string(b));
  len->cmp_len = 0;
  len->lc = 0;
  if (HasCmp(in)) {
    if (in.seqused_cmp_kv) {
      len->cmp_len = in.seqused_cmp_kv[b];
    } else if (tnd_kv && in.cu_seqlens_cmp_kv) {
      len->cmp_len = in.cu_seqlens_cmp_kv[b + 1] - in.cu_seqlens_cmp_kv[b];
    } else {
      len->cmp_len = len->s2 / in.cmp_ratio;  // not the tensor's S3
    }
    if (len->cmp_len < 0) return Fail(error, "negative cmp_len in batch " + std::to_string(b));
    const int64_t residual = in.cmp_residual_kv ? in.cmp_residual_kv[b] : 0;
    len->lc = len->cmp_len * in.cmp_ratio + residual;
  }
  return true;
}

bool GetRowKeys(const SparseMlaRefInputs& in, int64_t b, const SparseMlaBatchLengths& len,
                int64_t i, SparseMlaRowKeys* keys) {
  keys->valid = false;
  keys->ori_lo = keys->ori_hi = keys->ncmp = 0;
  keys->cmp.clear();
  keys->ori_slots.clear();
  if (i < 0 || i >= len.s1) return true;
  if (in.topk_value_mode == 3) {
    // Slot lists: every entry examined, -1 skipped, no mask (values checked by ValidateSlots).
    keys->valid = true;
    const int64_t qrow = QueryRowBase(in, b) + i;
    const int32_t* ori = in.ori_sparse_indices + qrow * in.ori_kv_w;
    for (int64_t k = 0; k < in.ori_kv_w; ++k) {
      if (ori[k] != -1) keys->ori_slots.push_back(ori[k]);
    }
    if (in.scenario == SparseMlaScenario::kCSA) {
      const int32_t* cmp = in.cmp_sparse_indices + qrow * in.cmp_kv_k;
      for (int64_t k = 0; k < in.cmp_kv_k; ++k) {
        if (cmp[k] != -1) keys->cmp.push_back(cmp[k]);
      }
    }
    return true;
  }
  const int64_t s1 = len.s1;
  const int64_t s2 = len.s2;
  const int64_t thr = s2 - s1 + i + 1;  // right-down alignment
  if (thr <= 0) return true;            // invalid row: both parts empty
  keys->valid = true;
  // ori mask.
  switch (in.ori_mask_mode) {
    case 4: {
      const int64_t L = in.ori_win_left;
      const int64_t R = in.ori_win_right;
      keys->ori_lo = L == -1 ? 0 : std::max<int64_t>(thr - 1 - L, 0);
      keys->ori_hi = R == -1 ? s2 : std::min<int64_t>(thr + R, s2);
      break;
    }
    case 3:
      keys->ori_lo = 0;
      keys->ori_hi = std::min<int64_t>(thr, s2);
      break;
    default:
      keys->ori_lo = 0;
      keys->ori_hi = s2;
      break;
  }
  if (!HasCmp(in)) return true;
  // cmp mask (the golden's cmp_limit). cmp_mask_mode 0 follows the bf16 sibling golden:
  // ncmp = S2 / r.
  const int64_t r = in.cmp_ratio;
  int64_t n = in.cmp_mask_mode == 3 ? FloorDiv(len.lc - s1 + i + 1, r) : s2 / r;
  n = std::min<int64_t>(std::max<int64_t>(n, 0), len.cmp_len);
  keys->ncmp = n;
  if (in.scenario == SparseMlaScenario::kHCA) {
    for (int64_t j = 0; j < n; ++j) keys->cmp.push_back(j);
    return true;
  }
  // CSA, the golden's top-k scan: only the first min(K, n) slots are examined; -1 stops the scan;
  // entries outside [0, n) are skipped; duplicates are kept, in row order.
  const int64_t K = in.cmp_kv_k;
  const int32_t* row = in.cmp_sparse_indices + (QueryRowBase(in, b) + i) * K;
  const int64_t count = std::min<int64_t>(K, n);
  for (int64_t k = 0; k < count; ++k) {
    int64_t x = row[k];
    if (x == -1) break;
    if (in.topk_value_mode == 2) x = PhysicalToLogical(in, b, x);
    if (x < 0 || x >= n) continue;
    keys->cmp.push_back(x);
  }
  return true;
}

void DecodeAt(const SparseMlaRefInputs& in, bool cmp, const uint8_t* feature, const uint8_t* scales,
              float* out, Tq4Centroids centroids) {
  switch (in.quant_mode) {
    case 1:
      DecodeQuantMode1Token(feature, out);
      break;
    case 2:
      DecodeQuantMode2Token(feature, scales, out);
      break;
    default:
      if (cmp) {
        DecodeTq4Token(feature, out, centroids, in.q_dtype);
      } else {
        DecodeFloat16Token(feature, out, in.q_dtype);
      }
      break;
  }
}

bool DecodeToken(const SparseMlaRefInputs& in, bool cmp, int64_t b, int64_t j, float* out,
                 Tq4Centroids centroids, std::string* error) {
  const KvSide side = cmp ? CmpSide(in) : OriSide(in);
  const uint8_t* feature = nullptr;
  const uint8_t* scales = nullptr;
  if (!LocateToken(in, side, b, j, &feature, &scales, error)) return false;
  DecodeAt(in, cmp, feature, scales, out, centroids);
  return true;
}

// topk_value_mode 3: the token at global slot `slot` (block slot / bs, offset slot % bs) of a
// PA_BBND cache, through the block stride.
bool DecodeSlot(const SparseMlaRefInputs& in, bool cmp, int64_t slot, float* out,
                Tq4Centroids centroids, std::string* error) {
  const KvSide side = cmp ? CmpSide(in) : OriSide(in);
  const int64_t block = slot / side.block_size;
  const int64_t off = slot % side.block_size;
  if (slot < 0 || block >= side.block_nums) {
    return Fail(error, std::string(side.name) + " slot " + std::to_string(slot) + " out of range");
  }
  const uint8_t* base = side.data + block * side.block_stride;
  if (in.quant_mode == 2) {
    DecodeAt(in, cmp, base + off * kQuantMode2FeatureBytes,
             base + side.block_size * kQuantMode2FeatureBytes + off * kQuantMode2ScaleBytes, out,
             centroids);
  } else {
    DecodeAt(in, cmp, base + off * side.token_bytes, nullptr, out, centroids);
  }
  return true;
}

double Dot(const double* q, const float* k) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  for (int d = 0; d < D; d += 4) {
    acc[0] += q[d] * k[d];
    acc[1] += q[d + 1] * k[d + 1];
    acc[2] += q[d + 2] * k[d + 2];
    acc[3] += q[d + 3] * k[d + 3];
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// One (row, head): keys is nkeys x 512 floats. Writes out[512] (O / l) and *lse.
void AttendGolden64(const SparseMlaRefInputs& in, const SparseMlaRefOptions& opt, const double* q,
                    const float* keys, int64_t nkeys, double sink, bool has_sink, double* out,
                    double* lse) {
  const double scale = static_cast<double>(in.softmax_scale);
  std::vector<double> s(nkeys);
  for (int64_t j = 0; j < nkeys; ++j) s[j] = scale * Dot(q, keys + j * D);
  double m = has_sink ? sink : -std::numeric_limits<double>::infinity();
  double l = has_sink ? 1.0 : 0.0;
  std::vector<double> o(D, 0.0), tile_o(D);
  const int64_t tile = std::max<int64_t>(opt.golden_tile, 1);
  for (int64_t t0 = 0; t0 < nkeys; t0 += tile) {
    const int64_t t1 = std::min(nkeys, t0 + tile);
    double m2 = m;
    for (int64_t j = t0; j < t1; ++j) m2 = std::max(m2, s[j]);
    const double a = std::exp(m - m2);
    double psum = 0.0;
    std::fill(tile_o.begin(), tile_o.end(), 0.0);
    for (int64_t j = t0; j < t1; ++j) {
      const double p = std::exp(s[j] - m2);
      psum += p;                                     // unrounded P for the sum
      const double pr = RoundToKind(in.q_dtype, p);  // bf16 P for the PV product
      const float* v = keys + j * D;
      for (int d = 0; d < D; ++d) tile_o[d] += pr * v[d];
    }
    l = a * l + psum;
    for (int d = 0; d < D; ++d) o[d] = a * o[d] + tile_o[d];
    m = m2;
  }
  for (int d = 0; d < D; ++d) out[d] = o[d] / l;
  *lse = m + std::log(l);
}

void AttendGolden32(const SparseMlaRefInputs& in, const SparseMlaRefOptions& opt, const double* q,
                    const float* keys, int64_t nkeys, double sink, bool has_sink, double* out,
                    double* lse) {
  const float scale = in.softmax_scale;
  std::vector<float> s(nkeys);
  for (int64_t j = 0; j < nkeys; ++j) {
    const float* k = keys + j * D;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) dot += static_cast<float>(q[d]) * k[d];
    s[j] = dot * scale;
  }
  float m = has_sink ? static_cast<float>(sink) : -std::numeric_limits<float>::infinity();
  float l = has_sink ? 1.0f : 0.0f;
  std::vector<float> o(D, 0.0f), tile_o(D);
  const int64_t tile = std::max<int64_t>(opt.golden_tile, 1);
  for (int64_t t0 = 0; t0 < nkeys; t0 += tile) {
    const int64_t t1 = std::min(nkeys, t0 + tile);
    float m2 = m;
    for (int64_t j = t0; j < t1; ++j) m2 = std::max(m2, s[j]);
    const float a = std::exp(m - m2);
    float psum = 0.0f;
    std::fill(tile_o.begin(), tile_o.end(), 0.0f);
    for (int64_t j = t0; j < t1; ++j) {
      const float p = std::exp(s[j] - m2);
      psum += p;
      const float pr = static_cast<float>(RoundToKind(in.q_dtype, p));
      const float* v = keys + j * D;
      for (int d = 0; d < D; ++d) tile_o[d] += pr * v[d];
    }
    l = a * l + psum;
    for (int d = 0; d < D; ++d) o[d] = a * o[d] + tile_o[d];
    m = m2;
  }
  for (int d = 0; d < D; ++d) out[d] = static_cast<double>(o[d] / l);
  *lse = static_cast<double>(m + std::log(l));
}

void AttendExact(const SparseMlaRefInputs& in, const double* q, const float* keys, int64_t nkeys,
                 double sink, bool has_sink, double* out, double* lse) {
  const double scale = static_cast<double>(in.softmax_scale);
  std::vector<double> s(nkeys);
  double mx = has_sink ? sink : -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < nkeys; ++j) {
    s[j] = scale * Dot(q, keys + j * D);
    mx = std::max(mx, s[j]);
  }
  double den = has_sink ? std::exp(sink - mx) : 0.0;
  std::vector<double> o(D, 0.0);
  for (int64_t j = 0; j < nkeys; ++j) {
    const double p = std::exp(s[j] - mx);
    den += p;
    const float* v = keys + j * D;
    for (int d = 0; d < D; ++d) o[d] += p * v[d];
  }
  for (int d = 0; d < D; ++d) out[d] = o[d] / den;
  *lse = mx + std::log(den);
}

}  // namespace

bool SparseMlaGetBatchLengths(const SparseMlaRefInputs& inputs, int64_t batch,
                              SparseMlaBatchLengths* lengths, std::string* error) {
  if (!Validate(inputs, error)) return false;
  if (batch < 0 || batch >= inputs.b) return Fail(error, "batch out of range");
  return GetLengths(inputs, batch, lengths, error);
}

bool SparseMlaGetRowKeys(const SparseMlaRefInputs& inputs, int64_t batch, int64_t i,
                         SparseMlaRowKeys* keys, std::string* error) {
  SparseMlaBatchLengths len;
  if (!SparseMlaGetBatchLengths(inputs, batch, &len, error)) return false;
  return GetRowKeys(inputs, batch, len, i, keys);
}

bool SparseMlaDecodeOriToken(const SparseMlaRefInputs& inputs, int64_t batch, int64_t j, float* out,
                             std::string* error, Tq4Centroids centroids) {
  if (!Validate(inputs, error)) return false;
  if (batch < 0 || batch >= inputs.b) return Fail(error, "batch out of range");
  return DecodeToken(inputs, false, batch, j, out, centroids, error);
}

bool SparseMlaDecodeCmpToken(const SparseMlaRefInputs& inputs, int64_t batch, int64_t j, float* out,
                             std::string* error, Tq4Centroids centroids) {
  if (!Validate(inputs, error)) return false;
  if (batch < 0 || batch >= inputs.b) return Fail(error, "batch out of range");
  if (!HasCmp(inputs)) return Fail(error, "no cmp_kv in this scenario");
  return DecodeToken(inputs, true, batch, j, out, centroids, error);
}

bool SparseMlaReference(const SparseMlaRefInputs& in, SparseMlaRefOutputs* outputs,
                        const SparseMlaRefOptions& options) {
  SparseMlaRefOutputs& out = *outputs;
  out.error.clear();
  std::string* error = &out.error;
  if (!Validate(in, error)) return false;
  const int64_t q_rows = in.layout_q == SparseMlaLayout::kBSND ? in.b * in.q_s : in.q_t;
  const int64_t heads = in.q_n;
  out.attn_out.assign(q_rows * heads * D, 0.0);
  out.attn_out_bits.assign(q_rows * heads * D, 0);
  // Rows that see no key (empty, unused): attn_out 0, softmax_lse -inf, or the sink alone with
  // sinks (docs/sparse-mla.md); a NaN sink makes its head's rows NaN.
  out.softmax_lse.assign(q_rows * heads, -std::numeric_limits<double>::infinity());
  if (in.sinks != nullptr) {
    for (int64_t r = 0; r < q_rows; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const double sink = static_cast<double>(in.sinks[h]);
        out.softmax_lse[r * heads + h] = sink;
        if (std::isnan(sink)) {
          std::fill_n(out.attn_out.data() + (r * heads + h) * D, D, sink);
          std::fill_n(out.attn_out_bits.data() + (r * heads + h) * D, D,
                      BitsOfKind(in.q_dtype, sink));
        }
      }
    }
  }
  out.ori_key_count.assign(q_rows, -1);
  out.cmp_key_count.assign(q_rows, -1);

  std::vector<float> keys;
  std::vector<double> qv(D);
  SparseMlaRowKeys row;
  for (int64_t b = 0; b < in.b; ++b) {
    SparseMlaBatchLengths len;
    if (!GetLengths(in, b, &len, error)) return false;
    for (int64_t i = 0; i < len.s1; ++i) {
      const int64_t qrow = QueryRowBase(in, b) + i;
      GetRowKeys(in, b, len, i, &row);
      if (!row.valid) continue;  // invalid or empty row: no key (set above)
      const bool slots = in.topk_value_mode == 3;
      const int64_t n_ori =
          slots ? static_cast<int64_t>(row.ori_slots.size()) : row.ori_hi - row.ori_lo;
      const int64_t n_cmp = static_cast<int64_t>(row.cmp.size());
      const int64_t nkeys = n_ori + n_cmp;
      out.ori_key_count[qrow] = static_cast<int32_t>(n_ori);
      out.cmp_key_count[qrow] = static_cast<int32_t>(n_cmp);
      // Keys in the golden's order: ori window (position order), then cmp (selection order).
      keys.resize(nkeys * D);
      for (int64_t j = 0; j < n_ori; ++j) {
        float* key = keys.data() + j * D;
        if (!(slots
                  ? DecodeSlot(in, false, row.ori_slots[j], key, options.tq4_centroids, error)
                  : DecodeToken(in, false, b, row.ori_lo + j, key, options.tq4_centroids, error))) {
          return false;
        }
      }
      for (int64_t j = 0; j < n_cmp; ++j) {
        float* key = keys.data() + (n_ori + j) * D;
        if (!(slots ? DecodeSlot(in, true, row.cmp[j], key, options.tq4_centroids, error)
                    : DecodeToken(in, true, b, row.cmp[j], key, options.tq4_centroids, error))) {
          return false;
        }
      }
      for (int64_t h = 0; h < heads; ++h) {
        const uint16_t* qh = in.q + (qrow * heads + h) * D;
        for (int d = 0; d < D; ++d) qv[d] = ValueOfKind(in.q_dtype, qh[d]);
        const bool has_sink = in.sinks != nullptr;
        const double sink = has_sink ? static_cast<double>(in.sinks[h]) : 0.0;
        double* o = out.attn_out.data() + (qrow * heads + h) * D;
        double* lse = out.softmax_lse.data() + qrow * heads + h;
        if (has_sink && !(sink < std::numeric_limits<double>::infinity())) {
          // +inf: the sink takes every weight (attn_out 0); NaN: NaN everywhere.
          std::fill_n(o, D, std::isnan(sink) ? sink : 0.0);
          *lse = sink;
        } else if (nkeys == 0 && !has_sink) {
          std::fill_n(o, D, 0.0);
          *lse = -std::numeric_limits<double>::infinity();
        } else if (options.rounding == SparseMlaRounding::kExact) {
          AttendExact(in, qv.data(), keys.data(), nkeys, sink, has_sink, o, lse);
        } else if (options.fp32_accumulation) {
          AttendGolden32(in, options, qv.data(), keys.data(), nkeys, sink, has_sink, o, lse);
        } else {
          AttendGolden64(in, options, qv.data(), keys.data(), nkeys, sink, has_sink, o, lse);
        }
        uint16_t* bits = out.attn_out_bits.data() + (qrow * heads + h) * D;
        for (int d = 0; d < D; ++d) bits[d] = BitsOfKind(in.q_dtype, o[d]);
      }
    }
  }
  return true;
}

}  // namespace attnrt::testref
