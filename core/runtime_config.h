// Runtime configuration: runtime options first, then environment variables (README.md).
#pragma once

#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "core/logging.h"
#include "core/status.h"

namespace attnrt::core {

// A list of kernel-name globs and where it came from ("options.kernel", "ATTNRT_KERNEL", ...), so
// explain can say which setting excluded a kernel.
struct GlobList {
  std::vector<std::string> patterns;
  std::string source;

  bool empty() const { return patterns.empty(); }
  // The first pattern matching `name` (fnmatch rules), or nullptr.
  const std::string* Match(const std::string& name) const;
};

constexpr size_t kDefaultPlanCacheSize = 64;

struct RuntimeConfig {
  std::vector<std::string> plugin_paths;  // in search order
  std::vector<std::string> path_sources;  // where each path came from, for diagnostics
  GlobList pins;
  GlobList disabled;
  bool debug = false;
  int num_threads = 1;
  size_t plan_cache_size = kDefaultPlanCacheSize;  // plans each op keeps
  LogSink log;
  // The host's executor (ABI 1.3); null: the runtime's own pool.
  attnrt_executor_fn executor = nullptr;
  void* executor_context = nullptr;
  // Load plugins that another user could have written (ABI 1.4; docs/plugins.md, "Security").
  bool allow_insecure_plugins = false;
};

// Resolves options (may be NULL) and the environment into a config. Errors name the option.
// `default_plugin_dir` is the attnrt/plugins folder beside libattnrt.so.
Status ResolveConfig(const attnrt_runtime_options* options, const std::string& default_plugin_dir,
                     RuntimeConfig* out, std::vector<std::string>* warnings);

// Splits "a,b, c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> SplitList(const std::string& text, char separator);

}  // namespace attnrt::core
