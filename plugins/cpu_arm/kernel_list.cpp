// Every kernel the cpu_arm plugin registers, in rank order (docs/plugins.md, Names and ranking):
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
    // flash, NEON: 220
    GqaFlashKernelDesc<Supports<true, true>, kGqaFlashOpsNeon>("cpu_arm.gqa.flash.neon",
                                                               rank::kFlash + rank::kNeon),
    PagedGqaKernelDesc<kPaged, Supports<true, true>, kGqaFlashOpsNeon>(
        "cpu_arm.paged_gqa.flash.neon", rank::kFlash + rank::kNeon),
    PagedGqaKernelDesc<kVarlen, Supports<true, true>, kGqaFlashOpsNeon>(
        "cpu_arm.paged_gqa_varlen.flash.neon", rank::kFlash + rank::kNeon),
    // flash, scalar: 200
    GqaFlashKernelDesc<Supports<false, true>, kGqaFlashOpsScalar>("cpu_arm.gqa.flash.scalar",
                                                                  rank::kFlash + rank::kScalar),
    PagedGqaKernelDesc<kPaged, Supports<false, true>, kGqaFlashOpsScalar>(
        "cpu_arm.paged_gqa.flash.scalar", rank::kFlash + rank::kScalar),
    PagedGqaKernelDesc<kVarlen, Supports<false, true>, kGqaFlashOpsScalar>(
        "cpu_arm.paged_gqa_varlen.flash.scalar", rank::kFlash + rank::kScalar),
    // naive, NEON: 120
    GqaNaiveKernelDesc<Supports<true, false>, &GqaAttendRowsNeon>("cpu_arm.gqa.naive.neon",
                                                                  rank::kNaive + rank::kNeon),
    PagedGqaKernelDesc<kPaged, Supports<true, false>, GqaAttendRowsPagedNeon>(
        "cpu_arm.paged_gqa.naive.neon", rank::kNaive + rank::kNeon),
    PagedGqaKernelDesc<kVarlen, Supports<true, false>, GqaAttendRowsPagedNeon>(
        "cpu_arm.paged_gqa_varlen.naive.neon", rank::kNaive + rank::kNeon),
    // naive, scalar: 100 (accepts every problem of its op)
    GqaNaiveKernelDesc<Supports<false, false>, &GqaAttendRowsScalar>("cpu_arm.gqa.naive.scalar",
                                                                     rank::kNaive + rank::kScalar),
    PagedGqaKernelDesc<kPaged, Supports<false, false>, GqaAttendRowsPagedScalar>(
        "cpu_arm.paged_gqa.naive.scalar", rank::kNaive + rank::kScalar),
    PagedGqaKernelDesc<kVarlen, Supports<false, false>, GqaAttendRowsPagedScalar>(
        "cpu_arm.paged_gqa_varlen.naive.scalar", rank::kNaive + rank::kScalar),
    // flash, FEAT_DotProd scores of an int8 query (approximate; only a pin selects it): 90
    GqaFlashKernelDesc<SupportsDotProdApprox, kGqaFlashOpsDotProdApprox>(
        "cpu_arm.gqa.flash.dotprod_approx", rank::kApproximate),
    PagedGqaKernelDesc<kPaged, SupportsDotProdApprox, kGqaFlashOpsDotProdApprox>(
        "cpu_arm.paged_gqa.flash.dotprod_approx", rank::kApproximate),
    PagedGqaKernelDesc<kVarlen, SupportsDotProdApprox, kGqaFlashOpsDotProdApprox>(
        "cpu_arm.paged_gqa_varlen.flash.dotprod_approx", rank::kApproximate),
};
static_assert(InRankOrder(kKernels), "list the kernels by priority (higher first), then name");

}  // namespace

std::span<const attnrt_kernel_desc> PluginKernels() noexcept { return kKernels; }

}  // namespace attnrt::cpu
