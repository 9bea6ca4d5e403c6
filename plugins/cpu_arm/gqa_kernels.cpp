// Kernel descriptors of the cpu_arm GroupQueryAttention family: what each accepts (and why not),
// its workspace, and the dispatch to the scalar or NEON pipeline.
//
// FEAT_FP16 arithmetic and FEAT_DotProd are probed and reported (plugin facts), but no default
// kernel executes them, because none of their uses keeps the numeric contract (ONNX Runtime's CPU
// notes: the float32 query and probabilities are never quantized, sums are float32): half-precision
// FMA rounds every product and partial sum to 11 bits, and SDOT needs the query quantized to int8.
// The exact conversions they could serve (float16 <-> float32, int8 -> float) are baseline Advanced
// SIMD (FCVTL, SXTL + SCVTF). SDOT runs in gqa.flash.dotprod_approx only, an opt-in kernel.
#include "gqa_kernels.h"

#include <iterator>
#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_decline.h"
#include "gqa_flash.h"
#include "gqa_kernel_entry.h"
#include "gqa_naive.h"
#include "gqa_paged_entry.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// Ranking scheme of the CPU kernels (docs/plugins.md: flash > naive, then SIMD > scalar), those of
// cpu_x86: naive 100, flash 200; +0 scalar, +20 NEON (the place of AVX2: 128-bit vectors with FMA).
constexpr int32_t kNaivePriority = 100;
constexpr int32_t kFlashPriority = 200;
constexpr int32_t kNeonBonus = 20;
// Approximate kernels rank below every exact one (naive.scalar accepts everything), so the runtime
// never chooses one by itself: only a pin (ATTNRT_KERNEL or attnrt_runtime_options::kernel) opts
// in.
constexpr int32_t kApproximatePriority = kNaivePriority - 10;

std::string NeonDeclineReason(const CpuFeatures& cpu) {
  if (cpu.neon) return {};
  return "requires Advanced SIMD (NEON), which cpuinfo did not report; this CPU provides: " +
         (cpu.isa.empty() ? std::string("no SIMD extension cpuinfo could read") : cpu.isa);
}

// A naive kernel (kFlash false: GqaNaiveDeclineReason) or a flash one (GqaFlashDeclineReason).
template <bool kNeedsNeon, bool kFlash>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
    std::string why = kNeedsNeon ? NeonDeclineReason(context.cpu) : std::string();
    if (why.empty()) why = kFlash ? GqaFlashDeclineReason(p) : GqaNaiveDeclineReason(p);
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "gqa supports()");
  }
  return 0;
}

// gqa.flash.dotprod_approx: FEAT_DotProd, what gqa.flash accepts, and an int8 PER_TENSOR cache
// (the scope of ONNX Runtime's opt-in VNNI path) with a head the kernel quantizes on the stack.
int32_t SupportsDotProdApprox(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
    std::string why;
    if (!context.cpu.dotprod) {
      why = "requires FEAT_DotProd (SDOT), which cpuinfo did not report; this CPU provides: " +
            (context.cpu.isa.empty() ? std::string("no SIMD extension cpuinfo could read")
                                     : context.cpu.isa);
    }
    if (why.empty()) why = GqaFlashDeclineReason(p);
    if (why.empty()) {
      const bool int8 = p.cache_dtype.code == ATTNRT_DTYPE_CODE_INT && p.cache_dtype.bits == 8;
      if (!int8 || p.attributes.k_quant_type != ATTNRT_GQA_QUANT_PER_TENSOR) {
        why =
            "the approximate int8-query path covers int8 PER_TENSOR K caches only (the scope of "
            "ONNX Runtime's opt-in VNNI path); the exact kernels run this case";
      } else if (p.head_size > kGqaDotProdMaxHeadSize) {
        why = "head_size " + std::to_string(p.head_size) + " is above the " +
              std::to_string(kGqaDotProdMaxHeadSize) +
              " the approximate path quantizes; the exact kernels (ONNX Runtime's default path) "
              "run this case";
      }
    }
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "gqa supports()");
  }
  return 0;
}

constexpr attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_arm.gqa.naive.scalar",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority,
     .supports = &Supports<false, false>,
     .workspace_size = &GqaNaiveWorkspaceSize,
     .run = &GqaNaiveRunWith<&GqaAttendRowsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_arm.gqa.naive.neon",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority + kNeonBonus,
     .supports = &Supports<true, false>,
     .workspace_size = &GqaNaiveWorkspaceSize,
     .run = &GqaNaiveRunWith<&GqaAttendRowsNeon>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_arm.gqa.flash.scalar",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority,
     .supports = &Supports<false, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_arm.gqa.flash.neon",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority + kNeonBonus,
     .supports = &Supports<true, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsNeon>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_arm.gqa.flash.dotprod_approx",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kApproximatePriority,
     .supports = &SupportsDotProdApprox,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsDotProdApprox>},
};

// The paged kernels (plugins/cpu_common/gqa_paged.h) of each algorithm and ISA, with the
// acceptance and operations of the contiguous kernel they mirror and its rank (the approximate
// one opt-in likewise).
constexpr attnrt_kernel_desc kPagedKernels[] = {
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<false, true>, kGqaFlashOpsScalar>(
        "cpu_arm.paged_gqa.flash.scalar", kFlashPriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<true, true>, kGqaFlashOpsNeon>(
        "cpu_arm.paged_gqa.flash.neon", kFlashPriority + kNeonBonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, SupportsDotProdApprox, kGqaFlashOpsDotProdApprox>(
        "cpu_arm.paged_gqa.flash.dotprod_approx", kApproximatePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<false, false>, GqaAttendRowsPagedScalar>(
        "cpu_arm.paged_gqa.naive.scalar", kNaivePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<true, false>, GqaAttendRowsPagedNeon>(
        "cpu_arm.paged_gqa.naive.neon", kNaivePriority + kNeonBonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<false, true>, kGqaFlashOpsScalar>(
        "cpu_arm.paged_gqa_varlen.flash.scalar", kFlashPriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<true, true>, kGqaFlashOpsNeon>(
        "cpu_arm.paged_gqa_varlen.flash.neon", kFlashPriority + kNeonBonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, SupportsDotProdApprox,
                       kGqaFlashOpsDotProdApprox>("cpu_arm.paged_gqa_varlen.flash.dotprod_approx",
                                                  kApproximatePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<false, false>,
                       GqaAttendRowsPagedScalar>("cpu_arm.paged_gqa_varlen.naive.scalar",
                                                 kNaivePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<true, false>, GqaAttendRowsPagedNeon>(
        "cpu_arm.paged_gqa_varlen.naive.neon", kNaivePriority + kNeonBonus),
};

}  // namespace

size_t GqaKernelCount() noexcept { return std::size(kKernels) + std::size(kPagedKernels); }

const attnrt_kernel_desc* GqaKernel(size_t index) noexcept {
  if (index < std::size(kKernels)) return &kKernels[index];
  index -= std::size(kKernels);
  return index < std::size(kPagedKernels) ? &kPagedKernels[index] : nullptr;
}

}  // namespace attnrt::cpu
