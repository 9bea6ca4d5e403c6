/*
 * attnrt.i — the one SWIG interface of attnrt's language bindings, over the C ABI only
 * (abi/attnrt/attnrt.h, abi/attnrt/block_pool.h, abi/attnrt/ops/*.h).
 *
 *   Python: module attnrt.attnrt_c (SWIG's proxy of the extension attnrt._attnrt_c), low level; the
 *           package attnrt (bindings/python/attnrt/) is the API users import.
 *   Java:   package org.attnrt; these proxies (AttnrtRuntime, Op, Plan, Tensors, the attribute
 *           classes, BlockPool, Workspace) are the API, with hand-written companions in
 *           bindings/java/org/attnrt/ (GqaOp, PagedGqaOp, SparseMlaOp, SparseMlaEncoder, ...).
 *
 * What is shared: the handles as classes whose destructors call the ABI's destroy/release functions,
 * a tensor list (Tensors) that describes caller memory as attnrt_tensor descriptors without copying,
 * and one error path: a failing status becomes the language's exception carrying the status and the
 * thread's attnrt_last_error_message(). What differs per language is only how memory is borrowed:
 * Python takes buffer-protocol objects and DLPack capsules (python/tensors_python.i), Java takes direct
 * NIO buffers (java/tensors_java.i).
 */
%module attnrt_c

%include <stdint.i>

#ifdef SWIGJAVA
%include <enums.swg>
%javaconst(1);
#endif

%{
#include <attnrt/attnrt.h>
#include <attnrt/ops/gqa.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnrt_bind {

// The error of the wrapped call running on this thread. 0: none. > 0: an attnrt_status, raised as
// the language's attnrt exception with `pending_message`. -1: a target-language exception is
// already set (Python only).
thread_local int pending_status = 0;
thread_local std::string pending_message;

inline void fail(attnrt_status status, std::string message) {
  pending_status = status;
  pending_message = std::move(message);
}

// Records a failing status with the library's message for this thread; true when OK.
inline bool check(attnrt_status status) {
  if (status == ATTNRT_OK) return true;
  fail(status, attnrt_last_error_message());
  return false;
}

// A method called on a handle that was already closed (Java passes a null pointer then).
inline bool check_open(const void* self, const char* what) {
  if (self != nullptr) return true;
  fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(what) + " is closed");
  return false;
}

}  // namespace attnrt_bind
%}

/* ---- errors: one exception path for every wrapped call ------------------------------------------ */

#ifdef SWIGPYTHON
%{
namespace attnrt_bind {
// Raises attnrt._errors.error_class(status)(message): the attnrt.Error subclass of the status.
void raise_pending() {
  static PyObject* errors_module = nullptr;  // attnrt._errors, imported once (a new reference kept)
  if (errors_module == nullptr) errors_module = PyImport_ImportModule("attnrt._errors");
  PyObject* cls = nullptr;
  if (errors_module != nullptr) {
    cls = PyObject_CallMethod(errors_module, "error_class", "i", pending_status);
  }
  if (cls == nullptr) {
    PyErr_Clear();
    cls = PyExc_RuntimeError;
    Py_INCREF(cls);
  }
  PyErr_SetString(cls, pending_message.c_str());
  Py_DECREF(cls);
}
}  // namespace attnrt_bind
%}
%exception {
  attnrt_bind::pending_status = 0;
  $action
  if (attnrt_bind::pending_status != 0) {
    if (attnrt_bind::pending_status > 0) attnrt_bind::raise_pending();
    SWIG_fail;
  }
}
#endif

#ifdef SWIGJAVA
%{
namespace attnrt_bind {
// Throws new org.attnrt.AttnrtException(status, message).
void throw_pending(JNIEnv* jenv) {
  jclass cls = jenv->FindClass("org/attnrt/AttnrtException");
  if (cls == nullptr) return;  // NoClassDefFoundError is pending
  jmethodID ctor = jenv->GetMethodID(cls, "<init>", "(ILjava/lang/String;)V");
  jstring message = jenv->NewStringUTF(pending_message.c_str());
  if (ctor != nullptr && message != nullptr) {
    jobject error = jenv->NewObject(cls, ctor, static_cast<jint>(pending_status), message);
    if (error != nullptr) jenv->Throw(static_cast<jthrowable>(error));
  }
  jenv->DeleteLocalRef(cls);
}
}  // namespace attnrt_bind
%}
%exception {
  attnrt_bind::pending_status = 0;
  $action
  if (attnrt_bind::pending_status != 0) {
    attnrt_bind::throw_pending(jenv);
    return $null;
  }
}
#endif

%{
namespace attnrt_bind {
// Splits a colon-separated folder list (ATTNRT_PLUGIN_PATH syntax).
inline std::vector<std::string> split_paths(const char* paths) {
  std::vector<std::string> out;
  if (paths == nullptr) return out;
  std::string all(paths);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
}  // namespace attnrt_bind
%}

#ifdef SWIGPYTHON
%{
#define ATTNRT_BIND_ALLOW_THREADS_BEGIN Py_BEGIN_ALLOW_THREADS
#define ATTNRT_BIND_ALLOW_THREADS_END Py_END_ALLOW_THREADS
%}
#else
%{
#define ATTNRT_BIND_ALLOW_THREADS_BEGIN {
#define ATTNRT_BIND_ALLOW_THREADS_END }
%}
#endif

/* ---- what SWIG sees of the C headers -------------------------------------------------------------- */

// The raw entry points (out-parameters, arrays of tensor pointers) are wrapped by the methods below;
// any function the headers add later stays hidden until it is wrapped here.
%rename("$ignore", regextarget=1, %$isfunction, %$not %$ismember) "^attnrt_";
// Kernel-side and ABI-plumbing types.
%ignore attnrt_tensor;
%ignore attnrt_device;
%ignore attnrt_dtype;
%ignore attnrt_runtime_options;
%ignore attnrt_gqa_problem;
%ignore attnrt_gqa_args;
%ignore attnrt_gqa_phase;
%ignore attnrt_log_level;
%ignore attnrt_log_fn;
%ignore attnrt_team_fn;
%ignore attnrt_executor_fn;
%ignore struct_size;
%ignore ATTNRT_API;

// Records the library fills in; read-only, used by the language layers to build their own data.
%immutable attnrt_plugin_info::name;
%immutable attnrt_plugin_info::path;
%immutable attnrt_plugin_info::version;
%immutable attnrt_plugin_info::reason;
%immutable attnrt_kernel_info::name;
%immutable attnrt_kernel_info::plugin;
%immutable attnrt_diagnostic::path;
%immutable attnrt_diagnostic::message;
%immutable attnrt_candidate::kernel;
%immutable attnrt_candidate::reason;
%immutable attnrt_plan_info::kernel;
%immutable attnrt_plan_info::signature;
%rename(RawPluginInfo) attnrt_plugin_info;
%rename(RawKernelInfo) attnrt_kernel_info;
%rename(RawDiagnostic) attnrt_diagnostic;
%rename(RawCandidate) attnrt_candidate;
%rename(RawPlanInfo) attnrt_plan_info;
%rename(GqaAttributes) attnrt_gqa_attributes;
#ifdef SWIGJAVA
// Java: not `Runtime`, which `import org.attnrt.*;` would make ambiguous with java.lang.Runtime.
%rename(AttnrtRuntime) attnrt_runtime;
#else
%rename(Runtime) attnrt_runtime;
#endif
%rename(Op) attnrt_op;
%rename(Plan) attnrt_plan;
%rename(Explanation) attnrt_explanation;
%rename(Tensors) attnrt_bind::TensorList;
// Methods added with %extend are named `name_` in C++, so that their generated C functions
// (attnrt_runtime_plugin_info_, ...) never collide with the ABI's; the languages see `name`.
%rename("%(regex:/^(.*)_$/\\1/)s", %$ismember, %$isfunction) "";

#ifdef SWIGJAVA
%rename(Status) attnrt_status;
%rename(DeviceType) attnrt_device_type;
%rename(DTypeCode) attnrt_dtype_code;
%rename(OpKind) attnrt_op_kind;
%rename(CandidateStatus) attnrt_candidate_status;
%rename(GqaInput) attnrt_gqa_input;
%rename(GqaOutput) attnrt_gqa_output;
%rename(GqaQuantType) attnrt_gqa_quant_type;
%rename(GqaQkOutput) attnrt_gqa_qk_output;
// Java enum constants live inside their enum: Status.ERROR_INVALID_ARGUMENT, GqaInput.QUERY,
// GqaQkOutput.QK_OUTPUT_NONE, CandidateStatus.DECLINED, ... (the op headers' enums: ops.i).
%rename("%(regex:/^ATTNRT_(GQA_INPUT_|GQA_OUTPUT_|GQA_QUANT_|CANDIDATE_|DEVICE_|DTYPE_CODE_|OP_|GQA_)?(.*)$/\\2/)s", %$isenumitem) "";
// Fields as Java bean properties: setNumHeads, getKvNumHeads, ...
%rename("%(lowercamelcase)s", %$isvariable) "";
#endif

#ifdef SWIGJAVA
%include "java/handles_java.i"
#endif

%include "attnrt/attnrt.h"
%include "attnrt/ops/gqa.h"

/* ---- tensors --------------------------------------------------------------------------------------- */

%{
namespace attnrt_bind {

// A fixed-size list of borrowed tensors indexed by an op's input or output positions, handed to
// attnrt_op_plan / attnrt_plan_run as `const attnrt_tensor* const*`. Nothing is copied: each slot
// describes caller memory. Python slots also hold what keeps that memory valid (a Py_buffer or a
// DLPack managed tensor) until the slot is cleared or the list is destroyed.
class TensorList {
 public:
  explicit TensorList(size_t count) : slots_(count), pointers_(count, nullptr) {}
  TensorList(const TensorList&) = delete;
  TensorList& operator=(const TensorList&) = delete;
  ~TensorList() { clear_all(); }

  size_t size() const { return slots_.size(); }
  bool has(size_t index) const { return index < slots_.size() && pointers_[index] != nullptr; }

  void clear(size_t index) {
    if (index < slots_.size()) release(index);
  }
  void clear_all() {
    for (size_t i = 0; i < slots_.size(); ++i) release(i);
  }

  const attnrt_tensor* const* pointers() const { return pointers_.data(); }

  // Describes `data` (compact row-major when `strides` is empty) at `index`.
  bool describe(size_t index, const char* name, void* data, attnrt_device device, attnrt_dtype dtype,
                std::vector<int64_t> shape, std::vector<int64_t> strides, uint64_t byte_offset) {
    if (!check_index(index, name)) return false;
    Slot& slot = slots_[index];
    slot.shape = std::move(shape);
    slot.strides = std::move(strides);
    slot.tensor.data = data;
    slot.tensor.device = device;
    slot.tensor.ndim = static_cast<int32_t>(slot.shape.size());
    slot.tensor.dtype = dtype;
    slot.tensor.shape = slot.shape.empty() ? nullptr : slot.shape.data();
    slot.tensor.strides = slot.strides.empty() ? nullptr : slot.strides.data();
    slot.tensor.byte_offset = byte_offset;
    pointers_[index] = &slot.tensor;
    return true;
  }

  // The tensor at `index`, or nullptr when the position is empty or out of range.
  const attnrt_tensor* at(size_t index) const {
    return index < slots_.size() ? pointers_[index] : nullptr;
  }

  bool check_index(size_t index, const char* name) const {
    if (index < slots_.size()) return true;
    fail(ATTNRT_ERROR_INVALID_ARGUMENT, std::string(name ? name : "tensor") + ": position " +
                                            std::to_string(index) + " is out of range (the list has " +
                                            std::to_string(slots_.size()) + " positions)");
    return false;
  }

#ifdef SWIGPYTHON
  bool set_object(size_t index, const char* name, PyObject* object, bool writable, int dtype_code,
                  int dtype_bits);
#endif

 private:
  struct Slot {
    attnrt_tensor tensor{};
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
#ifdef SWIGPYTHON
    Py_buffer view{};
    bool has_view = false;
    void* managed = nullptr;  // DLManagedTensor or DLManagedTensorVersioned, deleter still owed
    bool versioned = false;
#endif
  };

  void release(size_t index);

  std::vector<Slot> slots_;
  std::vector<const attnrt_tensor*> pointers_;
};

}  // namespace attnrt_bind
%}

#ifdef SWIGPYTHON
%include "python/tensors_python.i"
#endif
#ifdef SWIGJAVA
%include "java/tensors_java.i"
#endif

namespace attnrt_bind {
/**
 * A list of tensors indexed by an op's input or output positions (GQA: 16 inputs, 4 outputs).
 * Each slot borrows caller memory without copying it; empty slots are absent inputs or outputs.
 */
class TensorList {
 public:
  /** An empty list of `count` positions. */
  explicit TensorList(size_t count);
  ~TensorList();
  /** Number of positions. */
  size_t size() const;
  /** True when position `index` holds a tensor. */
  bool has(size_t index) const;
  /** Empties position `index` and releases what it borrowed. */
  void clear(size_t index);
  /** Empties every position. */
  void clear_all();
};
}

// Every op beyond GroupQueryAttention, the block pool, the encoders and workspaces. Included here,
// before the handles' %extend blocks, so that its support code precedes all extension code.
%include "ops.i"

/* ---- handles --------------------------------------------------------------------------------------- */

%nodefaultctor attnrt_runtime;
%nodefaultdtor attnrt_runtime;
%nodefaultctor attnrt_op;
%nodefaultdtor attnrt_op;
%nodefaultctor attnrt_plan;
%nodefaultdtor attnrt_plan;
%nodefaultctor attnrt_explanation;
%nodefaultdtor attnrt_explanation;
// Opaque in C; declared here so that SWIG makes classes of them.
struct attnrt_runtime {};
struct attnrt_op {};
struct attnrt_plan {};
struct attnrt_explanation {};

%extend attnrt_runtime {
  /**
   * Creates a runtime: discovers and loads the plugins, probes them and ranks their kernels.
   * @param plugin_paths colon-separated folders searched first for libattnrt_*.so (null: none)
   * @param search_default_paths 1: then ATTNRT_PLUGIN_PATH and attnrt/plugins beside libattnrt.so;
   *        0: plugin_paths only
   * @param kernel comma-separated globs of kernels allowed to run (null: ATTNRT_KERNEL)
   * @param disable comma-separated globs of kernels excluded (null: ATTNRT_DISABLE)
   * @param debug 1: log one line per planned op; 0: off; -1: ATTNRT_DEBUG
   * @param num_threads CPU pool size, caller included (0: ATTNRT_NUM_THREADS, else all hardware threads)
   */
  attnrt_runtime(const char* plugin_paths = NULL, int32_t search_default_paths = 1,
                 const char* kernel = NULL, const char* disable = NULL, int32_t debug = -1,
                 int32_t num_threads = 0) {
    std::vector<std::string> paths = attnrt_bind::split_paths(plugin_paths);
    std::vector<const char*> path_ptrs;
    for (const std::string& p : paths) path_ptrs.push_back(p.c_str());
    attnrt_runtime_options options;
    attnrt_runtime_options_init(&options);
    options.plugin_paths = path_ptrs.empty() ? nullptr : path_ptrs.data();
    options.num_plugin_paths = path_ptrs.size();
    options.search_default_paths = search_default_paths;
    options.kernel = kernel;
    options.disable = disable;
    options.debug = debug;
    options.num_threads = num_threads;
    attnrt_runtime* runtime = nullptr;
    attnrt_status status;
    ATTNRT_BIND_ALLOW_THREADS_BEGIN
    status = attnrt_runtime_create(&options, &runtime);
    ATTNRT_BIND_ALLOW_THREADS_END
    attnrt_bind::check(status);
    return runtime;
  }
  /** Releases the runtime handle; plugins stay loaded while ops or plans made from it live. */
  ~attnrt_runtime() { attnrt_runtime_destroy($self); }

  /** Threads in the runtime's CPU pool, caller thread included. */
  int32_t num_threads_() const {
    int32_t n = 0;
    if (attnrt_bind::check_open($self, "runtime")) attnrt_bind::check(attnrt_runtime_num_threads($self, &n));
    return n;
  }
  /** Number of loaded plugins. */
  size_t plugin_count_() const {
    size_t n = 0;
    if (attnrt_bind::check_open($self, "runtime")) attnrt_bind::check(attnrt_runtime_plugin_count($self, &n));
    return n;
  }
  /** Fills `out` with plugin `index` (its strings live as long as the runtime). */
  void plugin_info_(size_t index, attnrt_plugin_info* out) const {
    if (!attnrt_bind::check_open($self, "runtime") || !attnrt_bind::check_open(out, "out")) return;
    out->struct_size = sizeof(*out);
    attnrt_bind::check(attnrt_runtime_plugin_info($self, index, out));
  }
  /** Key of probe fact `fact` of plugin `plugin`. */
  const char* plugin_fact_key_(size_t plugin, size_t fact) const {
    const char* key = "";
    const char* value = "";
    if (attnrt_bind::check_open($self, "runtime")) attnrt_bind::check(attnrt_runtime_plugin_fact($self, plugin, fact, &key, &value));
    return key;
  }
  /** Value of probe fact `fact` of plugin `plugin`. */
  const char* plugin_fact_value_(size_t plugin, size_t fact) const {
    const char* key = "";
    const char* value = "";
    if (attnrt_bind::check_open($self, "runtime")) attnrt_bind::check(attnrt_runtime_plugin_fact($self, plugin, fact, &key, &value));
    return value;
  }
  /** Fills `out` with kernel `kernel` of plugin `plugin`, in rank order. */
  void plugin_kernel_(size_t plugin, size_t kernel, attnrt_kernel_info* out) const {
    if (!attnrt_bind::check_open($self, "runtime") || !attnrt_bind::check_open(out, "out")) return;
    out->struct_size = sizeof(*out);
    attnrt_bind::check(attnrt_runtime_plugin_kernel($self, plugin, kernel, out));
  }
  /** Number of files skipped during discovery. */
  size_t diagnostic_count_() const {
    size_t n = 0;
    if (attnrt_bind::check_open($self, "runtime")) attnrt_bind::check(attnrt_runtime_diagnostic_count($self, &n));
    return n;
  }
  /** Fills `out` with diagnostic `index`: the file and why it was skipped. */
  void diagnostic_(size_t index, attnrt_diagnostic* out) const {
    if (!attnrt_bind::check_open($self, "runtime") || !attnrt_bind::check_open(out, "out")) return;
    out->struct_size = sizeof(*out);
    attnrt_bind::check(attnrt_runtime_diagnostic($self, index, out));
  }
}

%extend attnrt_gqa_attributes {
  /** GroupQueryAttention attributes with ONNX Runtime's defaults; num_heads and kv_num_heads are 0. */
  attnrt_gqa_attributes() {
    attnrt_gqa_attributes* a = new attnrt_gqa_attributes;
    attnrt_gqa_attributes_init(a);
    return a;
  }
  ~attnrt_gqa_attributes() { delete $self; }
}

%newobject attnrt_op::plan_;
%newobject attnrt_op::explain_;
%extend attnrt_op {
  /**
   * Creates a com.microsoft.GroupQueryAttention op from validated attributes.
   * Errors: INVALID_ARGUMENT naming the attribute with the expected and actual values.
   */
  attnrt_op(attnrt_runtime* runtime, const attnrt_gqa_attributes* attributes) {
    attnrt_op* op = nullptr;
    if (attnrt_bind::check_open(runtime, "runtime") && attnrt_bind::check_open(attributes, "attributes")) {
      attnrt_bind::check(attnrt_op_create(runtime, ATTNRT_OP_GQA, attributes, &op));
    }
    return op;
  }
  /** Destroys the op; plans made from it stay valid. */
  ~attnrt_op() { attnrt_op_destroy($self); }

  /**
   * Plans the op for these tensors (shapes, dtypes and strides only): validates every shape, picks
   * the highest-ranked kernel that accepts them. Plans are cached per shape signature.
   * Errors: INVALID_ARGUMENT (names the input), UNSUPPORTED (lists each kernel's reason).
   */
  attnrt_plan* plan_(const attnrt_bind::TensorList& inputs, const attnrt_bind::TensorList& outputs) {
    attnrt_plan* plan = nullptr;
    if (attnrt_bind::check_open($self, "op")) {
      attnrt_bind::check(attnrt_op_plan($self, inputs.pointers(), inputs.size(), outputs.pointers(),
                                        outputs.size(), &plan));
    }
    return plan;
  }
  /** Ranks every kernel of the op against these tensors without planning. */
  attnrt_explanation* explain_(const attnrt_bind::TensorList& inputs,
                              const attnrt_bind::TensorList& outputs) {
    attnrt_explanation* explanation = nullptr;
    if (attnrt_bind::check_open($self, "op")) {
      attnrt_bind::check(attnrt_op_explain($self, inputs.pointers(), inputs.size(), outputs.pointers(),
                                           outputs.size(), &explanation));
    }
    return explanation;
  }
  /** Plan-cache hits (an existing plan was returned). */
  int64_t plan_cache_hits_() const {
    uint64_t hits = 0, misses = 0;
    if (attnrt_bind::check_open($self, "op")) attnrt_bind::check(attnrt_op_plan_cache_stats($self, &hits, &misses));
    return static_cast<int64_t>(hits);
  }
  /** Plan-cache misses (a new plan was made). */
  int64_t plan_cache_misses_() const {
    uint64_t hits = 0, misses = 0;
    if (attnrt_bind::check_open($self, "op")) attnrt_bind::check(attnrt_op_plan_cache_stats($self, &hits, &misses));
    return static_cast<int64_t>(misses);
  }
}

%extend attnrt_plan {
  /** Drops this reference to the plan. */
  ~attnrt_plan() { attnrt_plan_release($self); }
  /** Fills `out` with the chosen kernel, workspace size and shape signature. */
  void info_(attnrt_plan_info* out) const {
    if (!attnrt_bind::check_open($self, "plan") || !attnrt_bind::check_open(out, "out")) return;
    out->struct_size = sizeof(*out);
    attnrt_bind::check(attnrt_plan_get_info($self, out));
  }
  /**
   * Runs the plan on tensors of the shapes it was made for (PLAN_MISMATCH otherwise); the runtime
   * allocates the workspace. Python releases the GIL while the kernel runs.
   * Errors: INVALID_ARGUMENT for out-of-range seqlens_k, total_sequence_length or positions.
   */
  void run_(const attnrt_bind::TensorList& inputs, const attnrt_bind::TensorList& outputs) {
    if (!attnrt_bind::check_open($self, "plan")) return;
    attnrt_status status;
    ATTNRT_BIND_ALLOW_THREADS_BEGIN
    status = attnrt_plan_run($self, inputs.pointers(), inputs.size(), outputs.pointers(),
                             outputs.size(), nullptr, 0, nullptr);
    ATTNRT_BIND_ALLOW_THREADS_END
    attnrt_bind::check(status);
  }
}

%extend attnrt_explanation {
  ~attnrt_explanation() { attnrt_explanation_destroy($self); }
  /** Number of kernels ranked. */
  size_t count_() const {
    size_t n = 0;
    if (attnrt_bind::check_open($self, "explanation")) attnrt_bind::check(attnrt_explanation_count($self, &n));
    return n;
  }
  /** Fills `out` with kernel `index` in rank order (strings live as long as the explanation). */
  void candidate_(size_t index, attnrt_candidate* out) const {
    if (!attnrt_bind::check_open($self, "explanation") || !attnrt_bind::check_open(out, "out")) return;
    out->struct_size = sizeof(*out);
    attnrt_bind::check(attnrt_explanation_candidate($self, index, out));
  }
}

/* ---- free functions --------------------------------------------------------------------------------- */

%inline %{
/** Library version "MAJOR.MINOR.PATCH". */
const char* version() { return attnrt_version_string(); }
/** ABI major version the library was built with. */
int32_t abi_version_major() {
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  return static_cast<int32_t>(major);
}
/** ABI minor version the library was built with. */
int32_t abi_version_minor() {
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  return static_cast<int32_t>(minor);
}
/** Stable name of a status code, e.g. "ATTNRT_ERROR_INVALID_ARGUMENT". */
const char* status_name(int32_t status) { return attnrt_status_name(static_cast<attnrt_status>(status)); }
/** "selected", "eligible", "declined", "disabled", "not-pinned", "unavailable" or "wrong-device". */
const char* candidate_status_name(int32_t status) { return attnrt_candidate_status_name(status); }
/** Short op name ("gqa"). */
const char* op_kind_name(int32_t kind) { return attnrt_op_kind_name(kind); }
/** Short dtype name ("float32", "bfloat16", "int4", ...; "unknown" otherwise). */
const char* dtype_name(int32_t code, int32_t bits) {
  attnrt_dtype dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  return attnrt_dtype_name(dtype);
}
%}
