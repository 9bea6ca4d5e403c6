// supports() of the cpu_arm GroupQueryAttention kernels (gqa_supports.h): what each accepts, and
// why not.
//
// FEAT_FP16 arithmetic and FEAT_DotProd are probed and reported (plugin facts), but no default
// kernel executes them, because none of their uses keeps the numeric contract (ONNX Runtime's CPU
// notes: the float32 query and probabilities are never quantized, sums are float32): half-precision
// FMA rounds every product and partial sum to 11 bits, and SDOT needs the query quantized to int8.
// The exact conversions they could serve (float16 <-> float32, int8 -> float) are baseline Advanced
// SIMD (FCVTL, SXTL + SCVTF). SDOT runs in gqa.flash.dotprod_approx only, an opt-in kernel.
#include "gqa_supports.h"

#include <string>

#include "attnrt/ops/gqa.h"
#include "cpu_probe.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "plugin_context.h"

namespace attnrt::cpu {

std::string NeonDeclineReason(const CpuFeatures& cpu) {
  if (cpu.neon) return {};
  return "requires Advanced SIMD (NEON), which cpuinfo did not report; this CPU provides: " +
         (cpu.isa.empty() ? std::string("no SIMD extension cpuinfo could read") : cpu.isa);
}

int32_t SupportsDotProdApprox(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity) noexcept {
  return AnswerSupports<attnrt_gqa_problem>(
      plugin_context, problem, reason, reason_capacity, "gqa supports()",
      [](const PluginContext& context, const attnrt_gqa_problem& p) {
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
                "the approximate int8-query path covers int8 PER_TENSOR K caches only (the scope "
                "of ONNX Runtime's opt-in VNNI path); the exact kernels run this case";
          } else if (p.head_size > kGqaDotProdMaxHeadSize) {
            why = "head_size " + std::to_string(p.head_size) + " is above the " +
                  std::to_string(kGqaDotProdMaxHeadSize) +
                  " the approximate path quantizes; the exact kernels (ONNX Runtime's default "
                  "path) run this case";
          }
        }
        return why;
      });
}

}  // namespace attnrt::cpu
