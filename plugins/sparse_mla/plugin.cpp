// Entry point of libattnrt_sparse_mla.so: the plugin table (abi/attnrt/plugin.h) with three
// kernels of ATTNRT_OP_SPARSE_MLA, sparse_mla.sparse_mla.flash.avx512 (priority 30),
// sparse_mla.sparse_mla.flash.avx2 (priority 20) and sparse_mla.sparse_mla.flash.scalar (priority
// 10); the gap above 30 is for kernels on wider dot-product instructions. All compute the
// reference's tiled online softmax with the same rounding points; they differ only in float
// reassociation (and the exp of the vector builds). Nothing throws across the ABI.
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
  out->available = 1;  // the scalar kernel runs on every x86-64 CPU
  out->reason = "";
  out->facts = context.facts.data();
  out->num_facts = context.facts.size();
  return ATTNRT_OK;
}

enum class Isa { kScalar, kAvx2, kAvx512 };

// Every kernel computes every problem the core validates on the CPU; the vector builds need their
// instructions with the OS saving their register state (the probe checks XCR0).
template <Isa kIsa>
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
  const auto& cpu = static_cast<const PluginContext*>(plugin_context)->cpu;
  if (kIsa == Isa::kAvx2 && !(cpu.avx2 && cpu.fma && cpu.f16c)) {
    Write(reason, reason_capacity,
          "needs AVX2, FMA and F16C with OS-enabled YMM state; this CPU has: " + cpu.isa);
    return 0;
  }
  if (kIsa == Isa::kAvx512 && !(cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.fma)) {
    Write(reason, reason_capacity,
          "needs AVX-512 F/BW/VL and FMA with OS-enabled ZMM and opmask state; this CPU has: " +
              cpu.isa);
    return 0;
  }
  return 1;
}

size_t WorkspaceSize(void*, const void*) noexcept { return 0; }

template <Isa kIsa>
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
    switch (kIsa) {
      case Isa::kAvx512:
        return RunAvx512(host, a, error, error_capacity);
      case Isa::kAvx2:
        return RunAvx2(host, a, error, error_capacity);
      default:
        return RunScalar(host, a, error, error_capacity);
    }
  } catch (...) {
    Write(error, error_capacity, "sparse_mla run: unexpected exception");
    return ATTNRT_ERROR_INTERNAL;
  }
}

const attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "sparse_mla.sparse_mla.flash.avx512",
     .op_kind = ATTNRT_OP_SPARSE_MLA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = 30,
     .supports = &Supports<Isa::kAvx512>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<Isa::kAvx512>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "sparse_mla.sparse_mla.flash.avx2",
     .op_kind = ATTNRT_OP_SPARSE_MLA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = 20,
     .supports = &Supports<Isa::kAvx2>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<Isa::kAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "sparse_mla.sparse_mla.flash.scalar",
     .op_kind = ATTNRT_OP_SPARSE_MLA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = 10,
     .supports = &Supports<Isa::kScalar>,
     .workspace_size = &WorkspaceSize,
     .run = &Run<Isa::kScalar>},
};

size_t KernelCount(void*) noexcept { return sizeof(kKernels) / sizeof(kKernels[0]); }

const attnrt_kernel_desc* Kernel(void*, size_t index) noexcept {
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
    .kernel = &Kernel,
    .shutdown = &Shutdown,
};

}  // namespace
}  // namespace attnrt::sparse_mla

extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return &attnrt::sparse_mla::kApi;
}
