// paged_gqa_varlen: paged GroupQueryAttention over packed variable-length batches
// (attnrt/ops/paged_gqa_varlen.h) with the paged flash and naive algorithms (gqa_paged.h,
// gqa_paged_naive.h) reading the packed rows of each sequence.
#pragma once

#include <cstddef>

#include "attnrt/plugin.h"

namespace attnrt::cpu {

// cpu_x86.paged_gqa_varlen.{flash,naive}.{scalar,avx2,avx512}; PagedGqaKernel lists them last.
size_t PagedGqaVarlenKernelCount() noexcept;
const attnrt_kernel_desc* PagedGqaVarlenKernel(size_t index) noexcept;

}  // namespace attnrt::cpu
