// gqa.flash: tiled GroupQueryAttention with an online softmax (FlashAttention-2 on the CPU, as ONNX
// Runtime's MlasFlashAttentionGQA; reference/gqa-semantics.md §5, seed 000). The driver
// (gqa_flash.cpp, baseline ISA) tiles over (batch, kv head, query block) so one pass over a K/V
// block serves all G = N/Nkv query heads of the group, and splits the key range across threads for
// decode (flash decoding). The ISA files (gqa_flash_<isa>.cpp) provide the block operations.
//
// Included by the ISA files, so it declares only plain structs and out-of-line functions (see
// gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"

namespace attnrt::cpu_x86 {

// Block operations of one ISA on float32 rows. A tile holds `rows` query rows of H floats
// (contiguous), a score/probability block of `rows` x `keys` floats with row stride ld, and an
// accumulator of `rows` x H floats. K and V rows are H floats, contiguous.
struct GqaFlashOps {
  // scores[i*ld + j] = scale * <q[i*h ..], k[j*h ..]> for i < rows, j < keys; meanwhile
  // [prefetch, prefetch + prefetch_bytes) is brought towards the cache (the V rows of this block).
  void (*scores)(const float* q, int64_t rows, const float* k, int64_t keys, int64_t h, float scale,
                 float* scores, int64_t ld, const float* prefetch, size_t prefetch_bytes);
  // acc[i*h ..] += sum_j p[i*ld + j] * v[j*h ..] for i < rows, j < keys; meanwhile
  // [prefetch, prefetch + prefetch_bytes) is brought towards the cache (the next K block).
  void (*accumulate)(const float* p, int64_t rows, int64_t ld, const float* v, int64_t keys,
                     int64_t h, float* acc, const float* prefetch, size_t prefetch_bytes);
  // max of x[0, n), n >= 1.
  float (*max)(const float* x, int64_t n);
  // x = exp(x - m) over [0, n); returns the sum.
  float (*exp_sum)(float* x, int64_t n, float m);
  // y *= alpha over [0, n).
  void (*scale)(float alpha, float* y, int64_t n);
};

// Plain C++ loops; baseline x86-64.
extern const GqaFlashOps kGqaFlashOpsScalar;
// AVX2 + FMA: use only when the probe found both usable (CpuFeatures::avx2 && CpuFeatures::fma).
extern const GqaFlashOps kGqaFlashOpsAvx2;

// attnrt_kernel_desc entry points of cpu_x86.gqa.flash.scalar and cpu_x86.gqa.flash.avx2.
// plugin_context is a PluginContext*.
int32_t GqaFlashSupportsScalar(void* plugin_context, const void* problem, char* reason,
                               size_t reason_capacity) noexcept;
int32_t GqaFlashSupportsAvx2(void* plugin_context, const void* problem, char* reason,
                             size_t reason_capacity) noexcept;
size_t GqaFlashWorkspaceSize(void* plugin_context, const void* problem) noexcept;
int32_t GqaFlashRunScalar(void* plugin_context, const void* args, char* error,
                          size_t error_capacity) noexcept;
int32_t GqaFlashRunAvx2(void* plugin_context, const void* args, char* error,
                        size_t error_capacity) noexcept;

}  // namespace attnrt::cpu_x86
