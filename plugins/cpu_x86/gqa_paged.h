// paged_gqa.flash: GroupQueryAttention over a paged KV cache (attnrt/ops/paged_gqa.h; llama.cpp PR
// 18747, vLLM PagedAttention). The gqa.flash algorithm itself (gqa_flash.cpp: tiles, online
// softmax, split-KV decoding, the ISA block operations) reads K/V through the block table, so the
// outputs are bitwise those of gqa.flash over a contiguous cache holding the same tokens. This file
// holds the kernel descriptors; the append of the new K/V rows into the pools is shared with the
// paged naive kernels (gqa_paged_stage.h, gqa_paged_naive.h).
#pragma once

#include <cstddef>

#include "attnrt/plugin.h"

namespace attnrt::cpu {

// Kernels of the paged GQA ops: cpu_x86.paged_gqa.flash.{scalar,avx2,avx512}, then the paged naive
// ones (PagedGqaNaiveKernel), then the varlen op's (PagedGqaVarlenKernel).
size_t PagedGqaKernelCount() noexcept;
const attnrt_kernel_desc* PagedGqaKernel(size_t index) noexcept;

}  // namespace attnrt::cpu
