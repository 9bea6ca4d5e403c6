#include "core/runtime.h"

#include <cstdlib>
#include <new>

#include "core/discovery.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

RuntimeState* State(void* host_context) { return static_cast<RuntimeState*>(host_context); }

// Host services are called from plugin code: nothing may be thrown back into it.
void HostLog(void* host_context, int32_t level, const char* message) {
  try {
    State(host_context)->Log(level, message != nullptr ? message : "");
  } catch (...) {
    // Out of memory while copying the message: the line is lost.
  }
}

void HostParallelFor(void* host_context, size_t n, size_t grain, attnrt_parallel_fn fn,
                     void* user_data) {
  if (fn == nullptr) return;
  try {
    bool every_range_ran = true;
    const Status status =
        State(host_context)->pool().ParallelFor(n, grain, fn, user_data, &every_range_ran);
    // A callback threw, or the executor did: the plugin call this parallel_for belongs to fails
    // with the description (a nested call has already failed its enclosing one). Outside any
    // plugin call, it is logged.
    if (status.ok() || ThreadPool::InsideParallelRegion()) return;
    if (!PluginCallScope::Report(status.message, every_range_ran)) {
      State(host_context)->Log(ATTNRT_LOG_ERROR, "parallel_for: " + status.message);
    }
  } catch (...) {
    // Out of memory before the ranges were handed out: the call into the plugin fails.
    try {
      PluginCallScope::Report("parallel_for ran out of memory; its callback did not run");
    } catch (...) {
    }
  }
}

int32_t HostNumThreads(void* host_context) { return State(host_context)->pool().num_threads(); }

void* HostAlloc(void* /*host_context*/, size_t size, size_t alignment) {
  if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
  if ((alignment & (alignment - 1)) != 0) return nullptr;
  if (size == 0) size = 1;
  const size_t rounded = (size + alignment - 1) / alignment * alignment;
  if (rounded < size) return nullptr;
  return std::aligned_alloc(alignment, rounded);
}

void HostFree(void* /*host_context*/, void* ptr) { std::free(ptr); }

}  // namespace

Status RuntimeState::Create(const attnrt_runtime_options* options,
                            std::shared_ptr<RuntimeState>* out) {
  std::shared_ptr<RuntimeState> state(new RuntimeState());
  std::vector<std::string> warnings;
  ATTNRT_RETURN_IF_ERROR(ResolveConfig(options, DefaultPluginDir(), &state->config_, &warnings));
  for (const auto& warning : warnings) state->Log(ATTNRT_LOG_WARNING, warning);

  if (state->config_.executor != nullptr) {
    // The host's threads run the parallel work: no thread is started here.
    state->pool_ = std::make_unique<ThreadPool>(state->config_.num_threads, state->config_.executor,
                                                state->config_.executor_context);
  } else {
    state->pool_ = std::make_unique<ThreadPool>(state->config_.num_threads);
  }
  if (!state->pool_->start_failure().empty()) {
    state->Log(ATTNRT_LOG_WARNING, "thread pool: " + state->pool_->start_failure() +
                                       "; running with " +
                                       std::to_string(state->pool_->num_threads()));
  }
  state->host_.struct_size = sizeof(attnrt_host_services);
  state->host_.abi_major = ATTNRT_ABI_VERSION_MAJOR;
  state->host_.abi_minor = ATTNRT_ABI_VERSION_MINOR;
  state->host_.host_context = state.get();
  state->host_.log = HostLog;
  state->host_.parallel_for = HostParallelFor;
  state->host_.num_threads = HostNumThreads;
  state->host_.alloc = HostAlloc;
  state->host_.free = HostFree;

  DiscoveryResult discovered = DiscoverPlugins(state->config_, &state->host_);
  state->plugins_ = std::move(discovered.plugins);
  state->diagnostics_ = std::move(discovered.diagnostics);
  state->registry_.Build(state->plugins_);
  if (state->config_.debug) {
    for (const auto& plugin : state->plugins_) {
      state->Log(ATTNRT_LOG_DEBUG, "loaded plugin " + plugin->name + " " + plugin->version +
                                       " from " + plugin->path + " (" +
                                       std::to_string(plugin->kernels.size()) + " kernels)");
    }
    for (const auto& diagnostic : state->diagnostics_) {
      state->Log(ATTNRT_LOG_DEBUG, "skipped " + diagnostic.path + ": " + diagnostic.message);
    }
  }
  *out = std::move(state);
  return Status::Ok();
}

RuntimeState::~RuntimeState() = default;

}  // namespace attnrt::core
