#include "core/discovery.h"

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstddef>
#include <filesystem>
#include <set>
#include <system_error>
#include <unordered_map>

namespace attnrt::core {
namespace {

namespace fs = std::filesystem;
namespace dll = boost::dll;

constexpr size_t kMessageCapacity = 1024;
constexpr size_t kMinPluginApiSize = offsetof(attnrt_plugin_api, shutdown) + sizeof(void*);
constexpr size_t kMinKernelDescSize = offsetof(attnrt_kernel_desc, run) + sizeof(void*);

bool IsCandidateName(const std::string& file_name) {
  constexpr std::string_view kPrefix = "libattnrt_";
  constexpr std::string_view kSuffix = ".so";
  return file_name.size() > kPrefix.size() + kSuffix.size() && file_name.starts_with(kPrefix) &&
         file_name.ends_with(kSuffix);
}

// Candidate files of one folder, sorted by name so discovery order is deterministic.
std::vector<fs::path> CandidateFiles(const std::string& folder, const std::string& source,
                                     std::vector<Diagnostic>* diagnostics) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    diagnostics->push_back({folder, "plugin folder from " + source + " does not exist"});
    return files;
  }
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file_name = it->path().filename().string();
    if (!IsCandidateName(file_name)) continue;
    // Only regular files are opened (a FIFO or device would block or mislead dlopen); anything
    // else with a plugin's name is reported, so nothing named like a plugin vanishes silently.
    std::error_code type_ec;
    const fs::file_status status = fs::status(it->path(), type_ec);
    if (type_ec) {
      diagnostics->push_back(
          {it->path().string(), "cannot read file status: " + type_ec.message()});
    } else if (fs::is_regular_file(status)) {
      files.push_back(it->path());
    } else {
      const char* kind = fs::is_directory(status) ? "a directory"
                         : fs::is_fifo(status)    ? "a FIFO"
                         : fs::is_character_file(status) || fs::is_block_file(status) ? "a device"
                         : fs::is_socket(status)                                      ? "a socket"
                                                 : "not a regular file";
      diagnostics->push_back({it->path().string(), std::string("not a plugin: ") + kind});
    }
  }
  if (ec) diagnostics->push_back({folder, "cannot list plugin folder: " + ec.message()});
  std::sort(files.begin(), files.end());
  return files;
}

bool ValidName(const char* name) {
  if (name == nullptr || name[0] == '\0') return false;
  for (const char* p = name; *p != '\0'; ++p) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string ErrorText(const char* buffer, const char* fallback) {
  return (buffer[0] != '\0') ? std::string(buffer) : std::string(fallback);
}

// Loads, checks and initializes one file. Returns nullptr and appends a diagnostic on failure.
std::unique_ptr<PluginRecord> LoadPlugin(const fs::path& file, const attnrt_host_services* host,
                                         std::vector<Diagnostic>* diagnostics) {
  const std::string path = file.string();
  auto fail = [&](std::string message) {
    diagnostics->push_back({path, std::move(message)});
    return nullptr;
  };
  auto record = std::make_unique<PluginRecord>();
  record->path = path;
  try {
    // rtld_now surfaces missing symbols at load; rtld_local keeps plugins' symbols apart.
    record->library.load(file, dll::load_mode::rtld_now | dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fail(std::string("not a loadable shared library: ") + e.what());
  }
  if (!record->library.has(ATTNRT_PLUGIN_ENTRY_NAME)) {
    return fail(std::string("does not export the entry symbol ") + ATTNRT_PLUGIN_ENTRY_NAME);
  }
  const auto query =
      &record->library.get<const attnrt_plugin_api*(uint32_t, uint32_t)>(ATTNRT_PLUGIN_ENTRY_NAME);
  const attnrt_plugin_api* api = query(ATTNRT_ABI_VERSION_MAJOR, ATTNRT_ABI_VERSION_MINOR);
  if (api == nullptr) {
    return fail(std::string(ATTNRT_PLUGIN_ENTRY_NAME) + " returned NULL for host ABI " +
                std::to_string(ATTNRT_ABI_VERSION_MAJOR) + "." +
                std::to_string(ATTNRT_ABI_VERSION_MINOR));
  }
  if (api->struct_size < kMinPluginApiSize) {
    return fail("plugin table struct_size is " + std::to_string(api->struct_size) +
                ", expected at least " + std::to_string(kMinPluginApiSize));
  }
  if (api->abi_major != ATTNRT_ABI_VERSION_MAJOR) {
    return fail("plugin ABI major version " + std::to_string(api->abi_major) +
                " differs from the runtime's ABI " + std::to_string(ATTNRT_ABI_VERSION_MAJOR) +
                "." + std::to_string(ATTNRT_ABI_VERSION_MINOR));
  }
  if (!ValidName(api->name)) {
    return fail("plugin name is missing or has characters outside [A-Za-z0-9_.-]");
  }
  if (api->init == nullptr || api->probe == nullptr || api->kernel_count == nullptr ||
      api->kernel == nullptr || api->shutdown == nullptr) {
    return fail(std::string("plugin '") + api->name +
                "' leaves a required function of its table NULL (init, probe, kernel_count, "
                "kernel, shutdown)");
  }
  record->name = api->name;
  record->version = api->version != nullptr ? api->version : "";
  record->abi_major = api->abi_major;
  record->abi_minor = api->abi_minor;

  char error[kMessageCapacity] = {0};
  void* context = nullptr;
  const int32_t init_status = api->init(host, &context, error, sizeof(error));
  error[sizeof(error) - 1] = '\0';
  if (init_status != ATTNRT_OK) {
    return fail("plugin '" + record->name + "' init failed (" +
                attnrt_status_name(static_cast<attnrt_status>(init_status)) +
                "): " + ErrorText(error, "no message"));
  }
  record->api = api;  // from here on the destructor calls shutdown(context)
  record->context = context;

  attnrt_probe_result probe = {};
  probe.struct_size = sizeof(probe);
  const int32_t probe_status = api->probe(context, &probe);
  if (probe_status != ATTNRT_OK) {
    return fail("plugin '" + record->name + "' probe failed (" +
                attnrt_status_name(static_cast<attnrt_status>(probe_status)) +
                "): " + (probe.reason != nullptr ? probe.reason : "no message"));
  }
  record->available = probe.available == 1;
  record->reason = (!record->available && probe.reason != nullptr) ? probe.reason : "";
  if (!record->available && record->reason.empty()) record->reason = "probe reported unavailable";
  for (size_t i = 0; probe.facts != nullptr && i < probe.num_facts; ++i) {
    const auto& fact = probe.facts[i];
    if (fact.key == nullptr) continue;
    record->facts.emplace_back(fact.key, fact.value != nullptr ? fact.value : "");
  }
  return record;
}

// Reads the plugin's kernel table; malformed or duplicate kernels are skipped with a diagnostic.
void RegisterKernels(PluginRecord* plugin,
                     std::unordered_map<std::string, const PluginRecord*>* kernel_owner,
                     std::vector<Diagnostic>* diagnostics) {
  const size_t count = plugin->api->kernel_count(plugin->context);
  for (size_t i = 0; i < count; ++i) {
    const attnrt_kernel_desc* desc = plugin->api->kernel(plugin->context, i);
    const std::string where = "plugin '" + plugin->name + "' kernel #" + std::to_string(i);
    if (desc == nullptr) {
      diagnostics->push_back({plugin->path, where + " is NULL; skipped"});
      continue;
    }
    if (desc->struct_size < kMinKernelDescSize) {
      diagnostics->push_back({plugin->path, where + " has struct_size " +
                                                std::to_string(desc->struct_size) +
                                                ", expected at least " +
                                                std::to_string(kMinKernelDescSize) + "; skipped"});
      continue;
    }
    if (!ValidName(desc->name) || desc->supports == nullptr || desc->workspace_size == nullptr ||
        desc->run == nullptr) {
      diagnostics->push_back(
          {plugin->path,
           where + " has no valid name or leaves supports/workspace_size/run NULL; skipped"});
      continue;
    }
    auto [it, inserted] = kernel_owner->emplace(desc->name, plugin);
    if (!inserted) {
      diagnostics->push_back({plugin->path, "duplicate kernel name '" + std::string(desc->name) +
                                                "' (already registered by plugin '" +
                                                it->second->name + "' from " + it->second->path +
                                                "); skipped"});
      continue;
    }
    plugin->kernels.push_back(
        {desc->name, desc, plugin, desc->op_kind, desc->device_type, desc->priority});
  }
  // Reported in rank order, the order dispatch tries them.
  std::stable_sort(plugin->kernels.begin(), plugin->kernels.end(),
                   [](const KernelRecord& a, const KernelRecord& b) {
                     if (a.priority != b.priority) return a.priority > b.priority;
                     return a.name < b.name;
                   });
}

}  // namespace

std::string DefaultPluginDir() {
  std::error_code ec;
  const fs::path library = dll::this_line_location(ec);
  if (ec || library.empty()) return "";
  const fs::path folder = library.parent_path() / ATTNRT_PLUGIN_SUBDIR;
  const fs::path canonical = fs::weakly_canonical(folder, ec);
  return (ec ? folder : canonical).string();
}

DiscoveryResult DiscoverPlugins(const RuntimeConfig& config, const attnrt_host_services* host) {
  DiscoveryResult result;
  std::set<fs::path> seen_files;
  std::unordered_map<std::string, const PluginRecord*> plugin_owner;
  std::unordered_map<std::string, const PluginRecord*> kernel_owner;
  for (size_t p = 0; p < config.plugin_paths.size(); ++p) {
    for (const auto& file :
         CandidateFiles(config.plugin_paths[p], config.path_sources[p], &result.diagnostics)) {
      std::error_code ec;
      const fs::path canonical = fs::weakly_canonical(file, ec);
      // The same file reached through two search paths is one plugin, not a duplicate.
      if (!seen_files.insert(ec ? file : canonical).second) continue;
      auto record = LoadPlugin(file, host, &result.diagnostics);
      if (!record) continue;
      auto owner = plugin_owner.find(record->name);
      if (owner != plugin_owner.end()) {
        result.diagnostics.push_back({record->path, "duplicate plugin name '" + record->name +
                                                        "' (already loaded from " +
                                                        owner->second->path + "); skipped"});
        continue;
      }
      RegisterKernels(record.get(), &kernel_owner, &result.diagnostics);
      plugin_owner.emplace(record->name, record.get());
      result.plugins.push_back(std::move(record));
    }
  }
  return result;
}

}  // namespace attnrt::core
