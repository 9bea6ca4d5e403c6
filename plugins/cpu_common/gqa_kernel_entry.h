// attnrt_kernel_desc::run entry points and descriptors of the CPU plugins' GroupQueryAttention
// kernels, one instantiation per ISA pipeline: gqa.naive with a row pipeline, gqa.flash with block
// operations. Included only by the baseline-ISA kernel lists (kernel_list.cpp), never by an ISA
// file (see gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"
#include "gqa_flash.h"
#include "gqa_naive.h"

namespace attnrt::cpu {

template <GqaAttendRowsFn kAttendRows>
int32_t GqaNaiveRunWith(void* plugin_context, const void* args, char* error,
                        size_t error_capacity) noexcept {
  return GqaNaiveRun(plugin_context, args, error, error_capacity, kAttendRows);
}

template <const GqaFlashOps& kOps>
int32_t GqaFlashRunWith(void* plugin_context, const void* args, char* error,
                        size_t error_capacity) noexcept {
  return GqaFlashRun(plugin_context, args, error, error_capacity, kOps);
}

// A CPU kernel's descriptor (op kind `op_kind`) from its entry points.
constexpr attnrt_kernel_desc CpuKernelDesc(int32_t op_kind, const char* name, int32_t priority,
                                           decltype(attnrt_kernel_desc::supports) supports,
                                           decltype(attnrt_kernel_desc::workspace_size) workspace,
                                           decltype(attnrt_kernel_desc::run) run) {
  return {.struct_size = sizeof(attnrt_kernel_desc),
          .name = name,
          .op_kind = op_kind,
          .device_type = ATTNRT_DEVICE_CPU,
          .priority = priority,
          .supports = supports,
          .workspace_size = workspace,
          .run = run};
}

// The descriptor of cpu_<arch>.gqa.naive.<isa>: kSupports its supports(), kAttendRows the ISA's row
// pipeline.
template <auto& kSupports, GqaAttendRowsFn kAttendRows>
constexpr attnrt_kernel_desc GqaNaiveKernelDesc(const char* name, int32_t priority) {
  return CpuKernelDesc(ATTNRT_OP_GQA, name, priority, &kSupports, &GqaNaiveWorkspaceSize,
                       &GqaNaiveRunWith<kAttendRows>);
}

// The descriptor of cpu_<arch>.gqa.flash.<isa>: kSupports its supports(), kOps the ISA's block
// operations.
template <auto& kSupports, const GqaFlashOps& kOps>
constexpr attnrt_kernel_desc GqaFlashKernelDesc(const char* name, int32_t priority) {
  return CpuKernelDesc(ATTNRT_OP_GQA, name, priority, &kSupports, &GqaFlashWorkspaceSize,
                       &GqaFlashRunWith<kOps>);
}

}  // namespace attnrt::cpu
