// RuntimeState: everything an attnrt_runtime handle owns. Ops and plans hold a shared_ptr to it, so
// loaded plugins and the thread pool outlive the handle while anything made from them is alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attnrt/plugin.h"
#include "core/plugin_record.h"
#include "core/registry.h"
#include "core/runtime_config.h"
#include "core/thread_pool.h"

namespace attnrt::core {

class RuntimeState {
 public:
  static Status Create(const attnrt_runtime_options* options, std::shared_ptr<RuntimeState>* out);
  ~RuntimeState();

  const RuntimeConfig& config() const { return config_; }
  ThreadPool& pool() { return *pool_; }
  const attnrt_host_services* host() const { return &host_; }
  const std::vector<std::unique_ptr<PluginRecord>>& plugins() const { return plugins_; }
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }
  const Registry& registry() const { return registry_; }
  void Log(int32_t level, const std::string& message) const { config_.log.Log(level, message); }

 private:
  RuntimeState() = default;

  RuntimeConfig config_;
  // Destroyed in reverse order: the registry, then plugins (shutdown while the pool and host
  // services still exist), then the pool.
  std::unique_ptr<ThreadPool> pool_;
  attnrt_host_services host_{};
  std::vector<std::unique_ptr<PluginRecord>> plugins_;
  std::vector<Diagnostic> diagnostics_;
  Registry registry_;
};

}  // namespace attnrt::core

// The opaque handle: one reference to the shared state.
struct attnrt_runtime {
  std::shared_ptr<attnrt::core::RuntimeState> state;
};
