// The C ABI entry points of libattnrt.so (attnrt.h). Each one validates its arguments, runs inside
// a guard that turns every exception into a status, and records the message for the calling thread.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "attnrt/attnrt.h"
#include "attnrt/block_pool.h"
#include "core/block_pool.h"
#include "core/op.h"
#include "core/runtime.h"

namespace {

using attnrt::core::Status;

thread_local std::string t_last_error;

attnrt_status Record(const Status& status) {
  if (status.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = status.message;
  }
  return status.code;
}

template <typename F>
attnrt_status Guard(F&& body) {
  try {
    return Record(body());
  } catch (const std::bad_alloc&) {
    return Record({ATTNRT_ERROR_OUT_OF_MEMORY, "out of memory"});
  } catch (const std::exception& e) {
    return Record(attnrt::core::Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Record(attnrt::core::Internal("unexpected exception of unknown type"));
  }
}

// Block pool entry points: an allocation failure (std::bad_alloc, or a container asked for more
// than it can hold) is OUT_OF_MEMORY. Every pool method reserves before it changes anything, so
// the pool is unchanged.
template <typename F>
attnrt_status PoolGuard(const char* function, F&& body) {
  try {
    return Record(body());
  } catch (const std::bad_alloc&) {
    return Record({ATTNRT_ERROR_OUT_OF_MEMORY,
                   std::string(function) + ": out of host memory; nothing was changed"});
  } catch (const std::length_error&) {
    return Record({ATTNRT_ERROR_OUT_OF_MEMORY,
                   std::string(function) + ": out of host memory; nothing was changed"});
  } catch (const std::exception& e) {
    return Record(
        attnrt::core::Internal(std::string(function) + ": unexpected exception: " + e.what()));
  } catch (...) {
    return Record(
        attnrt::core::Internal(std::string(function) + ": unexpected exception of unknown type"));
  }
}

Status NullArgument(const char* name) {
  return attnrt::core::InvalidArgument(std::string(name) +
                                       ": expected a non-NULL pointer, got NULL");
}

// The struct_size of an output struct as this library's headers declare it: the end of its last
// field (ATTNRT_STRUCT_SIZE). None has grown since it was released, so that is also the least a
// caller may give.
template <typename T>
struct OutStruct;
#define ATTNRT_OUT_STRUCT(type, size)     \
  template <>                             \
  struct OutStruct<type> {                \
    static constexpr size_t kSize = size; \
  }
ATTNRT_OUT_STRUCT(attnrt_plugin_info, ATTNRT_PLUGIN_INFO_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_kernel_info, ATTNRT_KERNEL_INFO_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_diagnostic, ATTNRT_DIAGNOSTIC_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_plan_info, ATTNRT_PLAN_INFO_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_plan_cache_info, ATTNRT_PLAN_CACHE_INFO_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_candidate, ATTNRT_CANDIDATE_STRUCT_SIZE);
ATTNRT_OUT_STRUCT(attnrt_block_pool_stats, ATTNRT_BLOCK_POOL_STATS_STRUCT_SIZE);
#undef ATTNRT_OUT_STRUCT

// Output structs carry the caller's struct_size: it must cover what this library writes.
template <typename T>
Status CheckOutStruct(const T* out, const char* name) {
  if (out == nullptr) return NullArgument(name);
  if (out->struct_size < OutStruct<T>::kSize) {
    return attnrt::core::AbiMismatch(std::string(name) + "->struct_size: expected at least " +
                                     std::to_string(OutStruct<T>::kSize) + ", got " +
                                     std::to_string(out->struct_size) +
                                     "; set it to the struct's ATTNRT_*_STRUCT_SIZE (or sizeof)");
  }
  return Status::Ok();
}

// A struct to fill, every byte 0 (padding included: what WriteOut copies reaches the caller).
template <typename T>
void Zero(T* value) {
  std::memset(static_cast<void*>(value), 0, sizeof(T));
}

// Writes `value` into the caller's struct, its struct_size kept, and no byte past that size (the
// caller's object may end there: ATTNRT_STRUCT_SIZE leaves out the tail padding).
template <typename T>
void WriteOut(T* out, const T& value) {
  const size_t size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, std::min(size, sizeof(T)));
  out->struct_size = size;
}

Status IndexNotFound(const char* what, size_t index, size_t count) {
  return attnrt::core::NotFound(std::string(what) + ": index " + std::to_string(index) +
                                " is out of range [0, " + std::to_string(count) + ")");
}

#define ATTNRT_REQUIRE(ptr) \
  if ((ptr) == nullptr) return NullArgument(#ptr)

// The runtime handles attnrt_runtime_create made that attnrt_runtime_destroy has not destroyed. A
// pointer that is not one (destroyed, or never made here) is refused by name instead of read, so a
// stale or forged handle from a binding gets an error, not a crash. Never destroyed: a handle may
// be checked or destroyed during the process's exit.
struct LiveRuntimes {
  std::mutex mutex;
  std::unordered_set<const attnrt_runtime*> handles;
};

LiveRuntimes& Live() {
  static LiveRuntimes* live = new LiveRuntimes();
  return *live;
}

Status RequireRuntime(const attnrt_runtime* runtime) {
  if (runtime == nullptr) return NullArgument("runtime");
  LiveRuntimes& live = Live();
  std::lock_guard<std::mutex> lock(live.mutex);
  if (live.handles.count(runtime) == 0) {
    return attnrt::core::InvalidArgument(
        "runtime: not a live attnrt_runtime (destroyed already, or not made by "
        "attnrt_runtime_create)");
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

ATTNRT_API const char* attnrt_last_error_message(void) { return t_last_error.c_str(); }

ATTNRT_API const char* attnrt_version_string(void) { return ATTNRT_VERSION_STRING; }

ATTNRT_API void attnrt_abi_version(uint32_t* major, uint32_t* minor) {
  if (major != nullptr) *major = ATTNRT_ABI_VERSION_MAJOR;
  if (minor != nullptr) *minor = ATTNRT_ABI_VERSION_MINOR;
}

ATTNRT_API attnrt_status attnrt_runtime_options_init_sized(attnrt_runtime_options* options,
                                                           size_t struct_size) {
  if (options == nullptr) {
    return Record(attnrt::core::InvalidArgument(
        "options: expected a pointer to an attnrt_runtime_options to fill, got NULL"));
  }
  if (struct_size < sizeof(size_t)) {
    return Record(attnrt::core::AbiMismatch(
        "attnrt_runtime_options struct_size: expected at least " + std::to_string(sizeof(size_t)) +
        " (the struct_size field), got " + std::to_string(struct_size)));
  }
  // Each default is written only when the caller's struct holds the whole field.
  attnrt_runtime_options defaults{};
  defaults.struct_size = std::min(struct_size, sizeof(attnrt_runtime_options));
  defaults.search_default_paths = 1;
  defaults.debug = -1;
  defaults.plan_cache_size = -1;
  defaults.allow_insecure_plugins = -1;
  size_t covered = 0;
  auto fits = [&](size_t end) {
    if (end > defaults.struct_size) return;
    covered = end;
  };
#define ATTNRT_FIELD_END(field) \
  (offsetof(attnrt_runtime_options, field) + sizeof(attnrt_runtime_options::field))
  fits(ATTNRT_FIELD_END(struct_size));
  fits(ATTNRT_FIELD_END(plugin_paths));
  fits(ATTNRT_FIELD_END(num_plugin_paths));
  fits(ATTNRT_FIELD_END(search_default_paths));
  fits(ATTNRT_FIELD_END(kernel));
  fits(ATTNRT_FIELD_END(disable));
  fits(ATTNRT_FIELD_END(debug));
  fits(ATTNRT_FIELD_END(num_threads));
  fits(ATTNRT_FIELD_END(log_fn));
  fits(ATTNRT_FIELD_END(log_user_data));
  fits(ATTNRT_FIELD_END(plan_cache_size));
  fits(ATTNRT_FIELD_END(executor));
  fits(ATTNRT_FIELD_END(executor_context));
  fits(ATTNRT_FIELD_END(allow_insecure_plugins));
#undef ATTNRT_FIELD_END
  std::memcpy(options, &defaults, covered);
  return Record(Status::Ok());
}

// ABI 1.0 and 1.1 callers have a struct that ends at log_user_data.
ATTNRT_API void(attnrt_runtime_options_init)(attnrt_runtime_options* options) {
  (void)attnrt_runtime_options_init_sized(
      options, offsetof(attnrt_runtime_options, log_user_data) + sizeof(void*));
}

ATTNRT_API attnrt_status attnrt_runtime_create(const attnrt_runtime_options* options,
                                               attnrt_runtime** out_runtime) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(out_runtime);
    *out_runtime = nullptr;
    std::shared_ptr<attnrt::core::RuntimeState> state;
    ATTNRT_RETURN_IF_ERROR(attnrt::core::RuntimeState::Create(options, &state));
    auto runtime = std::make_unique<attnrt_runtime>(attnrt_runtime{std::move(state)});
    {
      LiveRuntimes& live = Live();
      std::lock_guard<std::mutex> lock(live.mutex);
      live.handles.insert(runtime.get());
    }
    *out_runtime = runtime.release();
    return Status::Ok();
  });
}

ATTNRT_API void attnrt_runtime_destroy(attnrt_runtime* runtime) {
  if (runtime == nullptr) return;
  {
    LiveRuntimes& live = Live();
    std::lock_guard<std::mutex> lock(live.mutex);
    if (live.handles.erase(runtime) == 0) return;  // destroyed already, or never made here
  }
  delete runtime;
}

ATTNRT_API attnrt_status attnrt_runtime_num_threads(const attnrt_runtime* runtime,
                                                    int32_t* out_num_threads) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_REQUIRE(out_num_threads);
    *out_num_threads = runtime->state->pool().num_threads();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_plugin_count(const attnrt_runtime* runtime,
                                                     size_t* out_count) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_REQUIRE(out_count);
    *out_count = runtime->state->plugins().size();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_plugin_info(const attnrt_runtime* runtime, size_t index,
                                                    attnrt_plugin_info* out_info) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_info, "out_info"));
    const auto& plugins = runtime->state->plugins();
    if (index >= plugins.size()) return IndexNotFound("plugin", index, plugins.size());
    const auto& p = *plugins[index];
    attnrt_plugin_info value;
    Zero(&value);
    value.name = p.name.c_str();
    value.path = p.path.c_str();
    value.version = p.version.c_str();
    value.abi_major = p.abi_major;
    value.abi_minor = p.abi_minor;
    value.available = p.available ? 1 : 0;
    value.reason = p.reason.c_str();
    value.num_facts = p.facts.size();
    value.num_kernels = p.kernels.size();
    WriteOut(out_info, value);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_plugin_fact(const attnrt_runtime* runtime,
                                                    size_t plugin_index, size_t fact_index,
                                                    const char** out_key, const char** out_value) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_REQUIRE(out_key);
    ATTNRT_REQUIRE(out_value);
    const auto& plugins = runtime->state->plugins();
    if (plugin_index >= plugins.size())
      return IndexNotFound("plugin", plugin_index, plugins.size());
    const auto& facts = plugins[plugin_index]->facts;
    if (fact_index >= facts.size()) return IndexNotFound("fact", fact_index, facts.size());
    *out_key = facts[fact_index].first.c_str();
    *out_value = facts[fact_index].second.c_str();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_plugin_kernel(const attnrt_runtime* runtime,
                                                      size_t plugin_index, size_t kernel_index,
                                                      attnrt_kernel_info* out_info) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_info, "out_info"));
    const auto& plugins = runtime->state->plugins();
    if (plugin_index >= plugins.size())
      return IndexNotFound("plugin", plugin_index, plugins.size());
    const auto& kernels = plugins[plugin_index]->kernels;
    if (kernel_index >= kernels.size())
      return IndexNotFound("kernel", kernel_index, kernels.size());
    const auto& k = kernels[kernel_index];
    attnrt_kernel_info value;
    Zero(&value);
    value.name = k.name.c_str();
    value.plugin = k.plugin->name.c_str();
    value.op_kind = k.op_kind;
    value.device_type = k.device_type;
    value.priority = k.priority;
    WriteOut(out_info, value);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_diagnostic_count(const attnrt_runtime* runtime,
                                                         size_t* out_count) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_REQUIRE(out_count);
    *out_count = runtime->state->diagnostics().size();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_runtime_diagnostic(const attnrt_runtime* runtime, size_t index,
                                                   attnrt_diagnostic* out_diagnostic) {
  return Guard([&]() -> Status {
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_diagnostic, "out_diagnostic"));
    const auto& diagnostics = runtime->state->diagnostics();
    if (index >= diagnostics.size()) return IndexNotFound("diagnostic", index, diagnostics.size());
    attnrt_diagnostic value;
    Zero(&value);
    value.path = diagnostics[index].path.c_str();
    value.message = diagnostics[index].message.c_str();
    WriteOut(out_diagnostic, value);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_op_create(attnrt_runtime* runtime, int32_t kind,
                                          const void* attributes, attnrt_op** out_op) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(out_op);
    *out_op = nullptr;
    ATTNRT_RETURN_IF_ERROR(RequireRuntime(runtime));
    ATTNRT_REQUIRE(attributes);
    std::unique_ptr<attnrt::core::OpFamily> family;
    ATTNRT_RETURN_IF_ERROR(attnrt::core::CreateOpFamily(kind, attributes, &family));
    auto impl = std::make_unique<attnrt::core::OpImpl>(runtime->state, std::move(family));
    *out_op = new attnrt_op{std::move(impl)};
    return Status::Ok();
  });
}

ATTNRT_API void attnrt_op_destroy(attnrt_op* op) { delete op; }

ATTNRT_API attnrt_status attnrt_op_plan(attnrt_op* op, const attnrt_tensor* const* inputs,
                                        size_t num_inputs, const attnrt_tensor* const* outputs,
                                        size_t num_outputs, attnrt_plan** out_plan) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(out_plan);
    *out_plan = nullptr;
    ATTNRT_REQUIRE(op);
    std::shared_ptr<const attnrt::core::PlanImpl> plan;
    ATTNRT_RETURN_IF_ERROR(op->impl->Plan({inputs, num_inputs}, {outputs, num_outputs}, &plan));
    *out_plan = new attnrt_plan{std::move(plan)};
    return Status::Ok();
  });
}

ATTNRT_API void attnrt_plan_release(attnrt_plan* plan) { delete plan; }

ATTNRT_API attnrt_status attnrt_plan_get_info(const attnrt_plan* plan, attnrt_plan_info* out_info) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(plan);
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_info, "out_info"));
    attnrt_plan_info value;
    Zero(&value);
    value.kernel = plan->impl->kernel_name().c_str();
    value.workspace_size = plan->impl->workspace_size;
    value.workspace_alignment = attnrt::core::PlanImpl::kWorkspaceAlignment;
    value.signature = plan->impl->description.c_str();
    WriteOut(out_info, value);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_plan_run(attnrt_plan* plan, const attnrt_tensor* const* inputs,
                                         size_t num_inputs, const attnrt_tensor* const* outputs,
                                         size_t num_outputs, void* workspace, size_t workspace_size,
                                         void* stream) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(plan);
    return plan->impl->Run({inputs, num_inputs}, {outputs, num_outputs}, workspace, workspace_size,
                           stream);
  });
}

ATTNRT_API attnrt_status attnrt_op_plan_cache_stats(const attnrt_op* op, uint64_t* out_hits,
                                                    uint64_t* out_misses) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(op);
    ATTNRT_REQUIRE(out_hits);
    ATTNRT_REQUIRE(out_misses);
    op->impl->CacheStats(out_hits, out_misses);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_op_plan_cache_info(const attnrt_op* op,
                                                   attnrt_plan_cache_info* out_info) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(op);
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_info, "out_info"));
    // Eight-byte fields only: no padding to clear.
    static_assert(sizeof(attnrt_plan_cache_info) == 6 * sizeof(uint64_t));
    const attnrt_plan_cache_info value = op->impl->CacheInfo();
    WriteOut(out_info, value);
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_op_explain(attnrt_op* op, const attnrt_tensor* const* inputs,
                                           size_t num_inputs, const attnrt_tensor* const* outputs,
                                           size_t num_outputs,
                                           attnrt_explanation** out_explanation) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(out_explanation);
    *out_explanation = nullptr;
    ATTNRT_REQUIRE(op);
    auto explanation = std::make_unique<attnrt_explanation>();
    explanation->runtime = op->impl->runtime();
    ATTNRT_RETURN_IF_ERROR(
        op->impl->Explain({inputs, num_inputs}, {outputs, num_outputs}, &explanation->candidates));
    *out_explanation = explanation.release();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_explanation_count(const attnrt_explanation* explanation,
                                                  size_t* out_count) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(explanation);
    ATTNRT_REQUIRE(out_count);
    *out_count = explanation->candidates.size();
    return Status::Ok();
  });
}

ATTNRT_API attnrt_status attnrt_explanation_candidate(const attnrt_explanation* explanation,
                                                      size_t index,
                                                      attnrt_candidate* out_candidate) {
  return Guard([&]() -> Status {
    ATTNRT_REQUIRE(explanation);
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_candidate, "out_candidate"));
    const auto& candidates = explanation->candidates;
    if (index >= candidates.size()) return IndexNotFound("candidate", index, candidates.size());
    const auto& c = candidates[index];
    attnrt_candidate value;
    Zero(&value);
    value.kernel = c.kernel->name.c_str();
    value.priority = c.kernel->priority;
    value.status = c.status;
    value.reason = c.reason.c_str();
    WriteOut(out_candidate, value);
    return Status::Ok();
  });
}

ATTNRT_API void attnrt_explanation_destroy(attnrt_explanation* explanation) { delete explanation; }

// ---- block pool (attnrt/block_pool.h) -----------------------------------------------------------

ATTNRT_API attnrt_status attnrt_block_pool_create(const attnrt_block_pool_options* options,
                                                  attnrt_block_pool** out_pool) {
  return PoolGuard("attnrt_block_pool_create", [&]() -> Status {
    ATTNRT_REQUIRE(options);
    ATTNRT_REQUIRE(out_pool);
    if (options->struct_size < ATTNRT_BLOCK_POOL_OPTIONS_STRUCT_SIZE) {
      return attnrt::core::AbiMismatch("options->struct_size: expected at least " +
                                       std::to_string(ATTNRT_BLOCK_POOL_OPTIONS_STRUCT_SIZE) +
                                       ", got " + std::to_string(options->struct_size) +
                                       "; set it to ATTNRT_BLOCK_POOL_OPTIONS_STRUCT_SIZE");
    }
    auto pool = std::make_unique<attnrt_block_pool>();
    ATTNRT_RETURN_IF_ERROR(
        attnrt::core::BlockPool::Create(options->num_blocks, options->block_size, &pool->impl));
    *out_pool = pool.release();
    return Status::Ok();
  });
}

ATTNRT_API void attnrt_block_pool_destroy(attnrt_block_pool* pool) { delete pool; }

ATTNRT_API attnrt_status attnrt_block_pool_add_sequence(attnrt_block_pool* pool,
                                                        int64_t* out_sequence) {
  return PoolGuard("attnrt_block_pool_add_sequence", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    ATTNRT_REQUIRE(out_sequence);
    return pool->impl->AddSequence(out_sequence);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_fork(attnrt_block_pool* pool, int64_t parent,
                                                int64_t* out_sequence) {
  return PoolGuard("attnrt_block_pool_fork", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    ATTNRT_REQUIRE(out_sequence);
    return pool->impl->Fork(parent, out_sequence);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_append(attnrt_block_pool* pool, int64_t sequence,
                                                  int64_t num_tokens, attnrt_block_copy* out_copy) {
  return PoolGuard("attnrt_block_pool_append", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    return pool->impl->Append(sequence, num_tokens, out_copy);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_truncate(attnrt_block_pool* pool, int64_t sequence,
                                                    int64_t new_length) {
  return PoolGuard("attnrt_block_pool_truncate", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    return pool->impl->Truncate(sequence, new_length);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_remove(attnrt_block_pool* pool, int64_t sequence) {
  return PoolGuard("attnrt_block_pool_remove", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    return pool->impl->Remove(sequence);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_sequence_info(const attnrt_block_pool* pool,
                                                         int64_t sequence, int64_t* out_length,
                                                         int64_t* out_num_blocks) {
  return PoolGuard("attnrt_block_pool_sequence_info", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    return pool->impl->SequenceInfo(sequence, out_length, out_num_blocks);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_block_table(const attnrt_block_pool* pool,
                                                       const int64_t* sequences,
                                                       size_t num_sequences,
                                                       int64_t max_blocks_per_seq, int32_t* table,
                                                       int32_t* seqlens_k) {
  return PoolGuard("attnrt_block_pool_block_table", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    return pool->impl->BlockTable(sequences, num_sequences, max_blocks_per_seq, table, seqlens_k);
  });
}

ATTNRT_API attnrt_status attnrt_block_pool_get_stats(const attnrt_block_pool* pool,
                                                     attnrt_block_pool_stats* out_stats) {
  return PoolGuard("attnrt_block_pool_get_stats", [&]() -> Status {
    ATTNRT_REQUIRE(pool);
    ATTNRT_RETURN_IF_ERROR(CheckOutStruct(out_stats, "out_stats"));
    attnrt_block_pool_stats value;
    Zero(&value);
    pool->impl->Stats(&value);
    WriteOut(out_stats, value);
    return Status::Ok();
  });
}

}  // extern "C"

namespace attnrt::core {
attnrt_status RecordLastError(const Status& status) { return Record(status); }
}  // namespace attnrt::core
