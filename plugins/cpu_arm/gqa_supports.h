// supports() of the cpu_arm GroupQueryAttention kernels: what each needs of the CPU and of the
// problem, with the reason it declines. The kernel list (kernel_list.cpp) binds them to the
// descriptors. Baseline ISA code: included only by kernel_list.cpp and gqa_supports.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnrt/ops/gqa.h"
#include "cpu_probe.h"
#include "gqa_decline.h"
#include "plugin_context.h"

namespace attnrt::cpu {

// Empty when `cpu` has Advanced SIMD, otherwise why not.
std::string NeonDeclineReason(const CpuFeatures& cpu);

// A naive kernel (kFlash false: GqaNaiveDeclineReason) or a flash one (GqaFlashDeclineReason).
template <bool kNeedsNeon, bool kFlash>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  return AnswerSupports<attnrt_gqa_problem>(
      plugin_context, problem, reason, reason_capacity, "gqa supports()",
      [](const PluginContext& context, const attnrt_gqa_problem& p) {
        std::string why = kNeedsNeon ? NeonDeclineReason(context.cpu) : std::string();
        if (why.empty()) why = kFlash ? GqaFlashDeclineReason(p) : GqaNaiveDeclineReason(p);
        return why;
      });
}

// gqa.flash.dotprod_approx: FEAT_DotProd, what gqa.flash accepts, and an int8 PER_TENSOR cache
// (the scope of ONNX Runtime's opt-in VNNI path) with a head the kernel quantizes on the stack.
int32_t SupportsDotProdApprox(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity) noexcept;

}  // namespace attnrt::cpu
