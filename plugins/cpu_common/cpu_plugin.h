// What a CPU plugin (cpu_x86, cpu_arm) provides to the shared code of plugins/cpu_common, which
// includes nothing of a plugin's own:
//   - its CPU-feature probe: CpuFeatures and ProbeCpu() of cpu_probe.h, from the attnrt_cpu_probe
//     library of its architecture, which the plugin links;
//   - kPluginName (plugin.cpp);
//   - PluginKernels(): every kernel descriptor it registers, in rank order, from its one
//     kernel_list.cpp (priorities from cpu_kernel_ranks.h).
// plugin_table.cpp serves these through the plugin table (abi/attnrt/plugin.h).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "attnrt/plugin.h"
#include "cpu_probe.h"

namespace attnrt::cpu {

// The plugin's name ("cpu_x86", "cpu_arm"): the table's name and the prefix of its messages.
extern const char kPluginName[];

// The plugin's kernel descriptors in rank order: priority (higher first), then name, the order
// the runtime tries them in. plugin_context of their functions is a PluginContext*.
std::span<const attnrt_kernel_desc> PluginKernels() noexcept;

// Whether `kernels` is in rank order (for a static_assert beside each list).
constexpr bool InRankOrder(std::span<const attnrt_kernel_desc> kernels) {
  for (size_t i = 1; i < kernels.size(); ++i) {
    const attnrt_kernel_desc& a = kernels[i - 1];
    const attnrt_kernel_desc& b = kernels[i];
    if (a.priority < b.priority) return false;
    if (a.priority == b.priority && std::string_view(a.name) >= std::string_view(b.name)) {
      return false;
    }
  }
  return true;
}

}  // namespace attnrt::cpu
