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
};

// Owning host buffer behind an attnrt_tensor.
struct SparseMlaBuffer {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  attnrt_tensor tensor{};
  bool present = false;
  void make(attnrt_dtype dtype, std::vector<int64_t> dims, bool allocate);
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
void make_sparse_mla_workload(const SparseMlaConfig& config, bool allocate, uint64_t seed,
                              SparseMlaWorkload* out);

// "CSA quant_mode 1 TND/PA_BBND B=1 q_len=1 kv_len=8192 heads=64 topk=2048 r=4 window=128 ..."
std::string describe_sparse_mla(const SparseMlaConfig& config);

}  // namespace plugin_inspect
