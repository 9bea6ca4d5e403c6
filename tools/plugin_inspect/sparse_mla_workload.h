// A sparse MLA (MixedQuantSparseFlashMla) workload for explain and run: shapes from flags, random
// queries, KV rows quantized with the public encoders into the chosen quant mode and layout,
// top-k rows of distinct causally visible compressed tokens (CSA). Every batch has the same q_len
// and kv_len; PA_BBND block tables map to shuffled physical blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnrt/ops/sparse_mla.h"

namespace plugin_inspect {

struct SparseMlaConfig {
  attnrt_sparse_mla_attributes attributes{};
  int32_t scenario = ATTNRT_SPARSE_MLA_CSA;
  bool fp16 = false;  // q / attn_out float16 (quant_mode 3 only)
  int64_t batch = 1, q_len = 1, kv_len = 1024, num_heads = 64, topk = 2048, block_size = 64;
  // PA_BBND: bytes from one cache block to the next (0: compact). The caches are then views of a
  // bigger buffer whose gaps after each block hold 0xFF bytes (NaN in every token format).
  int64_t block_stride = 0;
  // 1: cmp_sparse_indices hold logical positions (`attributes` as they are); 3: global slot ids
  // (see make_sparse_mla_workload; the op gets sparse_mla_op_attributes).
  int32_t topk_value_mode = 1;
};

// The attributes the op is created with: `attributes`, or for topk_value_mode 3 the same with
// topk_value_mode 3, both masks 0 and no window (the slot lists are the selection).
attnrt_sparse_mla_attributes sparse_mla_op_attributes(const SparseMlaConfig& config);

// Owning host buffer behind an attnrt_tensor.
struct SparseMlaBuffer {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact
  std::vector<uint8_t> bytes;
  attnrt_tensor tensor{};
  bool present = false;
  void make(attnrt_dtype dtype, std::vector<int64_t> dims, bool allocate);
  // A PA_BBND cache (num_blocks, block_size, 1, kv_d) whose blocks lie `block_stride` elements
  // apart, in a buffer of 0xFF bytes (blocks at least block_size * kv_d elements apart in it).
  void make_strided(attnrt_dtype dtype, std::vector<int64_t> dims, int64_t block_stride,
                    bool allocate);
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
};

struct SparseMlaWorkload {
  SparseMlaBuffer in[ATTNRT_SPARSE_MLA_NUM_INPUTS];
  SparseMlaBuffer out[ATTNRT_SPARSE_MLA_NUM_OUTPUTS];
  int64_t query_tokens = 0;
  int64_t kv_bytes_per_run = 0;  // KV bytes the visible keys occupy, summed over query rows

  // Pointer arrays for the ABI; `with_metadata` false for the metadata op.
  std::vector<const attnrt_tensor*> inputs(bool with_metadata) const;
  std::vector<const attnrt_tensor*> outputs() const;
};

// Throws UsageError for inconsistent flags. `allocate` false builds descriptors only (explain).
// With topk_value_mode 3 (global slot ids, PA_BBND, SWA or CSA) the workload is the one of
// topk_value_mode 1 with the same seed, addressed as vLLM does: each query row's ori window
// positions and its top-k compressed positions, mapped through the block tables to
// block_id * block_size + offset (-1 where the row has fewer keys), in ori_sparse_indices and
// cmp_sparse_indices; the masks are 0 and the block tables, seqused_ori_kv and cmp_residual_kv
// absent. The row's keys, in order, are those of the topk_value_mode 1 workload.
void make_sparse_mla_workload(const SparseMlaConfig& config, bool allocate, uint64_t seed,
                              SparseMlaWorkload* out);

// "CSA quant_mode 1 TND/PA_BBND B=1 q_len=1 kv_len=8192 heads=64 topk=2048 r=4 window=128 ..."
std::string describe_sparse_mla(const SparseMlaConfig& config);

}  // namespace plugin_inspect
