#include "core/discovery.h"

#include <algorithm>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstddef>
#include <filesystem>
#include <set>
#include <system_error>
#include <unordered_map>

#include "core/elf_check.h"
#include "core/plugin_call.h"
#include "core/plugin_trust.h"

namespace attnrt::core {
namespace {

namespace fs = std::filesystem;
namespace dll = boost::dll;

constexpr size_t kMessageCapacity = 1024;
constexpr size_t kMinPluginApiSize = offsetof(attnrt_plugin_api, shutdown) + sizeof(void*);
constexpr size_t kMinKernelDescSize = offsetof(attnrt_kernel_desc, run) + sizeof(void*);
// Bounds on what one plugin's tables make the runtime read and report: a kernel_count() of SIZE_MAX
// must not loop for ever, nor a table of broken kernels fill memory with diagnostics.
constexpr size_t kMaxKernelsPerPlugin = 1024;
constexpr size_t kMaxKernelDiagnostics = 16;
constexpr size_t kMaxFacts = 256;

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
  // A relative folder would be looked up from the current directory, which is wherever the program
  // happens to run (".", or an empty entry, is how plugins get planted): refused, never searched.
  if (!fs::path(folder).is_absolute()) {
    diagnostics->push_back({folder, "plugin folder from " + source +
                                        " is a relative path: not searched (it would be looked "
                                        "up from the current directory); give an absolute path"});
    return files;
  }
  if (!fs::is_directory(folder, ec)) {
    // Missing, not a folder, or unreadable (a symbolic link loop, no permission): said as such.
    std::error_code missing;
    const bool absent =
        ec == std::errc::no_such_file_or_directory || (!ec && !fs::exists(folder, missing));
    const std::string why = absent ? "does not exist"
                            : ec   ? "cannot be read: " + ec.message()
                                   : "is not a folder";
    diagnostics->push_back({folder, "plugin folder from " + source + " " + why});
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

// Names are short identifiers; a longer "name" is refused rather than read without bound.
constexpr size_t kMaxNameLength = 255;

bool ValidName(const char* name) {
  if (name == nullptr || name[0] == '\0') return false;
  for (size_t i = 0; name[i] != '\0'; ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok || i >= kMaxNameLength) return false;
  }
  return true;
}

std::string ErrorText(const char* buffer, const char* fallback) {
  return (buffer[0] != '\0') ? std::string(buffer) : std::string(fallback);
}

// Loads, checks and initializes one file, found as `file` and opened as `canonical` (the path
// whose ownership and modes were checked). Returns nullptr and appends a diagnostic on failure.
// A plugin whose name `loaded` already holds is skipped right after attnrt_plugin_query, before
// init() and probe(). Every call into the plugin goes through CallPlugin: an exception is described
// while the library is still loaded, and only then is the record (and with it the library)
// released.
std::unique_ptr<PluginRecord> LoadPlugin(
    const fs::path& file, const fs::path& canonical, const RuntimeConfig& config,
    const attnrt_host_services* host,
    const std::unordered_map<std::string, const PluginRecord*>& loaded,
    std::vector<Diagnostic>* diagnostics) {
  const std::string path = file.string();
  auto record = std::make_unique<PluginRecord>();
  record->path = path;
  record->log = &config.log;
  auto fail = [&](std::string message) {
    const std::string shutdown_failure = record->Shutdown();
    if (!shutdown_failure.empty()) message += "; then shutdown() " + shutdown_failure;
    diagnostics->push_back({path, std::move(message)});
    return nullptr;
  };
  // dlopen of a truncated file or one for another machine fails badly (SIGBUS, or a misleading
  // message): the file's ELF headers are checked first.
  const std::string elf_problem = CheckElfFile(canonical.string());
  if (!elf_problem.empty()) return fail("not a loadable shared library: " + elf_problem);
  try {
    // rtld_now surfaces missing symbols at load; rtld_local keeps plugins' symbols apart.
    record->library.load(canonical, dll::load_mode::rtld_now | dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fail(std::string("not a loadable shared library: ") + e.what());
  }
  if (!record->library.has(ATTNRT_PLUGIN_ENTRY_NAME)) {
    return fail(std::string("does not export the entry symbol ") + ATTNRT_PLUGIN_ENTRY_NAME);
  }
  const auto query =
      &record->library.get<const attnrt_plugin_api*(uint32_t, uint32_t)>(ATTNRT_PLUGIN_ENTRY_NAME);
  const attnrt_plugin_api* api = nullptr;
  std::string failure =
      CallPlugin([&] { api = query(ATTNRT_ABI_VERSION_MAJOR, ATTNRT_ABI_VERSION_MINOR); });
  if (!failure.empty()) return fail(std::string(ATTNRT_PLUGIN_ENTRY_NAME) + " " + failure);
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
    return fail("plugin name is missing, longer than " + std::to_string(kMaxNameLength) +
                " characters or has characters outside [A-Za-z0-9_.-]");
  }
  // The name is known only now: a duplicate has run its library's constructors and its query,
  // but neither init() nor probe() (nor shutdown(), having no context).
  if (const auto owner = loaded.find(api->name); owner != loaded.end()) {
    return fail("duplicate plugin name '" + std::string(api->name) + "' (already loaded from " +
                owner->second->path + "); skipped before init()");
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
  const std::string who = "plugin '" + record->name + "'";

  char error[kMessageCapacity] = {0};
  void* context = nullptr;
  int32_t init_status = ATTNRT_ERROR_INTERNAL;
  failure = CallPlugin([&] { init_status = api->init(host, &context, error, sizeof(error)); });
  error[sizeof(error) - 1] = '\0';
  if (!failure.empty()) return fail(who + " init() " + failure);
  if (init_status != ATTNRT_OK) {
    return fail(who + " init failed (" + StatusText(init_status) +
                "): " + ErrorText(error, "no message"));
  }
  record->api = api;  // from here on Shutdown() (or the destructor) calls shutdown(context)
  record->context = context;

  attnrt_probe_result probe = {};
  probe.struct_size = sizeof(probe);
  int32_t probe_status = ATTNRT_ERROR_INTERNAL;
  failure = CallPlugin([&] { probe_status = api->probe(context, &probe); });
  if (!failure.empty()) return fail(who + " probe() " + failure);
  if (probe_status != ATTNRT_OK) {
    return fail(who + " probe failed (" + StatusText(probe_status) +
                "): " + ErrorText(probe.reason != nullptr ? probe.reason : "", "no message"));
  }
  record->available = probe.available == 1;
  record->reason = (!record->available && probe.reason != nullptr) ? probe.reason : "";
  if (!record->available && record->reason.empty()) record->reason = "probe reported unavailable";
  const size_t num_facts = probe.facts != nullptr ? std::min(probe.num_facts, kMaxFacts) : 0;
  for (size_t i = 0; i < num_facts; ++i) {
    const auto& fact = probe.facts[i];
    if (fact.key == nullptr) continue;
    record->facts.emplace_back(fact.key, fact.value != nullptr ? fact.value : "");
  }
  return record;
}

// "<plugin>.<op>.<algorithm>.<isa>": a kernel is named inside its plugin's prefix, so that no
// plugin can register (and so take over) a name of another plugin's kernel.
bool HasPluginPrefix(const std::string& kernel, const std::string& plugin) {
  return kernel.size() > plugin.size() + 1 && kernel.compare(0, plugin.size(), plugin) == 0 &&
         kernel[plugin.size()] == '.';
}

// Reads the plugin's kernel table: a malformed, misnamed or duplicate kernel is skipped with a
// diagnostic (at most kMaxKernelDiagnostics of them per plugin, then one that counts the rest). An
// exception out of kernel_count() or kernel() skips the whole plugin: returns false.
bool RegisterKernels(PluginRecord* plugin,
                     std::unordered_map<std::string, const PluginRecord*>* kernel_owner,
                     std::vector<Diagnostic>* diagnostics) {
  size_t listed = 0;
  size_t unlisted = 0;
  auto report = [&](std::string message) {
    if (listed < kMaxKernelDiagnostics) {
      diagnostics->push_back({plugin->path, std::move(message)});
      ++listed;
    } else {
      ++unlisted;
    }
  };
  auto report_unlisted = [&] {
    if (unlisted == 0) return;
    diagnostics->push_back({plugin->path, "plugin '" + plugin->name +
                                              "': " + std::to_string(unlisted) +
                                              " more kernels skipped (not listed one by one)"});
  };
  size_t count = 0;
  std::string failure = CallPlugin([&] { count = plugin->api->kernel_count(plugin->context); });
  if (!failure.empty()) {
    diagnostics->push_back(
        {plugin->path, "plugin '" + plugin->name + "' kernel_count() " + failure + "; skipped"});
    return false;
  }
  if (count > kMaxKernelsPerPlugin) {
    report("plugin '" + plugin->name + "' kernel_count() returned " + std::to_string(count) +
           ", more than the " + std::to_string(kMaxKernelsPerPlugin) +
           " kernels a plugin may register; only the first " +
           std::to_string(kMaxKernelsPerPlugin) + " are read");
    count = kMaxKernelsPerPlugin;
  }
  std::set<std::string> own_names;
  for (size_t i = 0; i < count; ++i) {
    const attnrt_kernel_desc* desc = nullptr;
    const std::string where = "plugin '" + plugin->name + "' kernel #" + std::to_string(i);
    failure = CallPlugin([&] { desc = plugin->api->kernel(plugin->context, i); });
    if (!failure.empty()) {
      report_unlisted();
      diagnostics->push_back({plugin->path, where + ": kernel() " + failure + "; plugin skipped"});
      return false;
    }
    if (desc == nullptr) {
      report(where + " is NULL; skipped");
      continue;
    }
    if (desc->struct_size < kMinKernelDescSize) {
      report(where + " has struct_size " + std::to_string(desc->struct_size) +
             ", expected at least " + std::to_string(kMinKernelDescSize) + "; skipped");
      continue;
    }
    if (!ValidName(desc->name) || desc->supports == nullptr || desc->workspace_size == nullptr ||
        desc->run == nullptr) {
      report(where + " has no valid name or leaves supports/workspace_size/run NULL; skipped");
      continue;
    }
    const std::string name = desc->name;
    if (!HasPluginPrefix(name, plugin->name)) {
      report(where + " is named '" + name + "', outside the plugin's own prefix '" + plugin->name +
             ".'; skipped");
      continue;
    }
    const auto owner = kernel_owner->find(name);
    if (owner != kernel_owner->end() || !own_names.insert(name).second) {
      const PluginRecord* first = owner != kernel_owner->end() ? owner->second : plugin;
      report("duplicate kernel name '" + name + "' (already registered by plugin '" + first->name +
             "' from " + first->path + "); skipped");
      continue;
    }
    plugin->kernels.push_back(
        {name, desc, plugin, desc->op_kind, desc->device_type, desc->priority});
  }
  report_unlisted();
  for (const auto& kernel : plugin->kernels) kernel_owner->emplace(kernel.name, plugin);
  // Reported in rank order, the order dispatch tries them.
  std::stable_sort(plugin->kernels.begin(), plugin->kernels.end(),
                   [](const KernelRecord& a, const KernelRecord& b) {
                     if (a.priority != b.priority) return a.priority > b.priority;
                     return a.name < b.name;
                   });
  return true;
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
  const TrustedIds ids = ProcessIds();
  for (size_t p = 0; p < config.plugin_paths.size(); ++p) {
    for (const auto& file :
         CandidateFiles(config.plugin_paths[p], config.path_sources[p], &result.diagnostics)) {
      std::error_code ec;
      const fs::path canonical = fs::canonical(file, ec);
      if (ec) {
        result.diagnostics.push_back({file.string(), "cannot resolve the path: " + ec.message()});
        continue;
      }
      // The same file reached through two search paths is one plugin, not a duplicate.
      if (!seen_files.insert(canonical).second) continue;
      if (!config.allow_insecure_plugins) {
        const TrustVerdict verdict = CheckTrustedPath(canonical.string(), ids);
        if (!verdict.refusal.empty()) {
          result.diagnostics.push_back(
              {file.string(), "not loaded: " + verdict.refusal +
                                  "; another user could have planted or changed it "
                                  "(ATTNRT_PLUGIN_ALLOW_INSECURE=1 or "
                                  "options.allow_insecure_plugins = 1 loads it anyway)"});
          continue;
        }
        if (!verdict.warning.empty()) {
          result.diagnostics.push_back(
              {file.string(), "loaded, but " + verdict.warning +
                                  ": members of that group could have planted or changed it"});
        }
      }
      auto record = LoadPlugin(file, canonical, config, host, plugin_owner, &result.diagnostics);
      if (!record) continue;
      if (!RegisterKernels(record.get(), &kernel_owner, &result.diagnostics)) {
        const std::string shutdown_failure = record->Shutdown();
        if (!shutdown_failure.empty()) {
          result.diagnostics.push_back(
              {record->path, "plugin '" + record->name + "' shutdown() " + shutdown_failure});
        }
        continue;
      }
      plugin_owner.emplace(record->name, record.get());
      result.plugins.push_back(std::move(record));
    }
  }
  return result;
}

}  // namespace attnrt::core
