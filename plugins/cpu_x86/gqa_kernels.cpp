// Kernel descriptors of the cpu_x86 GroupQueryAttention family: what each accepts (and why not),
// its workspace, and the dispatch to the ISA row pipeline.
#include "gqa_kernels.h"

#include <iterator>
#include <string>

#include "attnrt/ops/gqa.h"
#include "plugin_context.h"

namespace attnrt::cpu_x86 {
namespace {

// Ranking scheme of the CPU kernels (DESIGN §3: flash > naive, then AVX-512 > AVX2 > scalar): naive
// 100, flash 200; +0 scalar, +20 AVX2, +30 AVX-512.
constexpr int32_t kNaivePriority = 100;
constexpr int32_t kAvx2Bonus = 20;

bool IsFloat32(attnrt_dtype d) {
  return d.code == ATTNRT_DTYPE_CODE_FLOAT && d.bits == 32 && d.lanes == 1;
}

// The names attnrt_dtype_name gives (the plugin cannot link the core).
std::string DtypeName(attnrt_dtype d) {
  if (d.lanes == 1) {
    switch (d.code) {
      case ATTNRT_DTYPE_CODE_FLOAT:
        if (d.bits == 32) return "float32";
        if (d.bits == 16) return "float16";
        break;
      case ATTNRT_DTYPE_CODE_BFLOAT:
        if (d.bits == 16) return "bfloat16";
        break;
      case ATTNRT_DTYPE_CODE_INT:
        if (d.bits == 4) return "int4";
        if (d.bits == 8) return "int8";
        if (d.bits == 32) return "int32";
        if (d.bits == 64) return "int64";
        break;
      case ATTNRT_DTYPE_CODE_UINT:
        if (d.bits == 8) return "uint8";
        break;
      case ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN:
        if (d.bits == 8) return "float8_e4m3fn";
        break;
      case ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU:
        if (d.bits == 8) return "float8_e8m0fnu";
        break;
      default:
        break;
    }
  }
  return "unknown";
}

std::string QuantTypeName(int32_t type) {
  switch (type) {
    case ATTNRT_GQA_QUANT_PER_TENSOR:
      return "PER_TENSOR";
    case ATTNRT_GQA_QUANT_PER_CHANNEL:
      return "PER_CHANNEL";
    default:
      return std::to_string(type);
  }
}

std::string DeviceName(int32_t device_type) {
  switch (device_type) {
    case ATTNRT_DEVICE_CPU:
      return "CPU";
    case ATTNRT_DEVICE_CUDA:
      return "CUDA";
    default:
      return std::to_string(device_type);
  }
}

// Empty when the naive float32 pipeline computes `p` as the reference does; else the reason it does
// not. Everything else the reference defines on CPU (phases, packing, shared buffers, masks,
// rotary, softcap, bias, sinks, qk_output) is supported.
std::string DeclineReason(const attnrt_gqa_problem& p) {
  if (p.struct_size < sizeof(attnrt_gqa_problem)) {
    return "attnrt_gqa_problem struct_size " + std::to_string(p.struct_size) +
           " is smaller than the " + std::to_string(sizeof(attnrt_gqa_problem)) +
           " bytes this kernel was built with";
  }
  if (p.device_type != ATTNRT_DEVICE_CPU) {
    return "device " + DeviceName(p.device_type) + " is not supported (CPU tensors only)";
  }
  if (!IsFloat32(p.query_dtype)) {
    return "query dtype " + DtypeName(p.query_dtype) + " is not supported (float32 only)";
  }
  if (p.attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE) {
    return "quantized KV cache (k_quant_type=" + QuantTypeName(p.attributes.k_quant_type) +
           ") is not supported";
  }
  if (!IsFloat32(p.cache_dtype)) {
    return "KV cache dtype " + DtypeName(p.cache_dtype) + " is not supported (float32 only)";
  }
  if (p.attributes.sliding_window_cache == 1) return "sliding_window_cache=1 is not supported";
  return {};
}

std::string Avx2DeclineReason(const CpuFeatures& cpu) {
  if (cpu.avx2 && cpu.fma) return {};
  return "requires AVX2 and FMA with OS-enabled AVX state; this CPU/OS provides: " +
         (cpu.isa.empty() ? std::string("the x86-64 baseline only") : cpu.isa);
}

template <bool kNeedsAvx2>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    std::string why = kNeedsAvx2 ? Avx2DeclineReason(context.cpu) : std::string();
    if (why.empty()) why = DeclineReason(*static_cast<const attnrt_gqa_problem*>(problem));
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "cpu_x86 gqa supports()");
  }
  return 0;
}

size_t WorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
  // supports() declined such a problem; nothing larger than what it read may be touched.
  if (p.struct_size < sizeof(attnrt_gqa_problem)) return 0;
  return GqaWorkspaceSize(static_cast<const PluginContext*>(plugin_context)->host, p);
}

template <GqaAttendRowsFn kAttendRows>
int32_t Run(void* plugin_context, const void* args, char* error, size_t error_capacity) noexcept {
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
    return RunGqa(context.host, a, kAttendRows, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "cpu_x86 gqa run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

constexpr attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.naive.scalar",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority,
     .supports = &Supports<false>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<&GqaAttendRowsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.naive.avx2",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority + kAvx2Bonus,
     .supports = &Supports<true>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<&GqaAttendRowsAvx2>},
};

}  // namespace

size_t GqaKernelCount() noexcept { return std::size(kKernels); }

const attnrt_kernel_desc* GqaKernel(size_t index) noexcept {
  return index < std::size(kKernels) ? &kKernels[index] : nullptr;
}

}  // namespace attnrt::cpu_x86
