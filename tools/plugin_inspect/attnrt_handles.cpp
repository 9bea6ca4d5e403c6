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

bool runtime_has_kernel(const attnrt_runtime* runtime, const std::string& name) {
  size_t plugin_count = 0;
  check(attnrt_runtime_plugin_count(runtime, &plugin_count));
  for (size_t p = 0; p < plugin_count; ++p) {
    attnrt_plugin_info info{};
    info.struct_size = sizeof(info);
    check(attnrt_runtime_plugin_info(runtime, p, &info));
    if (info.available == 0) continue;
    for (size_t k = 0; k < info.num_kernels; ++k) {
      attnrt_kernel_info kernel{};
      kernel.struct_size = sizeof(kernel);
      check(attnrt_runtime_plugin_kernel(runtime, p, k, &kernel));
      if (kernel.name != nullptr && name == kernel.name) return true;
    }
  }
  return false;
}

std::string device_name(int32_t device_type) {
  switch (device_type) {
    case ATTNRT_DEVICE_CPU:
      return "cpu";
    case ATTNRT_DEVICE_CUDA:
      return "cuda";
    default:
      return "device(" + std::to_string(device_type) + ")";
  }
}

nlohmann::ordered_json runtime_json(const attnrt_runtime* runtime) {
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  nlohmann::ordered_json json;
  json["version"] = attnrt_version_string();
  json["abi_version"] = std::to_string(major) + "." + std::to_string(minor);
  json["threads"] = runtime_threads(runtime);
  return json;
}

}  // namespace plugin_inspect
