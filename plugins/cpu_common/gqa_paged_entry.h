// Kernel descriptors of the paged GroupQueryAttention kernels (gqa_paged.h), one instantiation per
// ISA of the plugin: the contiguous kernel's supports() and the block operations (flash) or the
// paged row pipeline (naive) of that ISA. Included only by the baseline-ISA table files
// (kernel_list.cpp of each plugin), never by an ISA file (see gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "attnrt/plugin.h"
#include "gqa_kernel_entry.h"
#include "gqa_paged.h"

namespace attnrt::cpu {

// The descriptor functions of one kernel: a shared entry point (gqa_paged.h) bound to the ISA's
// supports() and operations (a GqaFlashOps or a GqaAttendRowsFn).
template <auto kEntry, auto& kArg>
int32_t PagedSupportsWith(void* plugin_context, const void* problem, char* reason,
                          size_t reason_capacity) noexcept {
  return kEntry(plugin_context, problem, reason, reason_capacity, kArg);
}

template <auto kEntry, auto& kArg>
size_t PagedWorkspaceSizeWith(void* plugin_context, const void* problem) noexcept {
  return kEntry(plugin_context, problem, kArg);
}

template <auto kEntry, auto& kArg>
int32_t PagedRunWith(void* plugin_context, const void* args, char* error,
                     size_t error_capacity) noexcept {
  return kEntry(plugin_context, args, error, error_capacity, kArg);
}

// The descriptor of cpu_<arch>.<op>.<algorithm>.<isa> (op ATTNRT_OP_PAGED_GQA or
// ATTNRT_OP_PAGED_GQA_VARLEN): kSupports is the supports() of the contiguous kernel of the same
// algorithm and ISA, kImpl its block operations (a GqaFlashOps: flash) or its paged row pipeline
// (a GqaAttendRowsFn: naive).
template <int32_t kOp, auto& kSupports, auto& kImpl>
constexpr attnrt_kernel_desc PagedGqaKernelDesc(const char* name, int32_t priority) {
  constexpr bool kVarlen = kOp == ATTNRT_OP_PAGED_GQA_VARLEN;
  static_assert(kVarlen || kOp == ATTNRT_OP_PAGED_GQA);
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(kImpl)>, GqaFlashOps>) {
    constexpr auto kSupportsEntry = kVarlen ? &PagedGqaVarlenFlashSupports : &PagedGqaFlashSupports;
    constexpr auto kWorkspaceEntry =
        kVarlen ? &PagedGqaVarlenFlashWorkspaceSize : &PagedGqaFlashWorkspaceSize;
    constexpr auto kRunEntry = kVarlen ? &PagedGqaVarlenFlashRun : &PagedGqaFlashRun;
    return CpuKernelDesc(kOp, name, priority, &PagedSupportsWith<kSupportsEntry, kSupports>,
                         &PagedWorkspaceSizeWith<kWorkspaceEntry, kImpl>,
                         &PagedRunWith<kRunEntry, kImpl>);
  } else {
    constexpr auto kSupportsEntry = kVarlen ? &PagedGqaVarlenNaiveSupports : &PagedGqaNaiveSupports;
    constexpr auto kRunEntry = kVarlen ? &PagedGqaVarlenNaiveRun : &PagedGqaNaiveRun;
    return CpuKernelDesc(kOp, name, priority, &PagedSupportsWith<kSupportsEntry, kSupports>,
                         kVarlen ? &PagedGqaVarlenNaiveWorkspaceSize : &PagedGqaNaiveWorkspaceSize,
                         &PagedRunWith<kRunEntry, kImpl>);
  }
}

}  // namespace attnrt::cpu
