// attnrt_kernel_desc::run entry points of the CPU plugins' kernel tables, one instantiation per ISA
// pipeline: gqa.naive with a row pipeline, gqa.flash with block operations. Included only by the
// baseline-ISA table files (gqa_kernels.cpp), never by an ISA file (see gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace attnrt::cpu
