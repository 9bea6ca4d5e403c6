// Every kernel the cpu_x86 plugin registers, in rank order (docs/plugins.md, Names and ranking):
// priority from cpu_kernel_ranks.h (algorithm base + ISA bonus), higher first, then name. Each row
// binds a name and rank to a supports() (gqa_supports.h) and the ISA's row pipeline or flash block
// operations (gqa_kernels.h, cpu_common); gqa_*, paged_gqa_* and paged_gqa_varlen_* of the same
// algorithm and ISA share acceptance and operations. This is the one place the order and the
// priorities are written; other files define the kernels' functions only.
#include <span>

#include "attnrt/plugin.h"
#include "cpu_kernel_ranks.h"
#include "cpu_plugin.h"
#include "gqa_flash.h"
#include "gqa_kernel_entry.h"
#include "gqa_kernels.h"
#include "gqa_paged_entry.h"
#include "gqa_run.h"
#include "gqa_supports.h"

namespace attnrt::cpu {
namespace {

constexpr int32_t kPaged = ATTNRT_OP_PAGED_GQA;
constexpr int32_t kVarlen = ATTNRT_OP_PAGED_GQA_VARLEN;

constexpr attnrt_kernel_desc kKernels[] = {
    // flash, AVX-512 + AMX-BF16 + VBMI (bfloat16 query with a bfloat16 cache, or a float8 cache):
    // 250
    GqaFlashKernelDesc<Supports<Isa::kAmx, true>, kGqaFlashOpsAmx>("cpu_x86.gqa.flash.amx",
                                                                   rank::kFlash + rank::kAmx),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kAmx, true>, kGqaFlashOpsAmx>(
        "cpu_x86.paged_gqa.flash.amx", rank::kFlash + rank::kAmx),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kAmx, true>, kGqaFlashOpsAmx>(
        "cpu_x86.paged_gqa_varlen.flash.amx", rank::kFlash + rank::kAmx),
    // flash, AVX-512 F/BW/VL: 240
    GqaFlashKernelDesc<Supports<Isa::kAvx512, true>, kGqaFlashOpsAvx512>(
        "cpu_x86.gqa.flash.avx512", rank::kFlash + rank::kAvx512),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kAvx512, true>, kGqaFlashOpsAvx512>(
        "cpu_x86.paged_gqa.flash.avx512", rank::kFlash + rank::kAvx512),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kAvx512, true>, kGqaFlashOpsAvx512>(
        "cpu_x86.paged_gqa_varlen.flash.avx512", rank::kFlash + rank::kAvx512),
    // flash, AVX2 + FMA: 220
    GqaFlashKernelDesc<Supports<Isa::kAvx2, true>, kGqaFlashOpsAvx2>("cpu_x86.gqa.flash.avx2",
                                                                     rank::kFlash + rank::kAvx2),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kAvx2, true>, kGqaFlashOpsAvx2>(
        "cpu_x86.paged_gqa.flash.avx2", rank::kFlash + rank::kAvx2),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kAvx2, true>, kGqaFlashOpsAvx2>(
        "cpu_x86.paged_gqa_varlen.flash.avx2", rank::kFlash + rank::kAvx2),
    // flash, scalar: 200
    GqaFlashKernelDesc<Supports<Isa::kScalar, true>, kGqaFlashOpsScalar>(
        "cpu_x86.gqa.flash.scalar", rank::kFlash + rank::kScalar),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kScalar, true>, kGqaFlashOpsScalar>(
        "cpu_x86.paged_gqa.flash.scalar", rank::kFlash + rank::kScalar),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kScalar, true>, kGqaFlashOpsScalar>(
        "cpu_x86.paged_gqa_varlen.flash.scalar", rank::kFlash + rank::kScalar),
    // naive, AVX-512 F/BW/VL: 140
    GqaNaiveKernelDesc<Supports<Isa::kAvx512, false>, &GqaAttendRowsAvx512>(
        "cpu_x86.gqa.naive.avx512", rank::kNaive + rank::kAvx512),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kAvx512, false>, GqaAttendRowsPagedAvx512>(
        "cpu_x86.paged_gqa.naive.avx512", rank::kNaive + rank::kAvx512),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kAvx512, false>, GqaAttendRowsPagedAvx512>(
        "cpu_x86.paged_gqa_varlen.naive.avx512", rank::kNaive + rank::kAvx512),
    // naive, AVX2 + FMA: 120
    GqaNaiveKernelDesc<Supports<Isa::kAvx2, false>, &GqaAttendRowsAvx2>("cpu_x86.gqa.naive.avx2",
                                                                        rank::kNaive + rank::kAvx2),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kAvx2, false>, GqaAttendRowsPagedAvx2>(
        "cpu_x86.paged_gqa.naive.avx2", rank::kNaive + rank::kAvx2),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kAvx2, false>, GqaAttendRowsPagedAvx2>(
        "cpu_x86.paged_gqa_varlen.naive.avx2", rank::kNaive + rank::kAvx2),
    // naive, scalar: 100 (accepts every problem of its op)
    GqaNaiveKernelDesc<Supports<Isa::kScalar, false>, &GqaAttendRowsScalar>(
        "cpu_x86.gqa.naive.scalar", rank::kNaive + rank::kScalar),
    PagedGqaKernelDesc<kPaged, Supports<Isa::kScalar, false>, GqaAttendRowsPagedScalar>(
        "cpu_x86.paged_gqa.naive.scalar", rank::kNaive + rank::kScalar),
    PagedGqaKernelDesc<kVarlen, Supports<Isa::kScalar, false>, GqaAttendRowsPagedScalar>(
        "cpu_x86.paged_gqa_varlen.naive.scalar", rank::kNaive + rank::kScalar),
};
static_assert(InRankOrder(kKernels), "list the kernels by priority (higher first), then name");

}  // namespace

std::span<const attnrt_kernel_desc> PluginKernels() noexcept { return kKernels; }

}  // namespace attnrt::cpu
