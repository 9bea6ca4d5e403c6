// Entry point of libattnrt_cuda_xqa.so: the XQA-style decode kernel for S == 1 over a shared
// past/present buffer (ONNX Runtime's XQA Decode Path): float16/bfloat16 queries, float16/bfloat16,
// int8 or float8_e4m3fn caches with per-tensor scales, head sizes 64/128/256, every query head of a
// group in one tensor-core tile, split-KV with a combine step. Eligibility: gqa_cuda_rules.h.
#include <iterator>

#include "attnrt/plugin.h"
#include "gqa_cuda_rules.h"
#include "gqa_cuda_run.h"
#include "plugin_base.h"

namespace attnrt::cuda {
namespace {

int32_t Supports(void* context, const void* problem, char* reason, size_t capacity) noexcept {
  return SupportsWith(&XqaDeclineReason, context, problem, reason, capacity);
}

size_t Workspace(void*, const void* problem) noexcept {
  if (problem == nullptr) return 0;
  return ComputeWorkspace(*static_cast<const attnrt_gqa_problem*>(problem), KernelKind::kXqa).total;
}

int LaunchXqa(const AttentionParams& params, void* stream) {
  return params.cache == CacheKind::kSameAsQuery ? LaunchDecodeSameCache(params, stream)
                                                 : LaunchDecodeQuantCache(params, stream);
}

int32_t Run(void* context, const void* args, char* error, size_t capacity) noexcept {
  return RunGqa(context, args, KernelKind::kXqa, &LaunchXqa, error, capacity);
}

const attnrt_kernel_desc kKernels[] = {
    {sizeof(attnrt_kernel_desc), "cuda_xqa.gqa.xqa.sm80", ATTNRT_OP_GQA, ATTNRT_DEVICE_CUDA,
     kXqaPriority, &Supports, &Workspace, &Run},
};

const attnrt_plugin_api kApi = MakePluginApi("cuda_xqa", kKernels, std::size(kKernels));

}  // namespace
}  // namespace attnrt::cuda

extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return &attnrt::cuda::kApi;
}
