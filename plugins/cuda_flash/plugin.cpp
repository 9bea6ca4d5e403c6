// Entry point of libattnrt_cuda_flash.so: FlashAttention-2 forward (prefill and decode), its
// split-KV Flash-Decoding fast path for S == 1, and the unfused fp32 fallback (ONNX Runtime's GQA
// operator documentation, Flash Attention and Unfused). Priorities and eligibility:
// plugins/cuda_common/gqa_cuda_rules.h.
#include <iterator>

#include "attnrt/plugin.h"
#include "gqa_cuda_rules.h"
#include "gqa_cuda_run.h"
#include "plugin_base.h"

namespace attnrt::cuda {
namespace {

template <DeclineRule kRule>
int32_t Supports(void* context, const void* problem, char* reason, size_t capacity) noexcept {
  return SupportsWith(kRule, context, problem, reason, capacity);
}

template <KernelKind kKind>
size_t Workspace(void*, const void* problem) noexcept {
  if (problem == nullptr) return 0;
  return ComputeWorkspace(*static_cast<const attnrt_gqa_problem*>(problem), kKind).total;
}

template <KernelKind kKind, AttentionLauncher kLauncher>
int32_t Run(void* context, const void* args, char* error, size_t capacity) noexcept {
  return RunGqa(context, args, kKind, kLauncher, error, capacity);
}

const attnrt_kernel_desc kKernels[] = {
    {sizeof(attnrt_kernel_desc), "cuda_flash.gqa.flash_decode.sm80", ATTNRT_OP_GQA,
     ATTNRT_DEVICE_CUDA, kFlashDecodePriority, &Supports<&FlashDecodeDeclineReason>,
     &Workspace<KernelKind::kFlashDecode>, &Run<KernelKind::kFlashDecode, &LaunchDecodeSameCache>},
    {sizeof(attnrt_kernel_desc), "cuda_flash.gqa.flash.sm80", ATTNRT_OP_GQA, ATTNRT_DEVICE_CUDA,
     kFlashPriority, &Supports<&FlashDeclineReason>, &Workspace<KernelKind::kFlash>,
     &Run<KernelKind::kFlash, &LaunchFlashForward>},
    {sizeof(attnrt_kernel_desc), "cuda_flash.gqa.unfused.sm80", ATTNRT_OP_GQA, ATTNRT_DEVICE_CUDA,
     kUnfusedPriority, &Supports<&UnfusedDeclineReason>, &Workspace<KernelKind::kUnfused>,
     &Run<KernelKind::kUnfused, &LaunchUnfused>},
};

const attnrt_plugin_api kApi = MakePluginApi("cuda_flash", kKernels, std::size(kKernels));

}  // namespace
}  // namespace attnrt::cuda

extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return &attnrt::cuda::kApi;
}
