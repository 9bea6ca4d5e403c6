// supports() of the cpu_x86 GroupQueryAttention kernels: what each ISA needs of the CPU and each
// algorithm of the problem, with the reason it declines. The kernel list (kernel_list.cpp) binds
// them to the descriptors. Baseline ISA code: included only by kernel_list.cpp and
// gqa_supports.cpp, never by an ISA file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnrt/ops/gqa.h"
#include "cpu_probe.h"
#include "gqa_decline.h"
#include "plugin_context.h"

namespace attnrt::cpu {

enum class Isa { kScalar, kAvx2, kAvx512, kAmx };

// Empty when `cpu` has what the files of `isa` execute, otherwise why not (kScalar: always empty).
// kAmx also asks Linux for the tile data permission (AmxTileDataReason()).
std::string IsaDeclineReason(Isa isa, const CpuFeatures& cpu);

// The AVX2 pipeline converts float16 rows with F16C: empty unless `p` is a float16 problem and the
// CPU lacks F16C.
std::string F16cDeclineReason(const CpuFeatures& cpu, const attnrt_gqa_problem& p);

// gqa.flash.amx serves a bfloat16 query with a bfloat16 cache, and float8 caches: empty for those
// problems.
std::string BFloat16DeclineReason(const attnrt_gqa_problem& p);

// A naive kernel (kFlash false: GqaNaiveDeclineReason) or a flash one (GqaFlashDeclineReason); the
// AVX2 ones need F16C for float16 problems, the AMX one bfloat16 problems.
template <Isa kIsa, bool kFlash>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  return AnswerSupports<attnrt_gqa_problem>(
      plugin_context, problem, reason, reason_capacity, "gqa supports()",
      [](const PluginContext& context, const attnrt_gqa_problem& p) {
        std::string why = IsaDeclineReason(kIsa, context.cpu);
        if (why.empty()) why = kFlash ? GqaFlashDeclineReason(p) : GqaNaiveDeclineReason(p);
        // After DeclineReason: it checked struct_size before any other field is read.
        if (why.empty() && kIsa == Isa::kAvx2) why = F16cDeclineReason(context.cpu, p);
        if (why.empty() && kIsa == Isa::kAmx) why = BFloat16DeclineReason(p);
        return why;
      });
}

}  // namespace attnrt::cpu
