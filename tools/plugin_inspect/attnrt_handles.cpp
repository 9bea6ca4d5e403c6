#include "attnrt_handles.h"

#include "errors.h"

namespace plugin_inspect {

RuntimePtr make_runtime(const RuntimeSettings& settings) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  std::vector<const char*> paths;
  paths.reserve(settings.plugin_paths.size());
  for (const std::string& path : settings.plugin_paths) paths.push_back(path.c_str());
  options.plugin_paths = paths.empty() ? nullptr : paths.data();
  options.num_plugin_paths = paths.size();
  options.search_default_paths = settings.no_default_paths ? 0 : 1;
  if (settings.kernel) options.kernel = settings.kernel->c_str();
  if (settings.disable) options.disable = settings.disable->c_str();
  options.num_threads = settings.threads;
  attnrt_runtime* runtime = nullptr;
  check(attnrt_runtime_create(&options, &runtime));
  return RuntimePtr(runtime);
}

int runtime_threads(const attnrt_runtime* runtime) {
  int32_t threads = 0;
  check(attnrt_runtime_num_threads(runtime, &threads));
  return threads;
}

}  // namespace plugin_inspect
