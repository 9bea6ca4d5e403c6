// paged_gqa.naive kernels (baseline ISA): acceptance, workspace and run of GroupQueryAttention over
// a paged KV cache with the gqa.naive row pipeline (see gqa_paged_naive.h).
#include "gqa_paged_naive.h"

#include <iterator>
#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "gqa_kernels.h"
#include "gqa_naive.h"
#include "gqa_paged_stage.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// gqa.naive's ranks (docs/plugins.md: flash > naive): below paged_gqa.flash (200, 220, 240), so the
// runtime picks paged flash wherever it accepts a problem.
constexpr int32_t kPagedNaivePriority = 100;
constexpr int32_t kAvx2Bonus = 20;
constexpr int32_t kAvx512Bonus = 40;

// The contiguous gqa.naive kernel a paged naive kernel mirrors: its supports() and row pipeline.
using NaiveSupportsFn = int32_t (*)(void*, const void*, char*, size_t) noexcept;

// gqa.naive's acceptance, ISA checks included, on the equivalent contiguous problem.
template <NaiveSupportsFn kNaiveSupports>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    if (!PagedGqaProblemFits(problem, reason, reason_capacity)) return 0;
    const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
    char why[512] = {0};
    const int32_t ok = kNaiveSupports(plugin_context, &p.gqa, why, sizeof(why));
    if (ok) return 1;
    why[sizeof(why) - 1] = '\0';
    WriteMessage(
        reason, reason_capacity,
        std::string("the paged naive kernels run the gqa.naive pipeline, which declines: ") + why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "paged_gqa.naive supports()");
  }
  return 0;
}

// gqa.naive's per-thread scratch for key rows up to max_blocks_per_seq * block_size (the problem's
// present_sequence_length); no staging, the pools are the caches.
size_t WorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_problem)) return 0;
  return GqaNaiveWorkspaceSize(plugin_context, &p.gqa);
}

// The workspace is checked before PagedGqaStage writes the first row, so a failing run leaves the
// pools and outputs as they were.
template <GqaAttendRowsFn kRows>
int32_t Run(void* plugin_context, const void* args, char* error, size_t error_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_paged_gqa_args*>(args);
    const int32_t fits = PagedGqaArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedStageInput stage{&a, nullptr, nullptr, 0};
    return RunGqaStaged(context.host, a.gqa, &PagedGqaStage, &stage, kRows, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa.naive run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

constexpr attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.naive.scalar",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedNaivePriority,
     .supports = &Supports<&GqaNaiveSupportsScalar>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<&GqaAttendRowsPagedScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.naive.avx2",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedNaivePriority + kAvx2Bonus,
     .supports = &Supports<&GqaNaiveSupportsAvx2>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<&GqaAttendRowsPagedAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.paged_gqa.naive.avx512",
     .op_kind = ATTNRT_OP_PAGED_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kPagedNaivePriority + kAvx512Bonus,
     .supports = &Supports<&GqaNaiveSupportsAvx512>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<&GqaAttendRowsPagedAvx512>},
};

}  // namespace

size_t PagedGqaNaiveKernelCount() noexcept { return std::size(kKernels); }

const attnrt_kernel_desc* PagedGqaNaiveKernel(size_t index) noexcept {
  return index < std::size(kKernels) ? &kKernels[index] : nullptr;
}

}  // namespace attnrt::cpu
