// The run pipeline of every CUDA GroupQueryAttention kernel, on the caller's stream: per-batch
// lengths to the device, past rows copied into a separate present (zero-filled first, as the
// reference does), new rows appended with RoPE and quantization, then the attention launcher.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/gqa.h"
#include "gqa_cuda_plan.h"
#include "gqa_launchers.h"
#include "plugin_base.h"

namespace attnrt::cuda {

// Returns an attnrt_status; on failure writes the reason (with the CUDA error text) to `error`.
int32_t RunGqa(void* plugin_context, const void* args, KernelKind kind, AttentionLauncher launcher,
               char* error, size_t error_capacity) noexcept;

}  // namespace attnrt::cuda
