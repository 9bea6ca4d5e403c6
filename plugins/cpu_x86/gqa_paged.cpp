// paged_gqa.flash kernels (baseline ISA): acceptance, workspace and run of GroupQueryAttention over
// a paged KV cache; the attention itself is gqa.flash's (see gqa_paged.h).
#include "gqa_paged.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "gqa_convert.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// Above gqa.flash: a paged problem has no other kernel of its op here, the bonus only orders the
// ISAs.
constexpr int32_t kPagedPriority = 200;
constexpr int32_t kAvx2Bonus = 20;
constexpr int32_t kAvx512Bonus = 40;

// The contiguous gqa.flash kernel a paged kernel mirrors: its supports() and block operations.
using FlashSupportsFn = int32_t (*)(void*, const void*, char*, size_t) noexcept;

// Pool row of token j of batch b, kv head kvh.
void* PoolRow(void* pool, const attnrt_paged_gqa_args& a, size_t row_bytes, int64_t kv_heads,
              int64_t b, int64_t kvh, int64_t j) {
  const attnrt_paged_gqa_problem& p = *a.problem;
  const int64_t block = a.block_table[b * p.max_blocks_per_seq + j / p.block_size];
  const int64_t row = p.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
                          ? (block * kv_heads + kvh) * p.block_size + j % p.block_size
                          : (block * p.block_size + j % p.block_size) * kv_heads + kvh;
  return static_cast<unsigned char*>(pool) + static_cast<size_t>(row) * row_bytes;
}

struct AppendJob {
  const attnrt_paged_gqa_args* args;
  const GqaRun* run;
};

// New rows of (b, kv head) units: token P_b + l for l < L, written only below T_b (a first
// prompt's right padding is not stored: no query reads it, and its slots may be unallocated).
void AppendUnits(void* user, size_t begin, size_t end) {
  const AppendJob& job = *static_cast<const AppendJob*>(user);
  const GqaRun& r = *job.run;
  const int64_t h = r.head_size;
  for (size_t u = begin; u < end; ++u) {
    const int64_t b = static_cast<int64_t>(u) / r.kv_heads;
    const int64_t kvh = static_cast<int64_t>(u) % r.kv_heads;
    const int64_t total = r.seqlens_k[b] + 1;
    const int64_t past = r.past_from_seqlens ? total - r.seq : 0;
    const float* k_scale =
        r.k_scale != nullptr && r.scale_per_channel ? r.k_scale + kvh * h : r.k_scale;
    const float* v_scale =
        r.v_scale != nullptr && r.scale_per_channel ? r.v_scale + kvh * h : r.v_scale;
    for (int64_t l = 0; l < r.kv_seq && past + l < total; ++l) {
      const int64_t offset = (b * r.kv_seq + l) * r.new_kv_token_stride + kvh * h;
      GqaWriteCacheRow(
          r, ElementAddress(r.new_key, r.element_bytes, offset), r.rotary, b, l, k_scale,
          PoolRow(r.key_cache, *job.args, r.cache_row_bytes, r.kv_heads, b, kvh, past + l));
      GqaWriteCacheRow(
          r, ElementAddress(r.new_value, r.element_bytes, offset), false, b, l, v_scale,
          PoolRow(r.value_cache, *job.args, r.cache_row_bytes, r.kv_heads, b, kvh, past + l));
    }
  }
}

// The staging step of GqaFlashPaging: resolve, point the run at the pools, append.
GqaRun Stage(const attnrt_host_services& host, const void* user) {
  const auto& a = *static_cast<const attnrt_paged_gqa_args*>(user);
  GqaRun r = GqaResolveRun(a.gqa);
  const int64_t capacity = a.problem->max_blocks_per_seq * a.problem->block_size;
  r.key_cache = a.key_cache;
  r.value_cache = a.value_cache;
  r.key_cache_rows = capacity;
  r.value_cache_rows = capacity;
  r.key_cache_holds_past = true;
  r.value_cache_holds_past = true;
  if (r.kv_seq > 0) {
    AppendJob job{&a, &r};
    host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1, AppendUnits,
                      &job);
  }
  return r;
}

bool ProblemFits(const void* problem, char* reason, size_t reason_capacity) {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size >= sizeof(attnrt_paged_gqa_problem)) return true;
  WriteMessage(reason, reason_capacity,
               "attnrt_paged_gqa_problem struct_size " + std::to_string(p.struct_size) +
                   " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_problem)) +
                   " bytes this kernel was built with");
  return false;
}

// The paged kernels compute what gqa.flash computes: its acceptance, on the equivalent contiguous
// problem. What gqa.flash leaves to the naive path (softcap, smooth_softmax, head_sink,
// qk_output, float16/bfloat16 caches) has no paged kernel.
template <FlashSupportsFn kFlashSupports>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    if (!ProblemFits(problem, reason, reason_capacity)) return 0;
    const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
    char why[512] = {0};
    const int32_t ok = kFlashSupports(plugin_context, &p.gqa, why, sizeof(why));
    if (ok) return 1;
    why[sizeof(why) - 1] = '\0';
    WriteMessage(reason, reason_capacity,
                 std::string("the paged kernels run the gqa.flash algorithm, which declines: ") +
                     why + " (there is no paged naive kernel)");
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "paged_gqa.flash supports()");
  }
  return 0;
}

size_t WorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_problem)) return 0;
  const GqaFlashPaging layout{
      nullptr, 0, p.block_size, p.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH, nullptr, nullptr};
  return GqaFlashPagedWorkspaceSize(plugin_context, p.gqa, layout);
}

template <const GqaFlashOps& kOps>
int32_t Run(void* plugin_context, const void* args, char* error, size_t error_capacity) noexcept {
  try {
    const auto& a = *static_cast<const attnrt_paged_gqa_args*>(args);
    if (a.struct_size < sizeof(attnrt_paged_gqa_args)) {
      WriteMessage(error, error_capacity,
                   "attnrt_paged_gqa_args struct_size " + std::to_string(a.struct_size) +
                       " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_args)) +
                       " bytes this kernel was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    const GqaFlashPaging paging{a.block_table,
                                a.problem->max_blocks_per_seq,
                                a.problem->block_size,
                                a.problem->kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH,
                                &Stage,
                                &a};
    return GqaFlashRunPaged(plugin_context, a.gqa, paging, kOps, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

constexpr attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.scalar",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority,
     .supports = &Supports<&GqaFlashSupportsScalar>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<kGqaFlashOpsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.avx2",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority + kAvx2Bonus,
     .supports = &Supports<&GqaFlashSupportsAvx2>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<kGqaFlashOpsAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.avx512",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority + kAvx512Bonus,
     .supports = &Supports<&GqaFlashSupportsAvx512>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<kGqaFlashOpsAvx512>},
};

}  // namespace

size_t PagedGqaKernelCount() noexcept { return std::size(kKernels); }

const attnrt_kernel_desc* PagedGqaKernel(size_t index) noexcept {
  return index < std::size(kKernels) ? &kKernels[index] : nullptr;
}

}  // namespace attnrt::cpu
