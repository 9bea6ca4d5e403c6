// The plugin table of the CPU plugins (abi/attnrt/plugin.h), returned by each plugin's
// attnrt_plugin_query (plugin.cpp). Every entry catches everything, since nothing may throw across
// the ABI.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>

#include "attnrt/plugin.h"
#include "cpu_plugin.h"
#include "cpu_probe.h"
#include "plugin_context.h"

namespace attnrt::cpu {

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
    std::snprintf(buffer, capacity, "%s %s: %s", kPluginName, where, e.what());
  } catch (...) {
    std::snprintf(buffer, capacity, "%s %s: unknown exception", kPluginName, where);
  }
}

namespace {

int32_t Init(const attnrt_host_services* host, void** out_plugin_context, char* error,
             size_t error_capacity) noexcept {
  const std::string where = std::string(kPluginName) + " init: ";
  try {
    if (host == nullptr || out_plugin_context == nullptr) {
      WriteMessage(error, error_capacity, where + "host and out_plugin_context must not be NULL");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    if (host->struct_size < sizeof(attnrt_host_services)) {
      WriteMessage(error, error_capacity,
                   where + "attnrt_host_services struct_size " + std::to_string(host->struct_size) +
                       " is smaller than the " + std::to_string(sizeof(attnrt_host_services)) +
                       " bytes this plugin was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    if (host->parallel_for == nullptr || host->num_threads == nullptr) {
      WriteMessage(error, error_capacity,
                   where + "host services parallel_for and num_threads are required");
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
    WriteCurrentException(error, error_capacity, "init");
    return ATTNRT_ERROR_INTERNAL;
  }
}

int32_t Probe(void* plugin_context, attnrt_probe_result* out) noexcept {
  if (plugin_context == nullptr || out == nullptr) return ATTNRT_ERROR_INVALID_ARGUMENT;
  if (out->struct_size < sizeof(attnrt_probe_result)) return ATTNRT_ERROR_ABI_MISMATCH;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  // The scalar kernels run on every CPU of the architecture; SIMD kernels decline on their own in
  // supports().
  out->available = 1;
  out->reason = "";
  out->facts = context.facts.data();
  out->num_facts = context.facts.size();
  return ATTNRT_OK;
}

size_t KernelCount(void*) noexcept { return PluginKernels().size(); }

const attnrt_kernel_desc* Kernel(void*, size_t index) noexcept {
  const std::span<const attnrt_kernel_desc> kernels = PluginKernels();
  return index < kernels.size() ? &kernels[index] : nullptr;
}

void Shutdown(void* plugin_context) noexcept { delete static_cast<PluginContext*>(plugin_context); }

}  // namespace

const attnrt_plugin_api* CpuPluginApi() noexcept {
  static const attnrt_plugin_api api = {
      .struct_size = sizeof(attnrt_plugin_api),
      .abi_major = ATTNRT_ABI_VERSION_MAJOR,
      .abi_minor = ATTNRT_ABI_VERSION_MINOR,
      .name = kPluginName,
      .version = "0.1.0",
      .init = &Init,
      .probe = &Probe,
      .kernel_count = &KernelCount,
      .kernel = &Kernel,
      .shutdown = &Shutdown,
  };
  return &api;
}

}  // namespace attnrt::cpu
