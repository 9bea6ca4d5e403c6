// The sparse MLA fuzzer's choices of ABI 1.6 (abi/attnrt/ops/sparse_mla.h, docs/sparse-mla.md):
// global slot ids (topk_value_mode 3: ori_sparse_indices and cmp_sparse_indices list each row's
// keys as block_id * block_size + offset, -1 skipped) and PA_BBND caches with a block stride (one
// layer's view of a bigger buffer). Decoded after every earlier choice of the fuzzer, so that the
// inputs of its corpus keep their meaning: an exhausted input decodes to "nothing of ABI 1.6".
// Now and then a value the runtime must refuse (Case::expect_refused). Header-only: the fuzzer
// includes it once.
#pragma once

#include <climits>
#include <cstring>
#include <string>

#include "sparse_mla_fuzz_case.h"

namespace sparse_mla_fuzz {

// Row-major index lists of `rows` x `width` slots of a cache of `slots` tokens: -1 one in eight,
// now and then a row of -1 only, the rest uniform (so repeats occur).
inline void FillSlots(Tensor& idx, int64_t rows, int64_t width, int64_t slots, Rng& rng) {
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = rng.Next() % 7 == 0;
    for (int64_t e = 0; e < width; ++e) {
      const uint64_t x = rng.Next();
      idx.i32()[r * width + e] =
          empty || x % 8 == 0 ? -1 : static_cast<int32_t>((x >> 8) % static_cast<uint64_t>(slots));
    }
  }
}

// A slot list of the query rows' shape: TND q (rows, 1, width), BSND q (B, rows / B, 1, width).
inline void MakeSlotList(Case& k, int input, int64_t B, int64_t q_rows, int64_t width) {
  if (k.a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND) {
    k.in[input].Make(kI32, {q_rows, 1, width});
  } else {
    k.in[input].Make(kI32, {B, q_rows / B, 1, width});
  }
}

inline int64_t CacheSlots(const Case& k, int input) {
  const Tensor& t = k.in[input];
  return t.present() && t.shape.size() == 4 ? t.shape[0] * t.shape[1] : 0;
}

// topk_value_mode 3 on a PA_BBND problem: the masks, block tables and kv lengths go (now and then
// one stays, which is refused), slot lists of width W for ori and K for cmp.
inline void ToGlobalSlots(Choices& c, Case& k, Rng& rng, int64_t B, int64_t q_rows) {
  attnrt_sparse_mla_attributes& a = k.a;
  a.topk_value_mode = 3;
  a.ori_mask_mode = 0;
  a.cmp_mask_mode = 0;
  a.ori_win_left = -1;
  a.ori_win_right = -1;
  if (c.OneIn(16)) {
    (c.OneIn(2) ? a.ori_mask_mode : a.cmp_mask_mode) = ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL;
    k.Refuse("a mask with topk_value_mode 3");
  }
  constexpr int kTableInputs[] = {
      ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
      ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV,
      ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV};
  const int keep = c.OneIn(16) ? c.From(kTableInputs) : -1;
  for (int i : kTableInputs) {
    if (i != keep) k.in[i].data.reset();
  }
  if (keep >= 0 && k.in[keep].present()) k.Refuse("input " + std::to_string(keep) + " kept");

  // ori_sparse_indices, W wide (0 is refused).
  constexpr int64_t kWidths[] = {16, 1, 128, 7, 200, 64, 0};
  const int64_t W = c.From(kWidths);
  if (W == 0) k.Refuse("W = 0");
  MakeSlotList(k, ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, B, q_rows, W);
  FillSlots(k.in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES], q_rows, W,
            CacheSlots(k, ATTNRT_SPARSE_MLA_INPUT_ORI_KV), rng);

  // cmp_sparse_indices: cmp_kv's slots (HCA, cmp_kv without a list, is refused: mostly it gets
  // one); K as decoded before, or a new width.
  const bool has_cmp = k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV].present();
  Tensor& cmp_idx = k.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
  if (has_cmp && (cmp_idx.present() || !c.OneIn(4))) {
    int64_t K = cmp_idx.present() ? cmp_idx.shape.back() : 0;
    if (K == 0 || c.OneIn(3)) K = 1 + c.Pick(96);
    MakeSlotList(k, ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES, B, q_rows, K);
    FillSlots(cmp_idx, q_rows, K, CacheSlots(k, ATTNRT_SPARSE_MLA_INPUT_CMP_KV), rng);
  } else if (has_cmp) {
    k.Refuse("cmp_kv without cmp_sparse_indices");
  }

  // One entry out of range: below -1, at or past num_blocks * block_size.
  if (W > 0 && c.OneIn(6)) {
    const bool cmp = cmp_idx.present() && c.OneIn(2);
    Tensor& idx = cmp ? cmp_idx : k.in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
    const int64_t n = static_cast<int64_t>(idx.bytes / 4);
    const int64_t slots =
        CacheSlots(k, cmp ? ATTNRT_SPARSE_MLA_INPUT_CMP_KV : ATTNRT_SPARSE_MLA_INPUT_ORI_KV);
    const int64_t bad[] = {-2, slots, slots + 1 + static_cast<int64_t>(rng.Next() % 1000),
                           INT32_MIN, INT32_MAX};
    if (n > 0) {
      const uint64_t at = rng.Next() % static_cast<uint64_t>(n);
      idx.i32()[at] = static_cast<int32_t>(c.From(bad));
      k.Refuse(std::string(cmp ? "cmp" : "ori") + "_sparse_indices entry " + std::to_string(at) +
               " = " + std::to_string(idx.i32()[at]) + " of " + std::to_string(slots) + " slots");
    }
  }
}

// A PA_BBND cache as a strided view: 0 compact as built; 1, 2 blocks a gap apart (any number of
// elements, odd ones too), in a buffer that starts before the view; 3 explicit compact strides
// and an offset; 4 a block stride below the block's size (overlapping blocks); 5 a token or
// element stride other than the compact one. 4 and 5 are refused; their buffer is whatever the
// strides describe, filled with 0xFF. The views' gaps hold 0xFF bytes (NaN in every token format)
// that no kernel may read.
inline void StrideCache(Choices& c, Case& k, Rng& rng, int side) {
  Tensor& t = k.in[side == 0 ? ATTNRT_SPARSE_MLA_INPUT_ORI_KV : ATTNRT_SPARSE_MLA_INPUT_CMP_KV];
  const uint32_t kind = c.Pick(6);
  if (kind == 0 || !t.present() || t.shape.size() != 4) return;
  const std::vector<int64_t> shape = t.shape;
  const int64_t element = t.dtype.bits / 8;
  const int64_t compact = shape[1] * shape[2] * shape[3];
  std::vector<int64_t> strides = {compact, shape[3], shape[3], 1};
  bool valid = true;
  if (kind == 1 || kind == 2) {
    strides[0] += 1 + static_cast<int64_t>(
                          rng.Next() % static_cast<uint64_t>(kind == 1 ? shape[3] : 3 * compact));
  } else if (kind == 4 && shape[0] > 1) {
    const int64_t below[] = {compact - 1, compact / 2, 0, -compact};
    strides[0] = c.From(below);
    valid = false;
  } else if (kind >= 4) {
    if (shape[1] > 1 && c.OneIn(2)) {
      strides[1] = shape[3] + 1;
    } else {
      strides[3] = 2;
    }
    valid = false;
  }
  // The bytes the view spans (negative strides reach below the first element).
  int64_t low = 0, high = 0;
  for (size_t d = 0; d < 4; ++d) {
    const int64_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? low : high) += reach;
  }
  const int64_t lead = static_cast<int64_t>(rng.Next() % 64) * element;  // bytes before the view
  Tensor view;
  view.dtype = t.dtype;
  view.shape = shape;
  view.strides = strides;
  view.byte_offset = static_cast<uint64_t>(lead - low * element);
  view.bytes = static_cast<size_t>(lead + (high - low + 1) * element);
  view.data.reset(new unsigned char[view.bytes]);
  std::memset(view.data.get(), 0xFF, view.bytes);
  if (valid) {
    for (int64_t b = 0; b < shape[0]; ++b) {
      std::memcpy(view.data.get() + view.byte_offset + b * strides[0] * element,
                  t.data.get() + b * compact * element, static_cast<size_t>(compact * element));
    }
    k.compact_kv[side] = std::move(t);
    k.strided = true;
  } else {
    k.Refuse(std::string(side == 0 ? "ori" : "cmp") + "_kv strides [" + std::to_string(strides[0]) +
             ", " + std::to_string(strides[1]) + ", " + std::to_string(strides[2]) + ", " +
             std::to_string(strides[3]) + "] for shape [" + std::to_string(shape[0]) + ", " +
             std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ", " +
             std::to_string(shape[3]) + "]");
  }
  t = std::move(view);
}

// Everything of ABI 1.6 one input asks for (decoded after every earlier choice).
inline void DecodeAbi16(Choices& c, Case& k, Rng& rng, int64_t B, int64_t q_rows) {
  if (k.a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    // Global slot ids need PA_BBND.
    if (c.OneIn(16)) {
      k.a.topk_value_mode = 3;
      k.Refuse("topk_value_mode 3 without PA_BBND");
    }
    return;
  }
  if (c.Pick(3) != 0) ToGlobalSlots(c, k, rng, B, q_rows);
  StrideCache(c, k, rng, 0);
  StrideCache(c, k, rng, 1);
}

}  // namespace sparse_mla_fuzz
