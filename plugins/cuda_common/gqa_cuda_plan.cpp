// Host-side planning of the CUDA GroupQueryAttention kernels (see gqa_cuda_plan.h).
#include "gqa_cuda_plan.h"

#include <algorithm>
#include <cstdio>

namespace attnrt::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Shared memory rows are padded by 8 elements (16 bytes) so that the 32-bit fragment loads of
// one warp fall in different banks.
constexpr int32_t kSmemPad = 8;

}  // namespace

std::vector<BatchInfo> BuildBatchInfo(const attnrt_gqa_problem& p, const int32_t* seqlens_k,
                                      int32_t total_sequence_length) {
  const int64_t B = p.batch_size;
  const int64_t S = p.sequence_length;
  const int64_t L = p.packed_qkv ? S : p.kv_sequence_length;
  const bool first_prompt = S == total_sequence_length;
  std::vector<BatchInfo> info(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Tb = int64_t{seqlens_k[b]} + 1;
    const int64_t offset = (first_prompt || (!p.has_past && L > 0)) ? 0 : Tb - S;
    const int64_t rows = L == 0 ? Tb : std::min(Tb, offset + L);
    BatchInfo& bi = info[static_cast<size_t>(b)];
    bi.offset = static_cast<int32_t>(offset);
    bi.rows = static_cast<int32_t>(rows);
    bi.copy_rows = static_cast<int32_t>(L == 0 ? Tb : offset);
    bi.rope_base = static_cast<int32_t>(Tb - S);
  }
  return info;
}

int64_t CacheCapacity(const attnrt_gqa_problem& p) {
  if (p.has_present) return p.present_sequence_length;
  const int64_t L = p.packed_qkv ? p.sequence_length : p.kv_sequence_length;
  return (p.has_past ? p.past_sequence_length : 0) + L;
}

int32_t MaxSplits(int64_t cache_capacity) {
  return static_cast<int32_t>(
      std::clamp<int64_t>(CeilDiv(cache_capacity, kMinKeysPerSplit), 1, kMaxSplits));
}

SplitPlan PlanSplits(int64_t work_blocks, int64_t max_rows, int32_t sm_count, int32_t max_splits) {
  SplitPlan plan;
  const int64_t rows = std::max<int64_t>(max_rows, 1);
  const int64_t target_blocks = 2 * int64_t{std::max(sm_count, 1)};
  int64_t splits = CeilDiv(target_blocks, std::max<int64_t>(work_blocks, 1));
  // floor(rows / kMinKeysPerSplit) splits keep every split at least kMinKeysPerSplit long.
  splits = std::min(splits, rows / kMinKeysPerSplit);
  splits = std::clamp<int64_t>(splits, 1, std::max(max_splits, 1));
  const int64_t keys = CeilDiv(rows, splits);
  plan.num_splits = static_cast<int32_t>(CeilDiv(rows, keys));
  plan.keys_per_split = static_cast<int32_t>(keys);
  return plan;
}

int64_t DecodeQueryTiles(int64_t group_size) { return CeilDiv(group_size, 16); }

FlashLaunch FlashLaunchFor(int32_t head_size) {
  FlashLaunch l;
  l.block_k = head_size > 128 ? 32 : 64;
  const size_t row = static_cast<size_t>(head_size + kSmemPad) * 2;  // 2-byte elements
  l.smem_bytes = row * static_cast<size_t>(l.block_q + 2 * kFlashStages * l.block_k);
  return l;
}

DecodeLaunch DecodeLaunchFor(int32_t head_size) {
  DecodeLaunch l;
  l.keys_per_tile = head_size > 128 ? 16 : 32;
  const size_t row = static_cast<size_t>(head_size + kSmemPad) * 2;
  const int32_t warps = l.threads / 32;
  const size_t q_tile = row * 16;
  const size_t staging = row * static_cast<size_t>(2 * l.keys_per_tile * warps);
  // After the key loop the staging area holds each warp's (16 x H) fp32 accumulators and its
  // per-row max and sum.
  const size_t combine =
      static_cast<size_t>(warps) * (16 * static_cast<size_t>(head_size) + 2 * 16) * 4;
  l.smem_bytes = q_tile + std::max(staging, combine);
  return l;
}

WorkspaceLayout ComputeWorkspace(const attnrt_gqa_problem& p, KernelKind kind) {
  WorkspaceLayout w;
  const size_t B = static_cast<size_t>(p.batch_size);
  const size_t S = static_cast<size_t>(p.sequence_length);
  const size_t N = static_cast<size_t>(p.num_heads);
  const size_t Nkv = static_cast<size_t>(p.kv_num_heads);
  const size_t H = static_cast<size_t>(p.head_size);
  const size_t C = static_cast<size_t>(CacheCapacity(p));
  const size_t elem = 2;
  size_t at = 0;
  auto take = [&at](size_t bytes, size_t* offset, size_t* size) {
    *offset = at;
    *size = bytes;
    at += AlignUp(bytes);
  };
  take(B * sizeof(BatchInfo), &w.batch_info, &w.batch_info_bytes);
  if (p.attributes.do_rotary == 1) take(B * S * N * H * elem, &w.q_rotated, &w.q_rotated_bytes);
  if (!p.has_present) {
    size_t unused = 0;
    take(B * Nkv * C * H * elem, &w.k_scratch, &w.scratch_bytes);
    take(B * Nkv * C * H * elem, &w.v_scratch, &unused);
  }
  if (kind == KernelKind::kXqa || kind == KernelKind::kFlashDecode) {
    const size_t splits = static_cast<size_t>(MaxSplits(static_cast<int64_t>(C)));
    take(B * N * splits * H * sizeof(float), &w.partial_out, &w.partial_out_bytes);
    take(B * N * splits * 2 * sizeof(float), &w.partial_ml, &w.partial_ml_bytes);
  }
  if (kind == KernelKind::kUnfused) {
    take(B * N * S * C * sizeof(float), &w.scores, &w.scores_bytes);
  }
  w.total = at;
  return w;
}

std::string MisalignedPointer(const attnrt_gqa_args& args) {
  struct Named {
    const char* name;
    const void* ptr;
  };
  const Named pointers[] = {
      {"query", args.query},
      {"key", args.key},
      {"value", args.value},
      {"past_key", args.past_key},
      {"past_value", args.past_value},
      {"output", args.output},
      {"present_key", args.present_key},
      {"present_value", args.present_value},
      {"workspace", args.workspace},
  };
  for (const Named& n : pointers) {
    const auto address = reinterpret_cast<uintptr_t>(n.ptr);
    if (address % 16 != 0) {
      char buffer[128];
      std::snprintf(buffer, sizeof buffer, "%s (%p) is not 16-byte aligned", n.name, n.ptr);
      return buffer;
    }
  }
  return {};
}

}  // namespace attnrt::cuda
