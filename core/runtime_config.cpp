#include "core/runtime_config.h"

#include <fnmatch.h>

#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <thread>

namespace attnrt::core {
namespace {

constexpr int kMaxThreads = 1024;

const char* Env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// For the variables that decide which code is loaded: unset in a program running with privileges
// its caller lacks (set-user-ID, capabilities: glibc's secure mode), as the dynamic loader ignores
// LD_LIBRARY_PATH there.
const char* SecureEnv(const char* name) {
  const char* value = secure_getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

bool ParseInt(const std::string& text, int* out) {
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, *out);
  return ec == std::errc() && ptr == last;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// 1, true, on, yes (any case).
bool IsTrue(const std::string& text) {
  const std::string t = Lower(text);
  return t == "1" || t == "true" || t == "on" || t == "yes";
}

// 0, false, off, no (any case).
bool IsFalse(const std::string& text) {
  const std::string t = Lower(text);
  return t == "0" || t == "false" || t == "off" || t == "no";
}

}  // namespace

const std::string* GlobList::Match(const std::string& name) const {
  for (const auto& pattern : patterns) {
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return &pattern;
  }
  return nullptr;
}

std::vector<std::string> SplitList(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    if (first != std::string::npos) items.push_back(item.substr(first, last - first + 1));
    start = end + 1;
  }
  return items;
}

Status ResolveConfig(const attnrt_runtime_options* options, const std::string& default_plugin_dir,
                     RuntimeConfig* out, std::vector<std::string>* warnings) {
  attnrt_runtime_options defaults;
  attnrt_runtime_options_init(&defaults);
  if (options == nullptr) options = &defaults;
  constexpr size_t kMinSize = offsetof(attnrt_runtime_options, log_user_data) + sizeof(void*);
  if (options->struct_size < kMinSize) {
    return AbiMismatch(
        "attnrt_runtime_options struct_size: expected at least " + std::to_string(kMinSize) +
        " (the struct of ABI 1.0; ABI " + std::to_string(ATTNRT_ABI_VERSION_MAJOR) + "." +
        std::to_string(ATTNRT_ABI_VERSION_MINOR) + "'s is " +
        std::to_string(ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE) + "), got " +
        std::to_string(options->struct_size) + "; call attnrt_runtime_options_init first");
  }
  if (options->num_plugin_paths > 0 && options->plugin_paths == nullptr) {
    return InvalidArgument("options.plugin_paths: expected an array of " +
                           std::to_string(options->num_plugin_paths) + " paths, got NULL");
  }
  if (options->search_default_paths != 0 && options->search_default_paths != 1) {
    return InvalidArgument("options.search_default_paths: expected 0 or 1, got " +
                           std::to_string(options->search_default_paths));
  }
  if (options->debug < -1 || options->debug > 1) {
    return InvalidArgument("options.debug: expected -1, 0 or 1, got " +
                           std::to_string(options->debug));
  }
  // Fields of ABI 1.2: read only when the caller's struct holds them.
  const int32_t plan_cache_size =
      options->struct_size >= offsetof(attnrt_runtime_options, plan_cache_size) + sizeof(int32_t)
          ? options->plan_cache_size
          : -1;
  if (plan_cache_size < -1) {
    return InvalidArgument(
        "options.plan_cache_size: expected -1 (default), 0 (no cache) or a "
        "number of plans, got " +
        std::to_string(plan_cache_size));
  }
  // Fields of ABI 1.3, likewise.
  constexpr size_t kExecutorEnd = offsetof(attnrt_runtime_options, executor) + sizeof(void*);
  constexpr size_t kExecutorContextEnd =
      offsetof(attnrt_runtime_options, executor_context) + sizeof(void*);
  const attnrt_executor_fn executor =
      options->struct_size >= kExecutorEnd ? options->executor : nullptr;
  void* const executor_context =
      options->struct_size >= kExecutorContextEnd ? options->executor_context : nullptr;
  // ABI 1.4.
  const int32_t allow_insecure_plugins =
      options->struct_size >=
              offsetof(attnrt_runtime_options, allow_insecure_plugins) + sizeof(int32_t)
          ? options->allow_insecure_plugins
          : -1;
  if (allow_insecure_plugins < -1 || allow_insecure_plugins > 1) {
    return InvalidArgument(
        "options.allow_insecure_plugins: expected -1 (default: ATTNRT_PLUGIN_ALLOW_INSECURE), 0 "
        "or 1, got " +
        std::to_string(allow_insecure_plugins));
  }
  if (executor == nullptr && executor_context != nullptr) {
    return InvalidArgument(
        "options.executor_context: expected NULL when options.executor is NULL (the context is "
        "passed only to an executor), got a pointer");
  }
  if (options->num_threads < 0 || options->num_threads > kMaxThreads) {
    return InvalidArgument("options.num_threads: expected 0 (default) to " +
                           std::to_string(kMaxThreads) + ", got " +
                           std::to_string(options->num_threads));
  }

  RuntimeConfig config;
  for (size_t i = 0; i < options->num_plugin_paths; ++i) {
    if (options->plugin_paths[i] == nullptr || options->plugin_paths[i][0] == '\0') {
      return InvalidArgument("options.plugin_paths[" + std::to_string(i) +
                             "]: expected a folder path, got " +
                             (options->plugin_paths[i] == nullptr ? "NULL" : "\"\""));
    }
    config.plugin_paths.emplace_back(options->plugin_paths[i]);
    config.path_sources.emplace_back("options.plugin_paths");
  }
  if (options->search_default_paths == 1) {
    if (const char* env = SecureEnv("ATTNRT_PLUGIN_PATH")) {
      for (auto& path : SplitList(env, ':')) {
        config.plugin_paths.push_back(path);
        config.path_sources.emplace_back("ATTNRT_PLUGIN_PATH");
      }
    }
    if (!default_plugin_dir.empty()) {
      config.plugin_paths.push_back(default_plugin_dir);
      config.path_sources.emplace_back("beside libattnrt.so");
    }
  }

  if (options->kernel != nullptr) {
    config.pins = {SplitList(options->kernel, ','), "options.kernel"};
  } else if (const char* env = Env("ATTNRT_KERNEL")) {
    config.pins = {SplitList(env, ','), "ATTNRT_KERNEL"};
  }
  if (options->disable != nullptr) {
    config.disabled = {SplitList(options->disable, ','), "options.disable"};
  } else if (const char* env = Env("ATTNRT_DISABLE")) {
    config.disabled = {SplitList(env, ','), "ATTNRT_DISABLE"};
  }

  if (options->debug >= 0) {
    config.debug = options->debug == 1;
  } else if (const char* env = Env("ATTNRT_DEBUG")) {
    config.debug = IsTrue(env);
  }

  int threads = options->num_threads;
  if (threads == 0) {
    if (const char* env = Env("ATTNRT_NUM_THREADS")) {
      int parsed = 0;
      if (ParseInt(env, &parsed) && parsed >= 1 && parsed <= kMaxThreads) {
        threads = parsed;
      } else {
        warnings->push_back("ATTNRT_NUM_THREADS: expected an integer in [1, " +
                            std::to_string(kMaxThreads) + "], got \"" + env +
                            "\"; using the hardware thread count");
      }
    }
  }
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  config.num_threads = threads;

  if (plan_cache_size >= 0) {
    config.plan_cache_size = static_cast<size_t>(plan_cache_size);
  } else if (const char* env = Env("ATTNRT_PLAN_CACHE_SIZE")) {
    int parsed = 0;
    if (ParseInt(env, &parsed) && parsed >= 0) {
      config.plan_cache_size = static_cast<size_t>(parsed);
    } else {
      warnings->push_back("ATTNRT_PLAN_CACHE_SIZE: expected an integer >= 0, got \"" +
                          std::string(env) + "\"; using " + std::to_string(kDefaultPlanCacheSize));
    }
  }
  if (allow_insecure_plugins >= 0) {
    config.allow_insecure_plugins = allow_insecure_plugins == 1;
  } else if (const char* env = SecureEnv("ATTNRT_PLUGIN_ALLOW_INSECURE")) {
    config.allow_insecure_plugins = IsTrue(env);
    if (!config.allow_insecure_plugins && !IsFalse(env)) {
      warnings->push_back(
          "ATTNRT_PLUGIN_ALLOW_INSECURE: expected 1, true, on or yes (allow) or 0, false, off or "
          "no (refuse), any case, got \"" +
          std::string(env) + "\"; plugins in insecure places are refused");
    }
  }
  config.log = {options->log_fn, options->log_user_data};
  config.executor = executor;
  config.executor_context = executor_context;
  *out = std::move(config);
  return Status::Ok();
}

}  // namespace attnrt::core
