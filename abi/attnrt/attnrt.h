/*
 * attnrt.h — host-facing C ABI of the attnrt attention-kernel runtime.
 *
 * Pure C11, self-contained (only <stddef.h>, <stdint.h>, <stdbool.h>), usable from C++ unchanged.
 *
 * Lifecycle:
 *   attnrt_runtime_create  discovers and loads plugins, ranks their kernels
 *   attnrt_op_create       an op (e.g. GroupQueryAttention) from validated attributes
 *   attnrt_op_plan         full shape validation, kernel choice, workspace size; cached by shape
 *                          signature, so a decode loop with fixed shapes re-plans nothing
 *   attnrt_plan_run        value checks (seqlens_k, total_sequence_length, positions) and the
 *                          kernel, on caller-provided tensors and workspace
 *   attnrt_op_explain      every registered kernel in rank order with "selected", "eligible" or
 *                          the reason it declines
 *
 * Errors: every entry point returns an attnrt_status. On failure a message for the calling thread
 * names the offending input, the expected and the actual value: attnrt_last_error_message().
 * Nothing throws across this ABI, nothing aborts; a failing run leaves its outputs untouched unless
 * the message says otherwise.
 *
 * Versioning: ATTNRT_ABI_VERSION_MAJOR changes break compatibility; MINOR changes only append
 * fields or functions. Every struct that crosses the ABI begins with `size_t struct_size`, set by
 * its writer to the size of the struct as the writer's headers declare it, so either side can grow
 * a struct (the PJRT C API pattern). attnrt_tensor is the one exception: its layout is DLPack's
 * DLTensor, frozen by DLPack. The rules that keep this safe (ABI 1.13):
 *   - The size is where the struct's last field ends, ATTNRT_STRUCT_SIZE(type, last field); each
 *     struct has its constant (ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE, ...), which the init functions
 *     use. sizeof(type), what programs built against ABI 1.0-1.12 pass, is accepted too.
 *   - A reader uses a field only when struct_size covers its end; a writer of a struct another side
 *     owns (an output struct) writes no byte past its struct_size.
 *   - A field appended to a released struct starts at or after that release's sizeof (an explicit
 *     reserved member fills any gap), so a sizeof from an older release never covers a field that
 *     release did not have.
 *   - A new struct does not contain a versioned struct by value (it points to it), so appending to
 *     the inner struct cannot move the outer one's fields. attnrt_gqa_problem inside
 *     attnrt_paged_gqa_problem and attnrt_paged_gqa_attributes (and the paged problem inside the
 *     varlen one) predate this rule and stay: the library hands each plugin the layout its ABI
 *     version declares (docs/plugins.md, "The plugin ABI").
 *   - An array of structs is passed with its stride in bytes (attnrt_sparse_mla_args.batch_stride),
 *     so its element may grow.
 *
 * Thread safety: a runtime, its ops and plans may be used from several threads at once (plan and
 * run are safe concurrently). Destroying a handle while another thread uses it is not.
 */
#ifndef ATTNRT_ATTNRT_H_
#define ATTNRT_ATTNRT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ATTNRT_API __declspec(dllimport)
#elif defined(__GNUC__)
#define ATTNRT_API __attribute__((visibility("default")))
#else
#define ATTNRT_API
#endif

/** ABI version of these headers. A plugin or host with another MAJOR is refused. */
#define ATTNRT_ABI_VERSION_MAJOR 1
#define ATTNRT_ABI_VERSION_MINOR 13

/** The struct_size of a versioned struct: the end of its last field (ABI 1.13). Unlike sizeof, it
 *  leaves out the tail padding, so it names exactly the fields the writer's headers declare. */
#define ATTNRT_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* ---- Status ---------------------------------------------------------------------------------- */

/** Result of every entry point. ATTNRT_OK is 0; everything else comes with a message. */
typedef enum attnrt_status {
  ATTNRT_OK = 0,
  /** An argument, attribute, shape, dtype or value is invalid; the message names it. */
  ATTNRT_ERROR_INVALID_ARGUMENT = 1,
  /** The request is valid but no kernel accepts it (each candidate's reason is in the message). */
  ATTNRT_ERROR_UNSUPPORTED = 2,
  /** An index or name does not exist (plugin index, kernel name, ...). */
  ATTNRT_ERROR_NOT_FOUND = 3,
  /** A resource (device, plugin) is not available on this machine. */
  ATTNRT_ERROR_UNAVAILABLE = 4,
  /** An allocation failed. */
  ATTNRT_ERROR_OUT_OF_MEMORY = 5,
  /** The tensors given to run differ from those the plan was made for. */
  ATTNRT_ERROR_PLAN_MISMATCH = 6,
  /** A struct_size or ABI version the library cannot accept. */
  ATTNRT_ERROR_ABI_MISMATCH = 7,
  /** A bug or an unexpected failure inside attnrt or a plugin; the message says where. */
  ATTNRT_ERROR_INTERNAL = 8
} attnrt_status;

/**
 * Message of the last failing call made on this thread (UTF-8, NUL-terminated). Valid until the
 * next attnrt call on the same thread. Returns "" when the last call succeeded. Never NULL.
 */
ATTNRT_API const char* attnrt_last_error_message(void);

/** Stable name of a status code, e.g. "ATTNRT_ERROR_INVALID_ARGUMENT". Never NULL. */
ATTNRT_API const char* attnrt_status_name(attnrt_status status);

/** Library version ("MAJOR.MINOR.PATCH") and the ABI version it was built with. */
ATTNRT_API const char* attnrt_version_string(void);
ATTNRT_API void attnrt_abi_version(uint32_t* major, uint32_t* minor);

/* ---- Tensors (DLPack-shaped) ----------------------------------------------------------------- */

/** Device types; values are DLPack's DLDeviceType. */
typedef enum attnrt_device_type {
  ATTNRT_DEVICE_CPU = 1, /* kDLCPU */
  ATTNRT_DEVICE_CUDA = 2 /* kDLCUDA */
} attnrt_device_type;

/** Same layout as DLPack's DLDevice. */
typedef struct attnrt_device {
  int32_t device_type; /* attnrt_device_type */
  int32_t device_id;
} attnrt_device;

/** Type codes; values are DLPack's DLDataTypeCode. */
typedef enum attnrt_dtype_code {
  ATTNRT_DTYPE_CODE_INT = 0,
  ATTNRT_DTYPE_CODE_UINT = 1,
  ATTNRT_DTYPE_CODE_FLOAT = 2,
  ATTNRT_DTYPE_CODE_BFLOAT = 4,
  ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN = 10,
  ATTNRT_DTYPE_CODE_FLOAT8_E5M2 = 12, /* ABI 1.11 */
  ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU = 14
} attnrt_dtype_code;

/**
 * Same layout as DLPack's DLDataType. The element types attnrt knows:
 *   f32 {FLOAT,32,1}  f16 {FLOAT,16,1}  bf16 {BFLOAT,16,1}  i8 {INT,8,1}  u8 {UINT,8,1}
 *   i32 {INT,32,1}    i64 {INT,64,1}    f8e4m3fn {FLOAT8_E4M3FN,8,1}    f8e8m0 {FLOAT8_E8M0FNU,8,1}
 *   f8e5m2 {FLOAT8_E5M2,8,1} (ABI 1.11)
 *   int4 {INT,4,1}: packed, two signed nibbles per byte, element 2i in the low nibble; the last
 *   dimension counts elements and must be even.
 */
typedef struct attnrt_dtype {
  uint8_t code; /* attnrt_dtype_code */
  uint8_t bits;
  uint16_t lanes; /* always 1 */
} attnrt_dtype;

/** The element types above as attnrt_dtype initializers, for C and C++ alike (ABI 1.13):
 *  `attnrt_dtype t = ATTNRT_DTYPE_BFLOAT16;` */
#define ATTNRT_DTYPE_FLOAT32 \
  { ATTNRT_DTYPE_CODE_FLOAT, 32, 1 }
#define ATTNRT_DTYPE_FLOAT16 \
  { ATTNRT_DTYPE_CODE_FLOAT, 16, 1 }
#define ATTNRT_DTYPE_BFLOAT16 \
  { ATTNRT_DTYPE_CODE_BFLOAT, 16, 1 }
#define ATTNRT_DTYPE_INT8 \
  { ATTNRT_DTYPE_CODE_INT, 8, 1 }
#define ATTNRT_DTYPE_UINT8 \
  { ATTNRT_DTYPE_CODE_UINT, 8, 1 }
#define ATTNRT_DTYPE_INT32 \
  { ATTNRT_DTYPE_CODE_INT, 32, 1 }
#define ATTNRT_DTYPE_INT64 \
  { ATTNRT_DTYPE_CODE_INT, 64, 1 }
#define ATTNRT_DTYPE_INT4 \
  { ATTNRT_DTYPE_CODE_INT, 4, 1 }
#define ATTNRT_DTYPE_FLOAT8_E4M3FN \
  { ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1 }
#define ATTNRT_DTYPE_FLOAT8_E5M2 \
  { ATTNRT_DTYPE_CODE_FLOAT8_E5M2, 8, 1 }
#define ATTNRT_DTYPE_FLOAT8_E8M0FNU \
  { ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU, 8, 1 }

/**
 * A borrowed tensor; same layout as DLPack's DLTensor, so DLPack producers convert without copies.
 * shape: ndim extents (int64). strides: ndim strides in elements, or NULL for compact row-major.
 * The address of element 0 is (char*)data + byte_offset and must be aligned to the element size
 * (checked at run: INVALID_ARGUMENT). attnrt never takes ownership.
 * Tensors must be compact row-major (strides NULL or the compact ones; others are rejected by
 * name), except the paged op's block pools, which may be strided views (ABI 1.2,
 * attnrt/ops/paged_gqa.h), and sparse MLA's PA_BBND caches, which may have a block stride (ABI 1.6,
 * attnrt/ops/sparse_mla.h).
 */
typedef struct attnrt_tensor {
  void* data;
  attnrt_device device;
  int32_t ndim;
  attnrt_dtype dtype;
  const int64_t* shape;
  const int64_t* strides;
  uint64_t byte_offset;
} attnrt_tensor;

/** Short dtype name ("float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64",
 *  "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "int4", or "unknown"). Never NULL. */
ATTNRT_API const char* attnrt_dtype_name(attnrt_dtype dtype);

/* ---- Runtime --------------------------------------------------------------------------------- */

typedef struct attnrt_runtime attnrt_runtime;
typedef struct attnrt_op attnrt_op;
typedef struct attnrt_plan attnrt_plan;
typedef struct attnrt_explanation attnrt_explanation;

/** Log levels for the log callback and ATTNRT_DEBUG. */
typedef enum attnrt_log_level {
  ATTNRT_LOG_DEBUG = 0,
  ATTNRT_LOG_INFO = 1,
  ATTNRT_LOG_WARNING = 2,
  ATTNRT_LOG_ERROR = 3
} attnrt_log_level;

typedef void (*attnrt_log_fn)(void* user_data, int32_t level, const char* message);

/** One team member's share of a parallel region (ABI 1.3). */
typedef void (*attnrt_team_fn)(void* user_data, int32_t member);

/**
 * Runs fn(user_data, m) for every m in [0, team_size) — concurrently on the host's threads, the
 * calling thread one of them — and returns when all have returned. Must not throw or unwind
 * (ABI 1.3). See attnrt_runtime_options.executor.
 */
typedef void (*attnrt_executor_fn)(void* executor_context, int32_t team_size, attnrt_team_fn fn,
                                   void* user_data);

/**
 * Runtime options. Fill with attnrt_runtime_options_init, then change what you need. Every field
 * left at its default defers to the environment variable named beside it; a set field wins over it.
 */
typedef struct attnrt_runtime_options {
  size_t struct_size;
  /** Folders searched first for libattnrt_*.so, in order. */
  const char* const* plugin_paths;
  size_t num_plugin_paths;
  /** 1 (default): then search ATTNRT_PLUGIN_PATH and attnrt/plugins beside libattnrt.so.
   *  0: search plugin_paths only. */
  int32_t search_default_paths;
  /** Comma-separated globs of kernel names allowed to run (pins); NULL = ATTNRT_KERNEL; "" = none.
   */
  const char* kernel;
  /** Comma-separated globs of kernel names excluded; NULL = ATTNRT_DISABLE; "" = none. */
  const char* disable;
  /** 1: one line per planned op (op, dtypes, shapes, chosen kernel) at DEBUG; 0: off;
   *  -1 (default) = ATTNRT_DEBUG. */
  int32_t debug;
  /** CPU threads of the runtime's pool, caller thread included; 0 (default) = ATTNRT_NUM_THREADS,
   *  else the number of hardware threads. With an executor (below): the team size asked of it. */
  int32_t num_threads;
  /** Where log lines go; NULL (default) = stderr. */
  attnrt_log_fn log_fn;
  void* log_user_data;
  /** Plans each op keeps in its cache, the least recently used dropped first (ABI 1.2); 0 keeps
   *  none (every attnrt_op_plan makes a plan); -1 (default) = ATTNRT_PLAN_CACHE_SIZE, else 64. */
  int32_t plan_cache_size;
  /**
   * The host's threads run the runtime's parallel work (ABI 1.3); NULL (default): the runtime
   * starts a pool of its own. With an executor the runtime starts no threads: each parallel region
   * of a kernel calls executor(executor_context, team_size, fn, user_data) on the thread that runs
   * the plan, and the members split the region's work among themselves.
   * - team_size is num_threads, resolved by the rules above (0 = ATTNRT_NUM_THREADS, else the
   *   hardware threads), fixed at creation: kernels plan with it (workspace sizes depend on it)
   *   and attnrt_runtime_num_threads returns it.
   * - Members may run on fewer physical threads than team_size, or one after another on the
   *   calling thread: work is claimed dynamically, so every index of a parallel region is done
   *   whatever the executor's mapping of members to threads.
   * - A parallel region opened inside a member (nested) runs inline on that member's thread, as
   *   does a region too small to split or any region of a team of 1: the executor is not called.
   *   The executor always gets team_size >= 2.
   * - If the executor returns with work unclaimed (a broken executor that ran no member), the
   *   calling thread finishes it: a run never loses work silently.
   * - Several threads may run plans at once: the executor is then called concurrently.
   * - fn never throws; an exception out of a kernel's callback fails the run (INTERNAL) as with
   *   the runtime's own pool.
   * The executor and its context must outlive the runtime and every op and plan made from it.
   */
  attnrt_executor_fn executor;
  /** Passed to executor unchanged; must be NULL when executor is NULL. */
  void* executor_context;
  /**
   * Plugins in places another user could write (ABI 1.4; docs/plugins.md, "Security"): 0 refuses
   * them with a diagnostic naming the path and the reason, 1 loads them; -1 (default) =
   * ATTNRT_PLUGIN_ALLOW_INSECURE, else 0. Refused: a plugin file, or a folder on its path up to /,
   * owned by a user other than root and the runtime's effective user, or writable by every user or
   * by a group other than the runtime's effective group (a folder with the sticky bit, as /tmp,
   * excepted). Relative plugin folders are never searched, whatever this says.
   */
  int32_t allow_insecure_plugins;
} attnrt_runtime_options;
/** ATTNRT_STRUCT_SIZE of attnrt_runtime_options (ABI 1.13). */
#define ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE \
  ATTNRT_STRUCT_SIZE(attnrt_runtime_options, allow_insecure_plugins)

/**
 * Sets every default the first `struct_size` bytes hold, and struct_size to the smaller of
 * `struct_size` and this library's sizeof(attnrt_runtime_options) (a caller built against a newer
 * minor version sees where the defaults end); writes nothing beyond them (ABI 1.2). Call it through
 * attnrt_runtime_options_init. Errors (ABI 1.4; before, it returned nothing): INVALID_ARGUMENT for
 * NULL options, ABI_MISMATCH for a struct_size smaller than the struct_size field; nothing is
 * written then.
 */
ATTNRT_API attnrt_status attnrt_runtime_options_init_sized(attnrt_runtime_options* options,
                                                           size_t struct_size);

/** Sets struct_size and every default of the struct as the caller's header declares it. The size
 *  is the type's, not the argument's, so NULL (C) and nullptr (C++) compile and are refused. */
#define attnrt_runtime_options_init(options) \
  attnrt_runtime_options_init_sized((options), ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE)

/** The function of ABI 1.0 and 1.1, kept for programs built against them: fills the fields up to
 *  log_user_data only. `(attnrt_runtime_options_init)(options)` calls it. */
ATTNRT_API void(attnrt_runtime_options_init)(attnrt_runtime_options* options);

/**
 * Creates a runtime: discovers plugins (options paths, ATTNRT_PLUGIN_PATH, attnrt/plugins beside
 * libattnrt.so; absolute folders only), checks where they lie (allow_insecure_plugins) and their
 * ABI, initializes and probes them, ranks their kernels. A broken, misplaced or relative plugin
 * file or folder is skipped and recorded as a diagnostic; it never fails creation. options may be
 * NULL (all defaults). Errors: INVALID_ARGUMENT (NULL out, bad option value), ABI_MISMATCH
 * (struct_size), OUT_OF_MEMORY.
 */
ATTNRT_API attnrt_status attnrt_runtime_create(const attnrt_runtime_options* options,
                                               attnrt_runtime** out_runtime);

/** Releases the runtime handle. Plugins stay loaded until every op and plan made from it is gone.
 *  NULL is ignored, and so is a handle that is not live (destroyed already, or not made by
 *  attnrt_runtime_create); the other functions taking a runtime refuse such a handle with
 *  INVALID_ARGUMENT instead of reading it. */
ATTNRT_API void attnrt_runtime_destroy(attnrt_runtime* runtime);

/** Threads in the runtime's CPU pool (caller thread included); with an executor, the team size
 *  the runtime asks of it (attnrt_runtime_options.executor). */
ATTNRT_API attnrt_status attnrt_runtime_num_threads(const attnrt_runtime* runtime,
                                                    int32_t* out_num_threads);

/** A loaded plugin as the runtime sees it. Strings live as long as the runtime. */
typedef struct attnrt_plugin_info {
  size_t struct_size;
  const char* name;
  const char* path;
  const char* version;
  uint32_t abi_major;
  uint32_t abi_minor;
  /** 1 when the probe says the plugin can run here; else 0 and reason says why. */
  int32_t available;
  const char* reason;
  /** Probe facts (ISA, cache sizes, devices) as key/value pairs; see attnrt_runtime_plugin_fact. */
  size_t num_facts;
  size_t num_kernels;
} attnrt_plugin_info;
/** ATTNRT_STRUCT_SIZE of attnrt_plugin_info (ABI 1.13). */
#define ATTNRT_PLUGIN_INFO_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_plugin_info, num_kernels)

/** A registered kernel. name is "<plugin>.<op>.<algorithm>.<isa>". */
typedef struct attnrt_kernel_info {
  size_t struct_size;
  const char* name;
  const char* plugin;
  int32_t op_kind;     /* attnrt_op_kind */
  int32_t device_type; /* attnrt_device_type */
  int32_t priority;    /* higher runs first */
} attnrt_kernel_info;
/** ATTNRT_STRUCT_SIZE of attnrt_kernel_info (ABI 1.13). */
#define ATTNRT_KERNEL_INFO_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_kernel_info, priority)

/** Something skipped during discovery: the file and why. */
typedef struct attnrt_diagnostic {
  size_t struct_size;
  const char* path;
  const char* message;
} attnrt_diagnostic;
/** ATTNRT_STRUCT_SIZE of attnrt_diagnostic (ABI 1.13). */
#define ATTNRT_DIAGNOSTIC_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_diagnostic, message)

ATTNRT_API attnrt_status attnrt_runtime_plugin_count(const attnrt_runtime* runtime,
                                                     size_t* out_count);
/** Errors: NOT_FOUND when index >= count; ABI_MISMATCH when out->struct_size is too small. */
ATTNRT_API attnrt_status attnrt_runtime_plugin_info(const attnrt_runtime* runtime, size_t index,
                                                    attnrt_plugin_info* out_info);
ATTNRT_API attnrt_status attnrt_runtime_plugin_fact(const attnrt_runtime* runtime,
                                                    size_t plugin_index, size_t fact_index,
                                                    const char** out_key, const char** out_value);
/** Kernels of a plugin, in rank order (priority descending, then name). */
ATTNRT_API attnrt_status attnrt_runtime_plugin_kernel(const attnrt_runtime* runtime,
                                                      size_t plugin_index, size_t kernel_index,
                                                      attnrt_kernel_info* out_info);
ATTNRT_API attnrt_status attnrt_runtime_diagnostic_count(const attnrt_runtime* runtime,
                                                         size_t* out_count);
ATTNRT_API attnrt_status attnrt_runtime_diagnostic(const attnrt_runtime* runtime, size_t index,
                                                   attnrt_diagnostic* out_diagnostic);

/* ---- Ops, plans, runs ------------------------------------------------------------------------ */

/** Op families. The attribute struct for each is in attnrt/ops/<family>.h. */
typedef enum attnrt_op_kind {
  /** com.microsoft.GroupQueryAttention; attributes: attnrt_gqa_attributes (attnrt/ops/gqa.h). */
  ATTNRT_OP_GQA = 1,
  /** GroupQueryAttention over a paged KV cache (ABI 1.1); attributes:
   *  attnrt_paged_gqa_attributes (attnrt/ops/paged_gqa.h). Block pool: attnrt/block_pool.h. */
  ATTNRT_OP_PAGED_GQA = 2,
  /** CANN MixedQuantSparseFlashMla; attributes: attnrt_sparse_mla_attributes
   *  (attnrt/ops/sparse_mla.h). */
  ATTNRT_OP_SPARSE_MLA = 3,
  /** CANN MixedQuantSparseFlashMlaMetadata: the main op's int32 [2048] work partition, computed by
   *  the core (no plugin kernel); same attributes and inputs as ATTNRT_OP_SPARSE_MLA. */
  ATTNRT_OP_SPARSE_MLA_METADATA = 4,
  /** Paged GroupQueryAttention over packed variable-length batches (ABI 1.2; vLLM's and
   *  FlashAttention's varlen convention); attributes: attnrt_paged_gqa_attributes
   *  (attnrt/ops/paged_gqa_varlen.h). */
  ATTNRT_OP_PAGED_GQA_VARLEN = 5
} attnrt_op_kind;

/** Short op name ("gqa", "paged_gqa", "sparse_mla", "sparse_mla_metadata", "paged_gqa_varlen"),
 *  or "unknown".
 *  Never NULL. */
ATTNRT_API const char* attnrt_op_kind_name(int32_t op_kind);

/** The reference op's name of input/output `index` (for GQA ONNX Runtime's: "query", ...,
 *  "output_qk"), or NULL for an unknown op kind or an index out of range. */
ATTNRT_API const char* attnrt_op_input_name(int32_t op_kind, size_t index);
ATTNRT_API const char* attnrt_op_output_name(int32_t op_kind, size_t index);

/**
 * Creates an op of `kind` from its attribute struct (which starts with size_t struct_size). The
 * attributes are validated and copied. Errors: INVALID_ARGUMENT naming the attribute, with expected
 * and actual values; ABI_MISMATCH when struct_size is smaller than this library's struct. A larger
 * struct_size (a caller built against a newer minor version) is accepted and the fields beyond
 * this library's struct are ignored; newer fields therefore default to "off" when zero.
 */
ATTNRT_API attnrt_status attnrt_op_create(attnrt_runtime* runtime, int32_t kind,
                                          const void* attributes, attnrt_op** out_op);
/** NULL is ignored. Plans made from the op stay valid. */
ATTNRT_API void attnrt_op_destroy(attnrt_op* op);

/**
 * Plans the op for concrete tensors. `inputs`/`outputs` are arrays of pointers indexed as the op's
 * reference defines them (for GQA: ATTNRT_GQA_INPUT_* / ATTNRT_GQA_OUTPUT_*); NULL = absent. Only
 * shapes, dtypes, devices and strides are read here, never data. Validates every shape, picks the
 * highest-ranked kernel that accepts them, sizes the workspace. A plan for the same shape signature
 * is returned from the op's cache, which keeps plan_cache_size plans (the least recently used are
 * dropped; plans the caller holds stay valid). A GQA decode whose present output is a new buffer
 * longer than the past (ONNX Runtime's default I/O: one row more each step) gets one plan per
 * capacity, the present length rounded up to a power of two (at least 16): its workspace is sized
 * for the capacity, and its signature (attnrt_plan_info) ends with "up to" the capacity. The caller
 * releases the returned reference with attnrt_plan_release. Errors: INVALID_ARGUMENT (the message
 * names the input), UNSUPPORTED (no kernel accepts; the message lists each candidate with its
 * reason), INTERNAL (no kernel accepts and one of them malfunctioned: its supports() threw or
 * returned neither 0 nor 1, or the chosen kernel's workspace_size() threw; the message names it).
 */
ATTNRT_API attnrt_status attnrt_op_plan(attnrt_op* op, const attnrt_tensor* const* inputs,
                                        size_t num_inputs, const attnrt_tensor* const* outputs,
                                        size_t num_outputs, attnrt_plan** out_plan);

/** Drops one reference. NULL is ignored. */
ATTNRT_API void attnrt_plan_release(attnrt_plan* plan);

/** What a plan decided. Strings live as long as the plan. */
typedef struct attnrt_plan_info {
  size_t struct_size;
  const char* kernel;    /* chosen kernel name */
  size_t workspace_size; /* bytes the caller passes to attnrt_plan_run (may be 0) */
  size_t workspace_alignment;
  const char* signature; /* the shape signature the plan was made for, human-readable */
} attnrt_plan_info;
/** ATTNRT_STRUCT_SIZE of attnrt_plan_info (ABI 1.13). */
#define ATTNRT_PLAN_INFO_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_plan_info, signature)

ATTNRT_API attnrt_status attnrt_plan_get_info(const attnrt_plan* plan, attnrt_plan_info* out_info);

/**
 * Runs a plan. The tensors must have the shapes, dtypes and strides the plan was made for
 * (PLAN_MISMATCH otherwise), except that a plan made for a growing GQA cache also runs past and
 * present lengths up to its capacity that its kernel accepts within its workspace (PLAN_MISMATCH
 * naming the reason otherwise). Values that bound memory accesses (seqlens_k,
 * total_sequence_length, position_ids, block_table, query_start_loc, seq_lens, slot_mapping, the
 * sparse MLA indices, lengths and metadata: the op's host integer inputs) are read once, into
 * memory the run owns, and checked there before any output is written (INVALID_ARGUMENT); the
 * kernel reads only that copy, so a caller changing them during the run (another thread) gets the
 * result of the values read, never an access out of bounds. An output (or a cache written in place)
 * must not share bytes with them (INVALID_ARGUMENT).
 * `workspace` must hold workspace_size bytes aligned to workspace_alignment; NULL lets the runtime
 * provide it: the plan keeps the workspaces of such runs (one per run in flight) for its next runs
 * and frees them with the plan. `stream` is the CUDA stream for CUDA kernels, NULL otherwise.
 */
ATTNRT_API attnrt_status attnrt_plan_run(attnrt_plan* plan, const attnrt_tensor* const* inputs,
                                         size_t num_inputs, const attnrt_tensor* const* outputs,
                                         size_t num_outputs, void* workspace, size_t workspace_size,
                                         void* stream);

/** Plan-cache counters of an op: hits return an existing plan, misses made a new one. */
ATTNRT_API attnrt_status attnrt_op_plan_cache_stats(const attnrt_op* op, uint64_t* out_hits,
                                                    uint64_t* out_misses);

/** An op's plan cache (ABI 1.2). */
typedef struct attnrt_plan_cache_info {
  size_t struct_size;
  uint64_t hits;      /* attnrt_op_plan calls answered with a cached plan */
  uint64_t misses;    /* attnrt_op_plan calls that made a new plan */
  uint64_t evictions; /* plans dropped to keep at most capacity (plans in use stay valid) */
  uint64_t size;      /* plans cached now */
  uint64_t capacity;  /* the most plans kept: the runtime's plan_cache_size */
} attnrt_plan_cache_info;
/** ATTNRT_STRUCT_SIZE of attnrt_plan_cache_info (ABI 1.13). */
#define ATTNRT_PLAN_CACHE_INFO_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_plan_cache_info, capacity)

/** Errors: INVALID_ARGUMENT (NULL), ABI_MISMATCH when out_info->struct_size is too small. */
ATTNRT_API attnrt_status attnrt_op_plan_cache_info(const attnrt_op* op,
                                                   attnrt_plan_cache_info* out_info);

/* ---- Explain --------------------------------------------------------------------------------- */

/** Why a kernel is or is not the one that runs. */
typedef enum attnrt_candidate_status {
  ATTNRT_CANDIDATE_SELECTED = 0,    /* the kernel that runs */
  ATTNRT_CANDIDATE_ELIGIBLE = 1,    /* would accept, but a higher-ranked kernel was selected */
  ATTNRT_CANDIDATE_DECLINED = 2,    /* its supports() declined; reason says why */
  ATTNRT_CANDIDATE_DISABLED = 3,    /* excluded by ATTNRT_DISABLE / options.disable */
  ATTNRT_CANDIDATE_NOT_PINNED = 4,  /* ATTNRT_KERNEL / options.kernel pins other kernels */
  ATTNRT_CANDIDATE_UNAVAILABLE = 5, /* its plugin's probe says it cannot run here */
  ATTNRT_CANDIDATE_WRONG_DEVICE = 6 /* the tensors live on another device type */
} attnrt_candidate_status;

typedef struct attnrt_candidate {
  size_t struct_size;
  const char* kernel;
  int32_t priority;
  int32_t status;     /* attnrt_candidate_status */
  const char* reason; /* "" for SELECTED and ELIGIBLE */
} attnrt_candidate;
/** ATTNRT_STRUCT_SIZE of attnrt_candidate (ABI 1.13). */
#define ATTNRT_CANDIDATE_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_candidate, reason)

/** "selected", "eligible", "declined", "disabled", "not-pinned", "unavailable", "wrong-device". */
ATTNRT_API const char* attnrt_candidate_status_name(int32_t status);

/**
 * Ranks every kernel registered for the op against these tensors (same arguments as attnrt_op_plan)
 * without making a plan. Fails with INVALID_ARGUMENT when the shapes themselves are invalid. The
 * explanation lists all kernels of the op in rank order, even when none is eligible.
 */
ATTNRT_API attnrt_status attnrt_op_explain(attnrt_op* op, const attnrt_tensor* const* inputs,
                                           size_t num_inputs, const attnrt_tensor* const* outputs,
                                           size_t num_outputs,
                                           attnrt_explanation** out_explanation);
ATTNRT_API attnrt_status attnrt_explanation_count(const attnrt_explanation* explanation,
                                                  size_t* out_count);
ATTNRT_API attnrt_status attnrt_explanation_candidate(const attnrt_explanation* explanation,
                                                      size_t index,
                                                      attnrt_candidate* out_candidate);
ATTNRT_API void attnrt_explanation_destroy(attnrt_explanation* explanation);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_ATTNRT_H_ */
