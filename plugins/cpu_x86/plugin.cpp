// Entry point of libattnrt_cpu_x86.so: the plugin table (abi/attnrt/plugin.h). The only exported
// symbol is attnrt_plugin_query; every entry catches everything, since nothing may throw across the
// ABI.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "attnrt/plugin.h"
#include "gqa_kernels.h"
#include "gqa_paged.h"
#include "plugin_context.h"
#include "probe.h"

namespace attnrt::cpu_x86 {

void WriteMessage(char* buffer, size_t capacity, std::string_view message) noexcept {
  if (buffer == nullptr || capacity == 0) return;
  const size_t n = std::min(message.size(), capacity - 1);
  std::memcpy(buffer, message.data(), n);
  buffer[n] = '\0';
}

void WriteCurrentException(char* buffer, size_t capacity, const char* where) noexcept {
  if (buffer == nullptr || capacity == 0) return;
  try {
    throw;
  } catch (const std::exception& e) {
    std::snprintf(buffer, capacity, "%s: %s", where, e.what());
  } catch (...) {
    std::snprintf(buffer, capacity, "%s: unknown exception", where);
  }
}

namespace {

int32_t Init(const attnrt_host_services* host, void** out_plugin_context, char* error,
             size_t error_capacity) noexcept {
  try {
    if (host == nullptr || out_plugin_context == nullptr) {
      WriteMessage(error, error_capacity,
                   "cpu_x86 init: host and out_plugin_context must not be NULL");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    if (host->struct_size < sizeof(attnrt_host_services)) {
      WriteMessage(error, error_capacity,
                   "cpu_x86 init: attnrt_host_services struct_size " +
                       std::to_string(host->struct_size) + " is smaller than the " +
                       std::to_string(sizeof(attnrt_host_services)) +
                       " bytes this plugin was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    if (host->parallel_for == nullptr || host->num_threads == nullptr) {
      WriteMessage(error, error_capacity,
                   "cpu_x86 init: host services parallel_for and num_threads are required");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    auto context = std::make_unique<PluginContext>();
    // A newer host may pass a larger struct; this plugin keeps the part it knows.
    std::memcpy(&context->host, host, sizeof(attnrt_host_services));
    context->host.struct_size = sizeof(attnrt_host_services);
    context->cpu = ProbeCpu();
    for (const auto& [key, value] : context->cpu.facts) {
      context->facts.push_back({key.c_str(), value.c_str()});
    }
    *out_plugin_context = context.release();
    return ATTNRT_OK;
  } catch (...) {
    WriteCurrentException(error, error_capacity, "cpu_x86 init");
    return ATTNRT_ERROR_INTERNAL;
  }
}

int32_t Probe(void* plugin_context, attnrt_probe_result* out) noexcept {
  if (plugin_context == nullptr || out == nullptr) return ATTNRT_ERROR_INVALID_ARGUMENT;
  if (out->struct_size < sizeof(attnrt_probe_result)) return ATTNRT_ERROR_ABI_MISMATCH;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  // The scalar kernels run on every x86-64 CPU; SIMD kernels decline on their own in supports().
  out->available = 1;
  out->reason = "";
  out->facts = context.facts.data();
  out->num_facts = context.facts.size();
  return ATTNRT_OK;
}

size_t KernelCount(void*) noexcept { return GqaKernelCount() + PagedGqaKernelCount(); }

const attnrt_kernel_desc* Kernel(void*, size_t index) noexcept {
  return index < GqaKernelCount() ? GqaKernel(index) : PagedGqaKernel(index - GqaKernelCount());
}

void Shutdown(void* plugin_context) noexcept { delete static_cast<PluginContext*>(plugin_context); }

constexpr attnrt_plugin_api kApi = {
    .struct_size = sizeof(attnrt_plugin_api),
    .abi_major = ATTNRT_ABI_VERSION_MAJOR,
    .abi_minor = ATTNRT_ABI_VERSION_MINOR,
    .name = "cpu_x86",
    .version = "0.1.0",
    .init = &Init,
    .probe = &Probe,
    .kernel_count = &KernelCount,
    .kernel = &Kernel,
    .shutdown = &Shutdown,
};

}  // namespace
}  // namespace attnrt::cpu_x86

// The table is returned whatever the host's version: the runtime compares abi_major itself and then
// names both versions in its diagnostic, which a NULL could not.
extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return &attnrt::cpu_x86::kApi;
}
