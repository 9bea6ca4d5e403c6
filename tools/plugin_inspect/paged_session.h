// One paged GroupQueryAttention op (attnrt/ops/paged_gqa.h) serving a GQA workload: the sequences
// live in a block pool (attnrt/block_pool.h) and K/V in block pools [num_blocks, block_size, Nkv,
// H], so `run --paged` exercises the paged cache on the same inputs the contiguous run uses and
// is checked the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt_handles.h"
#include "gqa_session.h"
#include "gqa_workload.h"

namespace plugin_inspect {

class PagedSession {
 public:
  // `config` is the workload's first call: batch, heads, head size, cache dtype and the capacity
  // (past_len) every sequence may reach. allocate = false builds descriptors only (explain).
  PagedSession(attnrt_runtime* runtime, const attnrt_gqa_attributes& attributes, int32_t block_size,
               int32_t kv_layout, const GqaConfig& config, bool allocate,
               int32_t p_precision = ATTNRT_P_PRECISION_EXACT);
  ~PagedSession();
  PagedSession(const PagedSession&) = delete;
  PagedSession& operator=(const PagedSession&) = delete;

  // Appends each sequence's new tokens (T_b from the tensors' seqlens_k) to the block pool,
  // making the copies its copy-on-write asks for, runs the paged op on the tensors' inputs with
  // the pools in place of past_key/past_value, then writes rows [0, T_b) of every sequence back
  // into the tensors' present_key/present_value, so they compare with a contiguous run.
  StepResult step(const GqaTensors& tensors);
  // Every paged kernel in rank order for these tensors' shapes (data is not read). With a non-CPU
  // `device`, every tensor but the host-read seqlens_k, total_sequence_length and block_table is
  // described as living there. `tensors_json`, when given, receives each tensor's name, shape,
  // dtype and device.
  ExplanationPtr explain(const GqaTensors& tensors, attnrt_device device = {ATTNRT_DEVICE_CPU, 0},
                         nlohmann::ordered_json* tensors_json = nullptr);
  PlanCacheStats plan_cache_stats() const;
  // Blocks in use, of how many, and the pool's internal fragmentation (0..1).
  attnrt_block_pool_stats pool_stats() const;

 private:
  struct Binding;
  Binding bind(const GqaTensors& tensors);

  OpPtr op_;
  attnrt_block_pool* pool_ = nullptr;
  int32_t block_size_;
  int32_t kv_layout_;  // attnrt_paged_kv_layout
  int64_t batch_;
  int64_t kv_heads_;
  int64_t slots_;  // max_blocks_per_seq
  std::vector<int64_t> sequences_;
  std::unique_ptr<HostTensor> key_pool_;
  std::unique_ptr<HostTensor> value_pool_;
  std::unique_ptr<HostTensor> table_;
  std::vector<char> workspace_storage_;
};

}  // namespace plugin_inspect
