// bench_sparse_mla's FLOP and byte counts rest on the keys each query row attends, which the bench
// counts from the inputs it generates. This test recounts them for every bench case with the
// float64 reference's key selection (tests/common/sparse_mla_reference.h, SparseMlaGetRowKeys),
// and the bytes from the reference's token sizes.
#include <gtest/gtest.h>

#include <string>

#include "common/sparse_mla_reference.h"
#include "sparse_mla_problem.h"

namespace {

namespace ref = attnrt::testref;
using attnrt_bench::SparseMlaCase;
using attnrt_bench::SparseMlaProblem;

const int32_t* I32(const SparseMlaProblem& p, int input) {
  return p.inputs[input] == nullptr ? nullptr : static_cast<const int32_t*>(p.inputs[input]->data);
}

ref::SparseMlaRefInputs RefInputs(const SparseMlaProblem& p) {
  const SparseMlaCase& c = p.c;
  const attnrt_sparse_mla_attributes a = c.Attributes();
  ref::SparseMlaRefInputs in;
  in.scenario = c.scenario == ATTNRT_SPARSE_MLA_SWA   ? ref::SparseMlaScenario::kSWA
                : c.scenario == ATTNRT_SPARSE_MLA_HCA ? ref::SparseMlaScenario::kHCA
                                                      : ref::SparseMlaScenario::kCSA;
  in.quant_mode = a.quant_mode;
  in.softmax_scale = a.softmax_scale;
  in.cmp_ratio = a.cmp_ratio;
  in.ori_mask_mode = a.ori_mask_mode;
  in.cmp_mask_mode = a.cmp_mask_mode;
  in.ori_win_left = a.ori_win_left;
  in.ori_win_right = a.ori_win_right;
  EXPECT_EQ(a.layout_q, ATTNRT_SPARSE_MLA_LAYOUT_TND);
  EXPECT_EQ(a.layout_kv, ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND);
  in.layout_q = ref::SparseMlaLayout::kTND;
  in.layout_kv = ref::SparseMlaLayout::kPA_BBND;
  in.topk_value_mode = a.topk_value_mode;
  const attnrt_tensor& q = *p.inputs[ATTNRT_SPARSE_MLA_INPUT_Q];
  in.b = p.inputs[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q]->shape[0] - 1;
  in.q_t = q.shape[0];
  in.q_n = q.shape[1];
  in.q = static_cast<const uint16_t*>(q.data);
  const attnrt_tensor& ori = *p.inputs[ATTNRT_SPARSE_MLA_INPUT_ORI_KV];
  in.ori_kv = static_cast<const uint8_t*>(ori.data);
  in.ori_kv_block_nums = ori.shape[0];
  in.ori_kv_block_size = ori.shape[1];
  in.ori_block_table_cols = p.inputs[ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE]->shape[1];
  in.ori_block_table = I32(p, ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE);
  if (const attnrt_tensor* cmp = p.inputs[ATTNRT_SPARSE_MLA_INPUT_CMP_KV]) {
    in.cmp_kv = static_cast<const uint8_t*>(cmp->data);
    in.cmp_kv_block_nums = cmp->shape[0];
    in.cmp_kv_block_size = cmp->shape[1];
    in.cmp_block_table_cols = p.inputs[ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE]->shape[1];
    in.cmp_block_table = I32(p, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE);
  }
  if (const attnrt_tensor* idx = p.inputs[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES]) {
    in.cmp_kv_k = idx->shape[2];
    in.cmp_sparse_indices = static_cast<const int32_t*>(idx->data);
  }
  in.cu_seqlens_q = I32(p, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q);
  in.seqused_ori_kv = I32(p, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV);
  in.cmp_residual_kv = I32(p, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV);
  in.sinks = static_cast<const float*>(p.inputs[ATTNRT_SPARSE_MLA_INPUT_SINKS]->data);
  return in;
}

TEST(SparseMlaBenchProblem, KeysFlopsAndBytesMatchTheReferenceKeySelection) {
  const auto cases = attnrt_bench::SparseMlaCases();
  ASSERT_EQ(cases.size(), 27u);  // 9 shapes x quant_mode 1, 2, 3
  for (const SparseMlaCase& c : cases) {
    SCOPED_TRACE(c.Name());
    const auto p = attnrt_bench::BuildSparseMlaProblem(c);
    const ref::SparseMlaRefInputs in = RefInputs(*p);
    const int64_t ori_bytes = c.quant_mode == 1   ? ref::kQuantMode1TokenBytes
                              : c.quant_mode == 2 ? ref::kQuantMode2TokenBytes
                                                  : ref::kQuantMode3OriTokenBytes;
    const int64_t cmp_bytes = c.quant_mode == 1   ? ref::kQuantMode1TokenBytes
                              : c.quant_mode == 2 ? ref::kQuantMode2TokenBytes
                                                  : ref::kTq4SlotBytes;
    int64_t ori_keys = 0, cmp_keys = 0, rows = 0;
    for (int64_t b = 0; b < in.b; ++b) {
      const int64_t s1 = in.cu_seqlens_q[b + 1] - in.cu_seqlens_q[b];
      for (int64_t i = 0; i < s1; ++i, ++rows) {
        ref::SparseMlaRowKeys keys;
        std::string error;
        ASSERT_TRUE(ref::SparseMlaGetRowKeys(in, b, i, &keys, &error)) << error;
        ASSERT_TRUE(keys.valid);
        ori_keys += keys.ori_hi - keys.ori_lo;
        cmp_keys += static_cast<int64_t>(keys.cmp.size());
      }
    }
    EXPECT_EQ(rows, c.batch * c.s1);
    EXPECT_EQ(p->query_tokens, rows);
    EXPECT_EQ(p->ori_keys, ori_keys);
    EXPECT_EQ(p->cmp_keys, cmp_keys);
    EXPECT_EQ(p->kv_bytes, ori_keys * ori_bytes + cmp_keys * cmp_bytes);
    EXPECT_EQ(p->Flops(), 4.0 * 512 * static_cast<double>(c.heads * (ori_keys + cmp_keys)));
    // Every row attends something of both kinds where the scenario has them.
    EXPECT_EQ(ori_keys, rows * c.window);
    if (c.scenario != ATTNRT_SPARSE_MLA_SWA) {
      EXPECT_GT(cmp_keys, 0);
    }
  }
}

// The decode shapes by hand: the window (128) plus top-k 2048 (CSA at 8k, where all 2048
// compressed tokens are visible) or every compressed token of a 32k context at r 128 (HCA).
TEST(SparseMlaBenchProblem, DecodeKeysPerRow) {
  for (const SparseMlaCase& c : attnrt_bench::SparseMlaCases()) {
    if (c.s1 != 1) continue;
    SCOPED_TRACE(c.Name());
    const auto p = attnrt_bench::BuildSparseMlaProblem(c);
    const int64_t per_row = c.scenario == ATTNRT_SPARSE_MLA_CSA   ? 128 + 2048
                            : c.scenario == ATTNRT_SPARSE_MLA_HCA ? 128 + 32768 / 128
                                                                  : 128;
    EXPECT_EQ(p->ori_keys + p->cmp_keys, per_row * c.batch);
  }
}

}  // namespace
