// Eligibility of the CUDA GroupQueryAttention kernels, from ONNX Runtime's GroupQueryAttention
// operator documentation (§ numbers below are its sections: §4 KV Cache and Quantization, §6 CUDA
// Kernel Backends and Dispatch, §7 XQA Decode Path; dispatch XQA > cuDNN SDPA > Flash > MEA >
// Unfused). Plain C++: no CUDA header, so it is compiled by the host compiler and tested (also
// under the sanitizers) without a GPU.
//
// Each function returns an empty string when the kernel computes the problem exactly on the given
// device, else the reason it declines; explain() shows that reason verbatim.
#pragma once

#include <cstdint>
#include <string>

#include "attnrt/ops/gqa.h"

namespace attnrt::cuda {

// What the probe learned of the device the kernels would run on (device 0 / the current device).
struct DeviceCaps {
  bool present = false;   // a usable CUDA device was found
  int compute_major = 0;  // compute capability, e.g. 9.0 for H100/H200
  int compute_minor = 0;
  int sm_count = 0;            // streaming multiprocessors
  int64_t max_smem_optin = 0;  // bytes of shared memory one block may opt in to
};

// Priorities of the CUDA kernels (that dispatch order, docs/plugins.md; the CPU kernels
// use 90-250, see plugins/cpu_common/cpu_kernel_ranks.h). They never compete with the CPU kernels:
// a kernel only serves tensors of its own device type.
constexpr int32_t kXqaPriority = 400;
constexpr int32_t kFlashDecodePriority = 310;  // flash's split-KV fast path for S == 1
constexpr int32_t kFlashPriority = 300;
constexpr int32_t kUnfusedPriority = 100;

// True for the head sizes with compiled flash and XQA kernels (64, 128, 256).
bool IsTiledHeadSize(int64_t head_size);

// Query groups (num_heads / kv_num_heads) the XQA kernel accepts for a cache: 1-32 for a
// float16/bfloat16 cache, {4, 8, 16, 32} for an int8/fp8 cache (§4).
bool XqaGroupSupported(int64_t group_size, bool quantized_cache);

// Reasons shared by every CUDA kernel: tensors on CUDA, T float16/bfloat16, no output_qk (the
// reference's CUDA provider rejects qk_output), no window-sized ring cache, and a device whose
// compute capability is at least 8.0.
std::string CommonDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device);

// cuda_xqa.gqa.xqa: §7 items 1-8 plus the cache rules of §4.
std::string XqaDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device);

// cuda_flash.gqa.flash: §6.3 (float16/bfloat16, head size 64/128/256, non-quantized
// cache).
std::string FlashDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device);

// cuda_flash.gqa.flash_decode: the split-KV Flash-Decoding fast path of §6.3 (S == 1, shared
// past/present buffer, non-quantized) on top of the flash conditions.
std::string FlashDecodeDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device);

// cuda_flash.gqa.unfused: §6.5, widened to any head size, head_sink, smooth softmax and
// attention_bias (fp32 scores); a non-quantized cache.
std::string UnfusedDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device);

}  // namespace attnrt::cuda
