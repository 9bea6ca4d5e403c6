// Host entry points of the CUDA kernels (defined in the .cu files). Plain C++ declarations: the
// stream is a cudaStream_t passed as void*, the result a cudaError_t value as int (0 = success).
#pragma once

#include "gqa_cuda_params.h"

namespace attnrt::cuda {

using AttentionLauncher = int (*)(const AttentionParams& params, void* stream);

// Copies past rows, appends the new K/V rows (RoPE on K, quantization for int8/fp8 caches) and
// writes rotated Q; gqa_prologue.cu.
int LaunchPrologue(const PrologueParams& params, void* stream);

// Split-KV decode for S == 1 (every query head of a group in one tile, tensor-core MMA) and the
// combine kernel when num_splits > 1; gqa_decode_*.cu. Needs head_size 64, 128 or 256.
int LaunchDecodeSameCache(const AttentionParams& params, void* stream);
int LaunchDecodeQuantCache(const AttentionParams& params, void* stream);

// Joins the num_splits partial results of the decode kernels; gqa_combine.cu.
int LaunchCombine(const AttentionParams& params, void* stream);

// FlashAttention-2 forward (prefill and decode); cuda_flash/flash_fwd.cu.
int LaunchFlashForward(const AttentionParams& params, void* stream);

// Unfused fp32 attention, any head size; cuda_flash/unfused.cu.
int LaunchUnfused(const AttentionParams& params, void* stream);

}  // namespace attnrt::cuda
