/*
 * attnrt/plugin.h — plugin-facing C ABI: the one exported entry symbol, the plugin table, kernel
 * descriptors and the host services the runtime hands to a plugin.
 *
 * A plugin is a shared library named libattnrt_<name>.so exporting exactly one C function,
 * ATTNRT_PLUGIN_ENTRY_NAME (attnrt_plugin_query). Build it with -fvisibility=hidden and mark only
 * that function with ATTNRT_PLUGIN_EXPORT. The runtime:
 *   1. resolves attnrt_plugin_query and calls it with its ABI version;
 *   2. refuses the table if abi_major differs (diagnostic, plugin skipped);
 *   3. calls init(host) → plugin context; then probe(context) → available or why not, plus facts;
 *   4. reads kernel descriptors; kernels are ranked by priority (higher first), then name.
 * Any failure in these steps skips the plugin with a diagnostic naming the file; the process goes
 * on.
 *
 * Rules for plugins: never throw or abort across this ABI (the runtime contains an exception, from
 * any function or parallel_for callback, as a failure of the plugin or kernel, but the plugin's
 * state is then unknown); return only attnrt_status values; never start threads (use
 * host->parallel_for); probe() runs code compiled for the baseline ISA and checks that the OS
 * enables the register state (XCR0), not only CPUID; strings returned stay valid until shutdown().
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and attnrt.h.
 */
#ifndef ATTNRT_PLUGIN_H_
#define ATTNRT_PLUGIN_H_

#include "attnrt/attnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ATTNRT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ATTNRT_PLUGIN_EXPORT
#endif

/** Name of the one symbol every plugin exports. */
#define ATTNRT_PLUGIN_ENTRY_NAME "attnrt_plugin_query"

/** Work item of parallel_for: handles indices [begin, end). */
typedef void (*attnrt_parallel_fn)(void* user_data, size_t begin, size_t end);

/**
 * Services the runtime offers a plugin. Valid from init() until shutdown() of that context.
 * All functions are thread-safe.
 */
typedef struct attnrt_host_services {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  void* host_context;
  /** Logs one line through the runtime's logger (attnrt_log_level). */
  void (*log)(void* host_context, int32_t level, const char* message);
  /**
   * Calls fn over [0, n) split into contiguous ranges of at least `grain` indices on the runtime's
   * pool (the calling thread takes part) and returns when all are done. Safe to call from several
   * threads at once and from inside fn (nested calls run inline).
   */
  void (*parallel_for)(void* host_context, size_t n, size_t grain, attnrt_parallel_fn fn,
                       void* user_data);
  /** Threads of the pool, caller included (>= 1). */
  int32_t (*num_threads)(void* host_context);
  /** Aligned allocation (alignment a power of two); NULL on failure. */
  void* (*alloc)(void* host_context, size_t size, size_t alignment);
  void (*free)(void* host_context, void* ptr);
} attnrt_host_services;

/** One probe fact, e.g. {"isa", "avx2,fma,f16c"} or {"l2_cache_bytes", "1048576"}. */
typedef struct attnrt_plugin_fact {
  const char* key;
  const char* value;
} attnrt_plugin_fact;

/** What probe() reports. Pointers stay valid until shutdown(). */
typedef struct attnrt_probe_result {
  size_t struct_size;
  int32_t available;  /* 1: kernels may run here */
  const char* reason; /* why not, when available == 0 */
  const attnrt_plugin_fact* facts;
  size_t num_facts;
} attnrt_probe_result;

/**
 * One kernel. problem/args point to the op's structs (for ATTNRT_OP_GQA: attnrt_gqa_problem and
 * attnrt_gqa_args from attnrt/ops/gqa.h), already validated by the core.
 */
typedef struct attnrt_kernel_desc {
  size_t struct_size;
  const char* name;    /* "<plugin>.<op>.<algorithm>.<isa>", e.g. "cpu_x86.gqa.naive.avx2"; names
                          outside "<plugin>." are refused */
  int32_t op_kind;     /* attnrt_op_kind */
  int32_t device_type; /* attnrt_device_type */
  int32_t priority;    /* higher is tried first */
  /** 1 if the kernel computes this problem exactly; else 0 with the reason written to `reason`
   *  (NUL-terminated, truncated to reason_capacity). */
  int32_t (*supports)(void* plugin_context, const void* problem, char* reason,
                      size_t reason_capacity);
  /** Workspace bytes run() needs for this problem (may be 0). */
  size_t (*workspace_size)(void* plugin_context, const void* problem);
  /** Computes the op. Returns an attnrt_status; on failure writes a message to `error`. */
  int32_t (*run)(void* plugin_context, const void* args, char* error, size_t error_capacity);
} attnrt_kernel_desc;

/** The table a plugin returns. Append-only: new members go at the end (struct_size tells). */
typedef struct attnrt_plugin_api {
  size_t struct_size;
  uint32_t abi_major; /* ATTNRT_ABI_VERSION_MAJOR the plugin was built with */
  uint32_t abi_minor;
  const char* name;    /* unique plugin name, e.g. "cpu_x86" */
  const char* version; /* plugin version string */
  /** Creates the plugin context for one runtime. Returns attnrt_status; message to `error`. */
  int32_t (*init)(const attnrt_host_services* host, void** out_plugin_context, char* error,
                  size_t error_capacity);
  /** Fills `out` (out->struct_size set by the host). Returns attnrt_status. */
  int32_t (*probe)(void* plugin_context, attnrt_probe_result* out);
  /** Kernel descriptors; the array stays valid until shutdown(). */
  size_t (*kernel_count)(void* plugin_context);
  const attnrt_kernel_desc* (*kernel)(void* plugin_context, size_t index);
  /** Releases the context; called once, when nothing made from it is alive any more. */
  void (*shutdown)(void* plugin_context);
} attnrt_plugin_api;

/** Signature of the entry symbol. Returns NULL if the plugin cannot serve this host at all. */
typedef const attnrt_plugin_api* (*attnrt_plugin_query_fn)(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_PLUGIN_H_ */
