// Host-side planning of the CUDA GroupQueryAttention kernels: per-batch lengths, cache capacity,
// split-KV planning, launch shapes and workspace layout. Plain C++ (no CUDA header): compiled by
// the host compiler and unit-tested without a GPU (tests/plugins/cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnrt/ops/gqa.h"
#include "gqa_cuda_params.h"

namespace attnrt::cuda {

enum class KernelKind { kXqa, kFlash, kFlashDecode, kUnfused };

// Per-batch lengths (ONNX Runtime's phases and present rules) for one run (seqlens_k in host
// memory, as the ABI requires): offset 0 in the first prompt and in a prompt without a past, else
// T_b - S; rows T_b with shared KV (L == 0), else min(T_b, offset + L); copy_rows T_b with shared
// KV, else the offset; rope_base T_b - S.
std::vector<BatchInfo> BuildBatchInfo(const attnrt_gqa_problem& p, const int32_t* seqlens_k,
                                      int32_t total_sequence_length);

// Rows per (batch, kv head) of the cache the attention reads: the present buffer, or without a
// present output a scratch cache of P + L rows in the workspace.
int64_t CacheCapacity(const attnrt_gqa_problem& p);

// Split-KV planning for decode. Work items are (batch, kv head, 16-row query tile) blocks; the KV
// range is split until about two blocks per SM are in flight, never below kMinKeysPerSplit keys
// per split and never beyond max_splits (the workspace holds MaxSplits(C) partial results).
constexpr int32_t kMinKeysPerSplit = 256;
constexpr int32_t kMaxSplits = 64;
struct SplitPlan {
  int32_t num_splits = 1;
  int32_t keys_per_split = 0;
};
int32_t MaxSplits(int64_t cache_capacity);
SplitPlan PlanSplits(int64_t work_blocks, int64_t max_rows, int32_t sm_count, int32_t max_splits);

// Query tiles of 16 rows that cover one group of query heads in the decode kernels.
int64_t DecodeQueryTiles(int64_t group_size);

// Launch shape of the flash forward kernel for one head size: 4 warps of 16 query rows, key tiles
// of block_k rows (32 for H = 256), a Q tile and kFlashStages stages of K and V tiles in shared
// memory (at most about 101 KiB, inside the 163 KiB of sm_80).
constexpr int32_t kFlashStages = 2;
struct FlashLaunch {
  int32_t threads = 128;
  int32_t block_q = 64;
  int32_t block_k = 64;
  size_t smem_bytes = 0;
};
FlashLaunch FlashLaunchFor(int32_t head_size);

// Launch shape of the decode kernel: 4 warps, each streaming its own tiles of keys_per_tile keys
// through shared memory, combined in shared memory at the end.
struct DecodeLaunch {
  int32_t threads = 128;
  int32_t keys_per_tile = 32;
  size_t smem_bytes = 0;
};
DecodeLaunch DecodeLaunchFor(int32_t head_size);

// Workspace regions (byte offsets, each 256-byte aligned); a size of 0 means not used. The
// batch_info region is only read when B > kInlineBatches.
struct WorkspaceLayout {
  size_t batch_info = 0, batch_info_bytes = 0;
  size_t q_rotated = 0, q_rotated_bytes = 0;
  size_t k_scratch = 0, v_scratch = 0, scratch_bytes = 0;  // each of K and V
  size_t partial_out = 0, partial_out_bytes = 0;
  size_t partial_ml = 0, partial_ml_bytes = 0;
  size_t scores = 0, scores_bytes = 0;
  size_t total = 0;
};
WorkspaceLayout ComputeWorkspace(const attnrt_gqa_problem& p, KernelKind kind);

// Empty when every device pointer the kernels load or store with 16-byte vectors is 16-byte
// aligned; else "<name> (address) is not 16-byte aligned".
std::string MisalignedPointer(const attnrt_gqa_args& args);

}  // namespace attnrt::cuda
