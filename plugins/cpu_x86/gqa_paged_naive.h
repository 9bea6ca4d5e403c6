// paged_gqa.naive: GroupQueryAttention over a paged KV cache (attnrt/ops/paged_gqa.h) with the
// gqa.naive row pipeline (plugins/cpu_common/gqa_pipeline.h) reading K/V through the block table,
// for every problem gqa.naive accepts: what paged_gqa.flash declines (softcap, smooth_softmax,
// head_sink, qk_output, float16/bfloat16 caches) included. The new K/V rows are appended by the
// staging step the paged flash kernels use (gqa_paged_stage.h), and each row reaches Dot and Axpy
// as the same bytes as from a contiguous cache, so outputs are bitwise those of gqa.naive of the
// same ISA over a contiguous cache holding the same tokens. Ranked below paged_gqa.flash, as
// gqa.naive is below gqa.flash.
#pragma once

#include <cstddef>

#include "attnrt/plugin.h"

namespace attnrt::cpu {

// cpu_x86.paged_gqa.naive.scalar and cpu_x86.paged_gqa.naive.avx2; PagedGqaKernel lists them after
// the paged flash kernels.
size_t PagedGqaNaiveKernelCount() noexcept;
const attnrt_kernel_desc* PagedGqaNaiveKernel(size_t index) noexcept;

}  // namespace attnrt::cpu
