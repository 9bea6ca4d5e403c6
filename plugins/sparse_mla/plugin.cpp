// Entry point of libattnrt_sparse_mla.so: the plugin table (abi/attnrt/plugin.h) with the kernels
// of ATTNRT_OP_SPARSE_MLA this architecture builds. x86-64: sparse_mla.sparse_mla.flash.amx_bf16
// (priority 50), sparse_mla.sparse_mla.flash.avx512 (30), sparse_mla.sparse_mla.flash.avx512_bf16
// (25), sparse_mla.sparse_mla.flash.avx2 (20) and sparse_mla.sparse_mla.flash.scalar (10);
// AArch64: sparse_mla.sparse_mla.flash.neon (20) and the same scalar kernel. All compute the
// reference's tiled online softmax with the same rounding points; they differ only in float
// reassociation (and the exp of the vector builds; the bf16 kernels' dot-product instructions also
// flush denormals, docs/sparse-mla.md). Nothing throws across the ABI.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "attnrt/plugin.h"
#include "sparse_mla_kernels.h"

namespace attnrt::sparse_mla {
namespace {

void Write(char* buffer, size_t capacity, const std::string& message) noexcept {
  if (buffer == nullptr || capacity == 0) return;
  const size_t n = std::min(message.size(), capacity - 1);
  std::memcpy(buffer, message.data(), n);
  buffer[n] = '\0';
}

int32_t Init(const attnrt_host_services* host, void** out_plugin_context, char* error,
             size_t error_capacity) noexcept {
  try {
    if (host == nullptr || out_plugin_context == nullptr) {
      Write(error, error_capacity, "sparse_mla init: host and out_plugin_context must not be NULL");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    if (host->struct_size < sizeof(attnrt_host_services)) {
      Write(error, error_capacity,
            "sparse_mla init: attnrt_host_services struct_size " +
                std::to_string(host->struct_size) + " is smaller than the " +
                std::to_string(sizeof(attnrt_host_services)) + " bytes this plugin was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    if (host->parallel_for == nullptr) {
      Write(error, error_capacity, "sparse_mla init: host service parallel_for is required");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    auto context = std::make_unique<PluginContext>();
    std::memcpy(&context->host, host, sizeof(attnrt_host_services));
    context->host.struct_size = sizeof(attnrt_host_services);
    context->cpu = cpu::ProbeCpu();
    for (const auto& [key, value] : context->cpu.facts) {
      context->facts.push_back({key.c_str(), value.c_str()});
    }
    *out_plugin_context = context.release();
    return ATTNRT_OK;
  } catch (const std::exception& e) {
    Write(error, error_capacity, std::string("sparse_mla init: ") + e.what());
    return ATTNRT_ERROR_INTERNAL;
  } catch (...) {
    Write(error, error_capacity, "sparse_mla init: unknown exception");
    return ATTNRT_ERROR_INTERNAL;
  }
}

int32_t Probe(void* plugin_context, attnrt_probe_result* out) noexcept {
  if (plugin_context == nullptr || out == nullptr) return ATTNRT_ERROR_INVALID_ARGUMENT;
  if (out->struct_size < sizeof(attnrt_probe_result)) return ATTNRT_ERROR_ABI_MISMATCH;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  out->available = 1;  // the scalar kernel runs on every CPU of the architecture
  out->reason = "";
  out->facts = context.facts.data();
  out->num_facts = context.facts.size();
  return ATTNRT_OK;
}

// What a kernel needs of this CPU for a problem: "" when it runs, otherwise the reason it declines.
using NeedsFn = std::string (*)(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem& p);
using RunFn = int32_t (*)(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                          char* error, size_t error_capacity);

// The scalar kernel computes every problem the core validates on the CPU.
std::string Always(const cpu::CpuFeatures&, const attnrt_sparse_mla_problem&) { return ""; }

#if defined(__aarch64__)
std::string NeedsNeon(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem&) {
  if (cpu.neon) return "";
  return "needs Advanced SIMD (ASIMD) enabled by the OS; this CPU has: " +
         (cpu.isa.empty() ? std::string("none") : cpu.isa);
}
#else
// The vector builds need their instructions with the OS saving their register state (the probe
// checks XCR0).
std::string NeedsAvx2(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem&) {
  if (cpu.avx2 && cpu.fma && cpu.f16c) return "";
  return "needs AVX2, FMA and F16C with OS-enabled YMM state; this CPU has: " + cpu.isa;
}
std::string NeedsAvx512(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem&) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.fma) return "";
  return "needs AVX-512 F/BW/VL and FMA with OS-enabled ZMM and opmask state; this CPU has: " +
         cpu.isa;
}
// VDPBF16PS multiplies bf16 pairs: exact for bf16 queries and keys, not for float16 ones.
std::string NeedsAvx512Bf16(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem& p) {
  if (p.q_dtype.code != ATTNRT_DTYPE_CODE_BFLOAT) {
    return "computes bfloat16 queries only (q is float16, whose values bfloat16 cannot hold; the "
           "fp32 kernels run it)";
  }
  std::string why = NeedsAvx512(cpu, p);
  if (why.empty() && cpu.avx512bf16 && cpu.f16c) return "";
  return "needs AVX512_BF16 and AVX-512 F/BW/VL, FMA and F16C with OS-enabled ZMM and opmask "
         "state; this CPU has: " +
         cpu.isa;
}
std::string NeedsAmxBf16(const cpu::CpuFeatures& cpu, const attnrt_sparse_mla_problem& p) {
  std::string why = NeedsAvx512Bf16(cpu, p);
  if (!why.empty()) return why;
  if (!cpu.amx_bf16) {
    return "needs AMX-TILE and AMX-BF16 with OS-enabled tile state; this CPU has: " + cpu.isa;
  }
  // Linux hands out the tile data per process on request: asked once (cpu_x86's probe).
  return cpu::AmxTileDataReason();
}
#endif

template <NeedsFn kNeeds>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  const auto* p = static_cast<const attnrt_sparse_mla_problem*>(problem);
  if (plugin_context == nullptr || p == nullptr || p->struct_size != sizeof(*p)) {
    Write(reason, reason_capacity, "problem struct of another ABI version");
    return 0;
  }
  if (p->device_type != ATTNRT_DEVICE_CPU) {
    Write(reason, reason_capacity, "tensors are not on the CPU");
    return 0;
  }
  try {
    const std::string why = kNeeds(static_cast<const PluginContext*>(plugin_context)->cpu, *p);
    if (why.empty()) return 1;
    Write(reason, reason_capacity, why);
  } catch (...) {
    Write(reason, reason_capacity, "out of memory");
  }
  return 0;
}

size_t WorkspaceSize(void*, const void*) noexcept { return 0; }

template <RunFn kRun>
int32_t Run(void* plugin_context, const void* args, char* error, size_t error_capacity) noexcept {
  if (plugin_context == nullptr || args == nullptr) {
    Write(error, error_capacity, "sparse_mla run: NULL context or args");
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  const auto& a = *static_cast<const attnrt_sparse_mla_args*>(args);
  if (a.struct_size != sizeof(attnrt_sparse_mla_args)) {
    Write(error, error_capacity, "sparse_mla run: args struct of another ABI version");
    return ATTNRT_ERROR_ABI_MISMATCH;
  }
  const auto& host = static_cast<const PluginContext*>(plugin_context)->host;
  try {
    return kRun(host, a, error, error_capacity);
  } catch (...) {
    Write(error, error_capacity, "sparse_mla run: unexpected exception");
    return ATTNRT_ERROR_INTERNAL;
  }
}

template <NeedsFn kNeeds, RunFn kRun>
constexpr attnrt_kernel_desc Kernel(const char* name, int32_t priority) {
  return {.struct_size = sizeof(attnrt_kernel_desc),
          .name = name,
          .op_kind = ATTNRT_OP_SPARSE_MLA,
          .device_type = ATTNRT_DEVICE_CPU,
          .priority = priority,
          .supports = &Supports<kNeeds>,
          .workspace_size = &WorkspaceSize,
          .run = &Run<kRun>};
}

const attnrt_kernel_desc kKernels[] = {
#if defined(__aarch64__)
    Kernel<&NeedsNeon, &RunNeon>("sparse_mla.sparse_mla.flash.neon", 20),
#else
    // AMX-BF16 first (1.6-2x the fp32 AVX-512 kernel, docs/sparse-mla.md). AVX512-BF16 below
    // the fp32 AVX-512 kernel: where it was measured VDPBF16PS retires a quarter as many
    // instructions per cycle as VFMADD231PS, half the FLOP rate, so it runs only when pinned.
    Kernel<&NeedsAmxBf16, &RunAmxBf16>("sparse_mla.sparse_mla.flash.amx_bf16", 50),
    Kernel<&NeedsAvx512, &RunAvx512>("sparse_mla.sparse_mla.flash.avx512", 30),
    Kernel<&NeedsAvx512Bf16, &RunAvx512Bf16>("sparse_mla.sparse_mla.flash.avx512_bf16", 25),
    Kernel<&NeedsAvx2, &RunAvx2>("sparse_mla.sparse_mla.flash.avx2", 20),
#endif
    Kernel<&Always, &RunScalar>("sparse_mla.sparse_mla.flash.scalar", 10),
};

size_t KernelCount(void*) noexcept { return sizeof(kKernels) / sizeof(kKernels[0]); }

const attnrt_kernel_desc* KernelAt(void*, size_t index) noexcept {
  return index < KernelCount(nullptr) ? &kKernels[index] : nullptr;
}

void Shutdown(void* plugin_context) noexcept { delete static_cast<PluginContext*>(plugin_context); }

constexpr attnrt_plugin_api kApi = {
    .struct_size = sizeof(attnrt_plugin_api),
    .abi_major = ATTNRT_ABI_VERSION_MAJOR,
    .abi_minor = ATTNRT_ABI_VERSION_MINOR,
    .name = "sparse_mla",
    .version = "0.1.0",
    .init = &Init,
    .probe = &Probe,
    .kernel_count = &KernelCount,
    .kernel = &KernelAt,
    .shutdown = &Shutdown,
};

}  // namespace
}  // namespace attnrt::sparse_mla

extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return &attnrt::sparse_mla::kApi;
}
