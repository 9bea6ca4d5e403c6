// Acceptance of the CPU GroupQueryAttention kernels (cpu_x86, cpu_arm), shared by the naive and
// flash kernels of each plugin (gqa_supports.cpp). Baseline files only: it brings in <string>,
// which the ISA files must not instantiate.
#pragma once

#include <string>

#include "attnrt/ops/gqa.h"

namespace attnrt::cpu {

// Empty when the naive pipeline computes `p` as the reference does; else the reason it does not.
// Reads no field of `p` beyond struct_size when struct_size is too small.
std::string GqaNaiveDeclineReason(const attnrt_gqa_problem& p);

// Empty when the flash path (gqa_flash.cpp) computes `p` as the reference's default CPU path does
// (ONNX Runtime's conditions for its flash paths); else the reason it does not. ISA
// requirements are checked by each plugin's supports(), not here.
std::string GqaFlashDeclineReason(const attnrt_gqa_problem& p);

}  // namespace attnrt::cpu
