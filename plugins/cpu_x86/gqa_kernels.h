// GroupQueryAttention kernels of the cpu_x86 plugin: the descriptor table (gqa_kernels.cpp) and the
// per-ISA row pipelines it dispatches to (gqa_kernels_<isa>.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"
#include "gqa_run.h"

namespace attnrt::cpu_x86 {

// GqaAttendRowsFn of gqa.naive.scalar (baseline x86-64).
void GqaAttendRowsScalar(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// GqaAttendRowsFn of gqa.naive.avx2. Executes AVX2 and FMA instructions: call only when the probe
// found both usable (CpuFeatures::avx2 && CpuFeatures::fma).
void GqaAttendRowsAvx2(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// The GQA kernel descriptors, in no particular order (the runtime ranks them). plugin_context of
// their functions is a PluginContext*.
size_t GqaKernelCount() noexcept;
const attnrt_kernel_desc* GqaKernel(size_t index) noexcept;

}  // namespace attnrt::cpu_x86
