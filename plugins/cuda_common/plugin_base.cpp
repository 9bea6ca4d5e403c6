// Plugin table of the cuda_* plugins (see plugin_base.h). Nothing throws across the ABI: every
// entry catches everything.
#include "plugin_base.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace attnrt::cuda {
namespace {

// One table per plugin library; MakePluginApi fills it before the entry symbol returns it.
const attnrt_kernel_desc* g_kernels = nullptr;
size_t g_num_kernels = 0;

int32_t Init(const attnrt_host_services* host, void** out_plugin_context, char* error,
             size_t error_capacity) noexcept {
  try {
    if (host == nullptr || out_plugin_context == nullptr) {
      WriteMessage(error, error_capacity, "init: host and out_plugin_context must not be NULL");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    if (host->struct_size < sizeof(attnrt_host_services)) {
      WriteMessage(error, error_capacity,
                   "init: attnrt_host_services struct_size " + std::to_string(host->struct_size) +
                       " is smaller than the " + std::to_string(sizeof(attnrt_host_services)) +
                       " bytes this plugin was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    auto context = std::make_unique<PluginContext>();
    std::memcpy(&context->host, host, sizeof(attnrt_host_services));
    context->host.struct_size = sizeof(attnrt_host_services);
    context->probe = ProbeCudaDevice();
    for (const auto& [key, value] : context->probe.facts) {
      context->facts.push_back({key.c_str(), value.c_str()});
    }
    *out_plugin_context = context.release();
    return ATTNRT_OK;
  } catch (...) {
    WriteMessage(error, error_capacity, "init: unexpected exception (out of memory?)");
    return ATTNRT_ERROR_INTERNAL;
  }
}

int32_t Probe(void* plugin_context, attnrt_probe_result* out) noexcept {
  if (plugin_context == nullptr || out == nullptr) return ATTNRT_ERROR_INVALID_ARGUMENT;
  if (out->struct_size < sizeof(attnrt_probe_result)) return ATTNRT_ERROR_ABI_MISMATCH;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  out->available = context.probe.available ? 1 : 0;
  out->reason = context.probe.reason.c_str();
  out->facts = context.facts.data();
  out->num_facts = context.facts.size();
  return ATTNRT_OK;
}

size_t KernelCount(void*) noexcept { return g_num_kernels; }

const attnrt_kernel_desc* Kernel(void*, size_t index) noexcept {
  return index < g_num_kernels ? &g_kernels[index] : nullptr;
}

void Shutdown(void* plugin_context) noexcept { delete static_cast<PluginContext*>(plugin_context); }

}  // namespace

void WriteMessage(char* buffer, size_t capacity, std::string_view message) noexcept {
  if (buffer == nullptr || capacity == 0) return;
  const size_t n = std::min(message.size(), capacity - 1);
  std::memcpy(buffer, message.data(), n);
  buffer[n] = '\0';
}

int32_t SupportsWith(DeclineRule rule, void* plugin_context, const void* problem, char* reason,
                     size_t reason_capacity) noexcept {
  try {
    if (plugin_context == nullptr || problem == nullptr) {
      WriteMessage(reason, reason_capacity, "supports: plugin_context and problem are required");
      return 0;
    }
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
    const std::string why = rule(p, context.probe.caps);
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
    return 0;
  } catch (...) {
    WriteMessage(reason, reason_capacity, "supports: unexpected exception");
    return 0;
  }
}

attnrt_plugin_api MakePluginApi(const char* name, const attnrt_kernel_desc* kernels,
                                size_t num_kernels) {
  g_kernels = kernels;
  g_num_kernels = num_kernels;
  attnrt_plugin_api api{};
  api.struct_size = sizeof(attnrt_plugin_api);
  api.abi_major = ATTNRT_ABI_VERSION_MAJOR;
  api.abi_minor = ATTNRT_ABI_VERSION_MINOR;
  api.name = name;
  api.version = "0.1.0";
  api.init = &Init;
  api.probe = &Probe;
  api.kernel_count = &KernelCount;
  api.kernel = &Kernel;
  api.shutdown = &Shutdown;
  return api;
}

}  // namespace attnrt::cuda
