// Plugin discovery (docs/plugins.md): candidate files libattnrt_*.so in the configured folders,
// loaded with Boost.DLL, ABI-checked, initialized and probed. A file that fails any step becomes a
// Diagnostic naming the file and the reason; discovery itself never fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attnrt/plugin.h"
#include "core/plugin_record.h"
#include "core/runtime_config.h"

namespace attnrt::core {

struct DiscoveryResult {
  std::vector<std::unique_ptr<PluginRecord>> plugins;  // in search order
  std::vector<Diagnostic> diagnostics;
};

// The attnrt/plugins folder beside libattnrt.so, or "" when it cannot be determined.
std::string DefaultPluginDir();

DiscoveryResult DiscoverPlugins(const RuntimeConfig& config, const attnrt_host_services* host);

}  // namespace attnrt::core
