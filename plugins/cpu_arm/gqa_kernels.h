// GroupQueryAttention kernels of the cpu_arm plugin: the NEON row pipeline and flash block
// operations (gqa_kernels_neon.cpp, gqa_flash_neon.cpp, gqa_flash_dotprod.cpp) its kernel list
// (kernel_list.cpp) dispatches to; the scalar ones are shared (plugins/cpu_common).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// GqaAttendRowsFn of gqa.naive.neon. Advanced SIMD only: call when the probe found it
// (CpuFeatures::neon).
void GqaAttendRowsNeon(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// The same over a paged cache (GqaRun::block_table): the row pipeline of paged_gqa.naive.neon.
void GqaAttendRowsPagedNeon(const GqaRun& run, float* scratch, int64_t unit_begin,
                            int64_t unit_end);

// Block operations of gqa.flash.neon: use only when the probe found Advanced SIMD.
extern const GqaFlashOps kGqaFlashOpsNeon;

// Largest head_size gqa.flash.dotprod_approx quantizes (its int8 query rows live on the stack);
// its supports() declines larger heads.
constexpr int64_t kGqaDotProdMaxHeadSize = 256;

// GqaFlashOps::scores of gqa.flash.dotprod_approx (gqa_flash_dotprod.cpp): int8 PER_TENSOR K blocks
// with the query rows quantized to int8 and SDOT, every other block exact (kGqaFlashOpsNeon).
// Executes FEAT_DotProd instructions: call only when the probe found them (CpuFeatures::dotprod).
void GqaFlashScoresDotProdApprox(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys,
                                 int64_t h, float scale, float* scores, int64_t ld,
                                 const void* prefetch, size_t prefetch_bytes);

// Block operations of gqa.flash.dotprod_approx: the approximate scores above, the rest NEON's.
extern const GqaFlashOps kGqaFlashOpsDotProdApprox;

}  // namespace attnrt::cpu
