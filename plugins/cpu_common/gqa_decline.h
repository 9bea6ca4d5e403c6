// Acceptance of the cpu_x86 GroupQueryAttention kernels, shared by the naive (gqa_kernels.cpp) and
// flash (gqa_flash.cpp) descriptors. Baseline files only: it brings in <string>, which the ISA
// files must not instantiate.
#pragma once

#include <string>

#include "attnrt/ops/gqa.h"

namespace attnrt::cpu_x86 {

// Empty when the naive pipeline computes `p` as the reference does; else the reason it does not.
// Reads no field of `p` beyond struct_size when struct_size is too small.
std::string GqaNaiveDeclineReason(const attnrt_gqa_problem& p);

}  // namespace attnrt::cpu_x86
