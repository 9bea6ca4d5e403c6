// GroupQueryAttention kernels of the cpu_arm plugin: the descriptor table (gqa_kernels.cpp) and the
// NEON row pipeline and flash block operations it dispatches to (gqa_kernels_neon.cpp,
// gqa_flash_neon.cpp); the scalar ones are shared (plugins/cpu_common).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"
#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// GqaAttendRowsFn of gqa.naive.neon. Advanced SIMD only: call when the probe found it
// (CpuFeatures::neon).
void GqaAttendRowsNeon(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// Block operations of gqa.flash.neon: use only when the probe found Advanced SIMD.
extern const GqaFlashOps kGqaFlashOpsNeon;

// The GQA kernel descriptors, in no particular order (the runtime ranks them). plugin_context of
// their functions is a PluginContext*.
size_t GqaKernelCount() noexcept;
const attnrt_kernel_desc* GqaKernel(size_t index) noexcept;

}  // namespace attnrt::cpu
