// The plugin table shared by the cuda_* plugins: init (probe the device once), probe, kernel list,
// shutdown, and the glue from a kernel descriptor to the run pipeline (gqa_cuda_run.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnrt/plugin.h"
#include "cuda_probe.h"

namespace attnrt::cuda {

// State of one init(): everything mutable lives here, never in globals.
struct PluginContext {
  attnrt_host_services host;
  ProbeResult probe;
  std::vector<attnrt_plugin_fact> facts;  // points into probe.facts
};

// Copies `message` into the ABI's (buffer, capacity): truncated, NUL-terminated.
void WriteMessage(char* buffer, size_t capacity, std::string_view message) noexcept;

// supports() of a kernel: the plugin's device caps and the kernel's rule.
using DeclineRule = std::string (*)(const attnrt_gqa_problem&, const DeviceCaps&);
int32_t SupportsWith(DeclineRule rule, void* plugin_context, const void* problem, char* reason,
                     size_t reason_capacity) noexcept;

// Builds the plugin table for `name` over a static kernel table.
attnrt_plugin_api MakePluginApi(const char* name, const attnrt_kernel_desc* kernels,
                                size_t num_kernels);

}  // namespace attnrt::cuda
