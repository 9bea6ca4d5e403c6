// Descriptor entry points of the gqa.naive kernels (gqa_naive.h): workspace and run, the ISA given
// as the row pipeline. Baseline ISA.
#include "gqa_naive.h"

#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {

size_t GqaNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
  // supports() declined such a problem; nothing larger than what it read may be touched.
  if (p.struct_size < sizeof(attnrt_gqa_problem)) return 0;
  return GqaWorkspaceSize(static_cast<const PluginContext*>(plugin_context)->host, p);
}

int32_t GqaNaiveRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                    GqaAttendRowsFn attend) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_gqa_args*>(args);
    if (a.struct_size < sizeof(attnrt_gqa_args)) {
      WriteMessage(error, error_capacity,
                   "attnrt_gqa_args struct_size " + std::to_string(a.struct_size) +
                       " is smaller than the " + std::to_string(sizeof(attnrt_gqa_args)) +
                       " bytes this kernel was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    return RunGqa(context.host, a, attend, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "gqa.naive run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

}  // namespace attnrt::cpu
