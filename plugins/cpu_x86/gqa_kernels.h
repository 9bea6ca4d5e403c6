// GroupQueryAttention kernels of the cpu_x86 plugin: the x86 row pipelines and flash block
// operations (gqa_kernels_<isa>.cpp, gqa_flash_<isa>.cpp) its kernel list (kernel_list.cpp)
// dispatches to; the scalar ones are shared (plugins/cpu_common).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// GqaAttendRowsFn of gqa.naive.avx2. Executes AVX2 and FMA instructions: call only when the probe
// found both usable (CpuFeatures::avx2 && CpuFeatures::fma).
void GqaAttendRowsAvx2(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);

// The same over a paged cache (GqaRun::block_table): the row pipeline of paged_gqa.naive.avx2.
void GqaAttendRowsPagedAvx2(const GqaRun& run, float* scratch, int64_t unit_begin,
                            int64_t unit_end);

// Block operations of gqa.flash.avx2: use only when the probe found AVX2 and FMA usable.
extern const GqaFlashOps kGqaFlashOpsAvx2;

// GqaAttendRowsFn of gqa.naive.avx512 and the block operations of gqa.flash.avx512. Execute
// AVX-512 F/BW/VL and FMA instructions: use only when the probe found all four usable
// (CpuFeatures::avx512f && avx512bw && avx512vl && fma).
void GqaAttendRowsAvx512(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end);
// The same over a paged cache (GqaRun::block_table): the row pipeline of paged_gqa.naive.avx512.
void GqaAttendRowsPagedAvx512(const GqaRun& run, float* scratch, int64_t unit_begin,
                              int64_t unit_end);
extern const GqaFlashOps kGqaFlashOpsAvx512;

// Block operations of gqa.flash.amx (tall-tile scores on AMX-BF16, e4m3fn decode tiles decoded by
// table lookups, the rest gqa.flash.avx512's):
// use only when the probe found AVX-512 F/BW/VL, FMA and AMX-BF16 usable and the tile data
// permission was granted (AmxTileDataReason() empty).
extern const GqaFlashOps kGqaFlashOpsAmx;

// gqa.flash.amx's scores, P·V and dequantization over e4m3fn K/V rows of head size
// h <= kGqaFp8VbmiMaxHead (gqa_flash_amx_fp8.cpp): the GqaFlashOps contracts, the same bits
// as gqa.flash.avx512's. Execute AVX512-VBMI instructions besides gqa.flash.avx512's: call only
// where gqa.flash.amx's supports() has accepted the problem.
constexpr int64_t kGqaFp8VbmiMaxHead = 512;
void GqaFp8ScoresVbmi(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
                      float scale, float* scores, int64_t ld, const void* prefetch,
                      size_t prefetch_bytes);
void GqaFp8AccumulateVbmi(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v,
                          int64_t keys, int64_t h, float* acc, const void* prefetch,
                          size_t prefetch_bytes);
void GqaFp8DequantizeVbmi(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out);

// gqa.flash.amx's scores of a short (decode) tile of rows <= kGqaAmxShortRows query rows over
// bfloat16 or e4m3fn (per-tensor scale) K rows of head size h, a multiple of 32 up to
// kGqaAmxShortMaxHead, on AMX-BF16 tiles (gqa_flash_amx_decode.cpp): the GqaFlashOps scores
// contract, each score the same bits under any split of the keys. False, with nothing written,
// when the problem is not one of those or a query element is no bfloat16 value or a subnormal one.
// Executes AMX and AVX512-VBMI instructions: call only where gqa.flash.amx's supports() has
// accepted the problem.
constexpr int64_t kGqaAmxShortRows = 8;
constexpr int64_t kGqaAmxShortMaxHead = 256;
bool GqaAmxScoresShort(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
                       float scale, float* scores, int64_t ld, const void* prefetch,
                       size_t prefetch_bytes);

}  // namespace attnrt::cpu
