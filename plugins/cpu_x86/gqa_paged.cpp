// paged_gqa.flash kernels (baseline ISA): acceptance, workspace and run of GroupQueryAttention over
// a paged KV cache; the attention itself is gqa.flash's (see gqa_paged.h).
#include "gqa_paged.h"

#include <iterator>
#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "gqa_decline.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_paged_naive.h"
#include "gqa_paged_stage.h"
#include "gqa_paged_varlen.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// gqa.flash's ranks: above the paged naive kernels (gqa_paged_naive.cpp), as flash is above naive.
constexpr int32_t kPagedPriority = 200;
constexpr int32_t kAvx2Bonus = 20;
constexpr int32_t kAvx512Bonus = 40;
constexpr int32_t kAmxBonus = 50;

// The contiguous gqa.flash kernel a paged kernel mirrors: its supports() and block operations.
using FlashSupportsFn = int32_t (*)(void*, const void*, char*, size_t) noexcept;

// The paged flash kernels compute what gqa.flash computes: its acceptance, on the equivalent
// contiguous problem. What gqa.flash leaves to the naive path (softcap, smooth_softmax, head_sink,
// qk_output, float16/bfloat16 prompts with a local window) goes to the paged naive kernels
// (gqa_paged_naive.cpp).
template <FlashSupportsFn kFlashSupports>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    if (!PagedGqaProblemFits(problem, reason, reason_capacity)) return 0;
    const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
    char why[512] = {0};
    const int32_t ok = kFlashSupports(plugin_context, &p.gqa, why, sizeof(why));
    if (ok) return 1;
    why[sizeof(why) - 1] = '\0';
    // Pointing at the paged naive kernels only where their pipeline takes the problem (ISA aside).
    const bool naive_runs_it = GqaNaiveDeclineReason(p.gqa).empty();
    WriteMessage(
        reason, reason_capacity,
        std::string("the paged flash kernels run the gqa.flash algorithm, which declines: ") + why +
            (naive_runs_it ? " (paged_gqa.naive runs such problems)" : ""));
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "paged_gqa.flash supports()");
  }
  return 0;
}

template <const GqaFlashOps& kOps>
size_t WorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_problem)) return 0;
  const GqaFlashPaging layout{nullptr,
                              0,
                              p.block_size,
                              PagedGqaPoolStrides(p, p.key_cache_strides),
                              PagedGqaPoolStrides(p, p.value_cache_strides),
                              nullptr,
                              nullptr};
  return GqaFlashPagedWorkspaceSize(plugin_context, p.gqa, layout, kOps);
}

template <const GqaFlashOps& kOps>
int32_t Run(void* plugin_context, const void* args, char* error, size_t error_capacity) noexcept {
  try {
    const auto& a = *static_cast<const attnrt_paged_gqa_args*>(args);
    const int32_t fits = PagedGqaArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const attnrt_paged_gqa_problem& p = *a.problem;
    const PagedStageInput stage{&a, nullptr, nullptr, 0};
    const GqaFlashPaging paging{a.block_table,
                                p.max_blocks_per_seq,
                                p.block_size,
                                PagedGqaPoolStrides(p, p.key_cache_strides),
                                PagedGqaPoolStrides(p, p.value_cache_strides),
                                &PagedGqaStage,
                                &stage};
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
     .workspace_size = &WorkspaceSize<kGqaFlashOpsScalar>,
     .run = &Run<kGqaFlashOpsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.avx2",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority + kAvx2Bonus,
     .supports = &Supports<&GqaFlashSupportsAvx2>,
     .workspace_size = &WorkspaceSize<kGqaFlashOpsAvx2>,
     .run = &Run<kGqaFlashOpsAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.avx512",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority + kAvx512Bonus,
     .supports = &Supports<&GqaFlashSupportsAvx512>,
     .workspace_size = &WorkspaceSize<kGqaFlashOpsAvx512>,
     .run = &Run<kGqaFlashOpsAvx512>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.flash.amx",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedPriority + kAmxBonus,
     .supports = &Supports<&GqaFlashSupportsAmx>,
     .workspace_size = &WorkspaceSize<kGqaFlashOpsAmx>,
     .run = &Run<kGqaFlashOpsAmx>},
};

}  // namespace

size_t PagedGqaKernelCount() noexcept {
  return std::size(kKernels) + PagedGqaNaiveKernelCount() + PagedGqaVarlenKernelCount();
}

const attnrt_kernel_desc* PagedGqaKernel(size_t index) noexcept {
  if (index < std::size(kKernels)) return &kKernels[index];
  index -= std::size(kKernels);
  if (index < PagedGqaNaiveKernelCount()) return PagedGqaNaiveKernel(index);
  return PagedGqaVarlenKernel(index - PagedGqaNaiveKernelCount());
}

}  // namespace attnrt::cpu
