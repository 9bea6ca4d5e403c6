// The parts of SparseMlaCase for ABI 1.6: topk_value_mode 3 slot lists (global slot ids into both
// PA_BBND caches) and PA_BBND caches passed as strided views of a larger buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "sparse_mla_case.h"

namespace attnrt_test {

SparseMlaSpec SlotsSpec(int32_t scenario, int32_t quant_mode) {
  SparseMlaSpec s;
  s.scenario = scenario;
  s.quant_mode = quant_mode;
  s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  s.topk_value_mode = 3;
  s.ori_mask_mode = 0;
  s.cmp_mask_mode = 0;
  s.residual = false;
  s.seqused_cmp = false;
  return s;
}

void SparseMlaCase::MakeSlotIndices(std::mt19937_64& rng, int64_t total_q_rows) {
  const SparseMlaSpec& s = spec_;
  for (int input :
       {ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
        ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV,
        ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV,
        ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV}) {
    in_[input] = Tensor();
  }
  const bool tnd_q = s.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const int64_t B = static_cast<int64_t>(s.s1.size());
  // One row of `width` slot ids into a cache of `slots` tokens, in one of three patterns: random
  // slots with some -1 and repeats; a run of consecutive slots (a window crossing block
  // boundaries) after a few leading -1; random slots then trailing -1.
  auto make = [&](int64_t width, int64_t slots) {
    std::vector<int32_t> idx(total_q_rows * width, -1);
    std::uniform_int_distribution<int64_t> slot(0, slots - 1);
    for (int64_t row = 0; row < total_q_rows; ++row) {
      int32_t* r = idx.data() + row * width;
      switch (rng() % 3) {
        case 0:
          for (int64_t k = 0; k < width; ++k) {
            const uint64_t roll = rng() % 8;
            r[k] = roll == 0              ? -1
                   : (roll == 1 && k > 0) ? r[k - 1]
                                          : static_cast<int32_t>(slot(rng));
          }
          break;
        case 1: {
          const int64_t lead = static_cast<int64_t>(rng() % (width / 4 + 1));
          const int64_t start = slot(rng);
          for (int64_t k = lead; k < width; ++k) {
            r[k] = static_cast<int32_t>((start + k) % slots);
          }
          break;
        }
        default: {
          const int64_t used = 1 + static_cast<int64_t>(rng() % width);
          for (int64_t k = 0; k < used; ++k) r[k] = static_cast<int32_t>(slot(rng));
          break;
        }
      }
    }
    return idx;
  };
  auto shape = [&](int64_t width) -> std::vector<int64_t> {
    if (tnd_q) return {q_rows_, 1, width};
    return {B, q_rows_, 1, width};
  };
  in_[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES] =
      I32(make(s.ori_topk, ori_rows_ * s.block_size), shape(s.ori_topk));
  if (s.scenario == ATTNRT_SPARSE_MLA_CSA) {
    in_[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] =
        I32(make(s.topk, cmp_rows_ * s.block_size), shape(s.topk));
  }
}

void SparseMlaCase::SetKvView(int input, Tensor storage, std::vector<int64_t> strides,
                              uint64_t byte_offset) {
  KvView& v = views_[input == ATTNRT_SPARSE_MLA_INPUT_ORI_KV ? 0 : 1];
  v.set = true;
  v.storage = std::move(storage);
  v.strides = std::move(strides);
  v.byte_offset = byte_offset;
}

void SparseMlaCase::ClearKvViews() {
  for (KvView& v : views_) v = KvView();
}

const attnrt_tensor* SparseMlaCase::ViewDescriptor(int input) {
  KvView& v = views_[input == ATTNRT_SPARSE_MLA_INPUT_ORI_KV ? 0 : 1];
  if (!v.set || in_[input].empty()) return nullptr;
  const attnrt_tensor compact = *in_[input].get();
  v.desc = *v.storage.get();
  v.desc.dtype = compact.dtype;
  v.desc.ndim = compact.ndim;
  v.desc.shape = compact.shape;
  v.desc.strides = v.strides.data();
  v.desc.byte_offset = v.byte_offset;
  return &v.desc;
}

void UseInterleavedCache(SparseMlaCase& c, int input, int64_t page_bytes, int64_t layers,
                         int64_t layer, int64_t lead_bytes, int64_t dim2_stride) {
  Tensor& compact = c.in()[input];
  const std::vector<int64_t>& shape = compact.shape();  // (num_blocks, block_size, 1, kv_d)
  const int64_t nb = shape[0];
  const int64_t block_bytes = static_cast<int64_t>(compact.bytes()) / nb;
  const int64_t elem = block_bytes / (shape[1] * shape[3]);
  if (page_bytes < block_bytes || page_bytes % elem != 0 || lead_bytes % elem != 0) {
    ADD_FAILURE() << "page of " << page_bytes << " bytes for blocks of " << block_bytes;
    return;
  }
  Tensor storage(kU8, {lead_bytes + nb * layers * page_bytes});
  auto* dst = static_cast<uint8_t*>(storage.data());
  std::memset(dst, 0xFF, storage.bytes());
  const auto* src = static_cast<const uint8_t*>(compact.data());
  for (int64_t k = 0; k < nb; ++k) {
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t from = l == layer ? k : (k + 1 + l) % nb;
      std::memcpy(dst + lead_bytes + (k * layers + l) * page_bytes, src + from * block_bytes,
                  block_bytes);
    }
  }
  std::vector<int64_t> strides{layers * page_bytes / elem, shape[3],
                               dim2_stride < 0 ? shape[3] : dim2_stride, 1};
  c.SetKvView(input, storage, strides, lead_bytes + layer * page_bytes);
}

}  // namespace attnrt_test
