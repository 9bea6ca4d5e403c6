// gqa.naive: the row pipeline of every CPU plugin (gqa_pipeline.h), its descriptor entry points and
// the scalar instantiation. Each plugin instantiates the pipeline once per ISA
// (gqa_kernels_<isa>.cpp) and lists the kernels in its kernel list (kernel_list.cpp).
//
// Included by the ISA files, so it declares only out-of-line functions (see gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gqa_run.h"

namespace attnrt::cpu {

// GqaAttendRowsFn of gqa.naive.scalar: plain C++ loops, baseline ISA.
void GqaAttendRowsScalar(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// The same over a paged cache (GqaRun::block_table): the row pipeline of paged_gqa.naive.scalar.
void GqaAttendRowsPagedScalar(const GqaRun& run, float* scratch, int64_t unit_begin,
                              int64_t unit_end);

// attnrt_kernel_desc::workspace_size of every gqa.naive kernel; plugin_context is a PluginContext*.
size_t GqaNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept;

// attnrt_kernel_desc::run of a gqa.naive kernel whose row pipeline is `attend`; plugin_context is a
// PluginContext*. The caller's supports() has accepted the problem (ISA included).
int32_t GqaNaiveRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                    GqaAttendRowsFn attend) noexcept;

}  // namespace attnrt::cpu
