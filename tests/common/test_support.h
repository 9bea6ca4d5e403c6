// Helpers shared by the black-box tests: owning host tensors behind attnrt_tensor descriptors,
// RAII handles, scoped environment variables, the run seed, and GQA tensor sets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"

namespace attnrt_test {

// ---- handles
// -------------------------------------------------------------------------------------
struct RuntimeDeleter {
  void operator()(attnrt_runtime* r) const { attnrt_runtime_destroy(r); }
};
struct OpDeleter {
  void operator()(attnrt_op* op) const { attnrt_op_destroy(op); }
};
struct PlanDeleter {
  void operator()(attnrt_plan* plan) const { attnrt_plan_release(plan); }
};
struct ExplanationDeleter {
  void operator()(attnrt_explanation* e) const { attnrt_explanation_destroy(e); }
};
using RuntimePtr = std::unique_ptr<attnrt_runtime, RuntimeDeleter>;
using OpPtr = std::unique_ptr<attnrt_op, OpDeleter>;
using PlanPtr = std::unique_ptr<attnrt_plan, PlanDeleter>;
using ExplanationPtr = std::unique_ptr<attnrt_explanation, ExplanationDeleter>;

// "CODE: message" of the last call on this thread, for assertion messages.
std::string LastError(attnrt_status status);

// Options with every default (attnrt_runtime_options_init).
attnrt_runtime_options DefaultOptions();

// Creates a runtime; on failure records a test failure and returns null.
RuntimePtr CreateRuntime(const attnrt_runtime_options& options);
RuntimePtr CreateRuntime();  // all defaults

// ---- environment
// ---------------------------------------------------------------------------------- Sets (value !=
// nullopt) or unsets an environment variable for the scope; restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Unsets every ATTNRT_* variable that changes runtime behaviour, for the scope; except that
// ATTNRT_NUM_THREADS becomes ATTNRT_TEST_NUM_THREADS when that is set (a run that fixes the thread
// count of the runtimes the tests make with default options, whatever the machine's:
// scripts/test-arm.sh).
class CleanAttnrtEnv {
 public:
  CleanAttnrtEnv();

 private:
  ScopedEnv plugin_path_{"ATTNRT_PLUGIN_PATH", std::nullopt};
  ScopedEnv kernel_{"ATTNRT_KERNEL", std::nullopt};
  ScopedEnv disable_{"ATTNRT_DISABLE", std::nullopt};
  ScopedEnv debug_{"ATTNRT_DEBUG", std::nullopt};
  ScopedEnv threads_{"ATTNRT_NUM_THREADS", std::nullopt};
  ScopedEnv plan_cache_size_{"ATTNRT_PLAN_CACHE_SIZE", std::nullopt};
  ScopedEnv allow_insecure_{"ATTNRT_PLUGIN_ALLOW_INSECURE", std::nullopt};
};

// ---- seed
// ------------------------------------------------------------------------------------------- The
// run's base seed: ATTNRT_TEST_SEED if set, else std::random_device; fixed for the process.
uint64_t BaseSeed();
// A seed for one test: the base seed mixed with the test's full name (reproducible from the base).
uint64_t TestSeed();
// "ATTNRT_TEST_SEED=<base>" for SCOPED_TRACE and messages; also records it as a test property.
std::string SeedTrace();

// ---- tensors
// ----------------------------------------------------------------------------------------
inline constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
inline constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
inline constexpr attnrt_dtype kI64 = ATTNRT_DTYPE_INT64;

// An owning, 64-byte aligned host tensor. Copies share storage (use Clone for a deep copy), which
// is how a present output aliases the past buffer.
class Tensor {
 public:
  Tensor() = default;
  Tensor(attnrt_dtype dtype, std::vector<int64_t> shape);

  bool empty() const { return !storage_; }
  int64_t numel() const;
  size_t bytes() const;
  const std::vector<int64_t>& shape() const { return shape_; }

  float* f32() { return reinterpret_cast<float*>(storage_.get()); }
  const float* f32() const { return reinterpret_cast<const float*>(storage_.get()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(storage_.get()); }
  int64_t* i64() { return reinterpret_cast<int64_t*>(storage_.get()); }
  const int64_t* i64() const { return reinterpret_cast<const int64_t*>(storage_.get()); }
  void* data() { return storage_.get(); }

  void Fill(float value);
  void FillNormal(std::mt19937_64& rng);
  Tensor Clone() const;
  // Same storage, another shape/dtype view (e.g. a wrong-shaped descriptor for mismatch tests).
  Tensor View(std::vector<int64_t> shape) const;

  // The descriptor; valid while this object lives and is not moved.
  const attnrt_tensor* get();

 private:
  attnrt_dtype dtype_{};
  std::vector<int64_t> shape_;
  std::shared_ptr<unsigned char> storage_;
  attnrt_tensor desc_{};
};

Tensor F32(std::vector<int64_t> shape);
Tensor I32(std::vector<int32_t> values, std::vector<int64_t> shape);
Tensor I64(std::vector<int64_t> values, std::vector<int64_t> shape);

// Every GQA input and output by position; empty tensors are passed as NULL.
struct GqaTensors {
  std::array<Tensor, ATTNRT_GQA_NUM_INPUTS> in;
  std::array<Tensor, ATTNRT_GQA_NUM_OUTPUTS> out;

  Tensor& operator[](attnrt_gqa_input i) { return in[i]; }
  Tensor& operator[](attnrt_gqa_output o) { return out[o]; }

  // Descriptor pointer arrays for attnrt_op_plan / attnrt_plan_run; valid while *this lives.
  const attnrt_tensor* const* Inputs();
  const attnrt_tensor* const* Outputs();

 private:
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_INPUTS> in_ptrs_{};
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_OUTPUTS> out_ptrs_{};
};

// A plain float32 GQA call: query/key/value (B,S,·), optional past (B,Nkv,P,H) and present
// (B,Nkv,max(T,P),H) or present aliasing the past (shared), seqlens_k = T-1 for every batch unless
// given, random N(0,1) data, output poisoned with NaN.
struct SimpleGqa {
  int64_t batch = 1, seq = 4, num_heads = 2, kv_num_heads = 1, head_size = 8;
  int64_t past = -1;  // < 0: no past inputs
  int64_t total = 4;
  bool present = false;
  bool shared_buffer = false;  // present_key/value are past_key/value
  std::vector<int32_t> seqlens;
};
GqaTensors MakeGqaTensors(const SimpleGqa& spec, std::mt19937_64& rng);

attnrt_gqa_attributes GqaAttributes(int32_t num_heads, int32_t kv_num_heads);

// Plans op for t; on failure records a test failure and returns null.
PlanPtr Plan(attnrt_op* op, GqaTensors& t);
// Runs plan on t with a workspace of the size the plan asks for; returns the status.
attnrt_status RunPlan(attnrt_plan* plan, GqaTensors& t);
// The chosen kernel of a plan ("" on error).
std::string PlanKernel(const attnrt_plan* plan);
// Whether `status`, just returned by attnrt_op_plan, says that no plugin of this build registers a
// kernel of the op (a build without a CPU plugin for its architecture): tests of such an op skip.
bool NoKernelForOp(attnrt_status status);

// One explain entry, copied out of the explanation.
struct Candidate {
  std::string kernel;
  int32_t priority = 0;
  int32_t status = -1;
  std::string reason;
};
// attnrt_op_explain as a vector; on failure records a test failure and returns {}.
std::vector<Candidate> Explain(attnrt_op* op, const attnrt_tensor* const* inputs, size_t num_inputs,
                               const attnrt_tensor* const* outputs, size_t num_outputs);
std::vector<Candidate> Explain(attnrt_op* op, GqaTensors& t);

// Kernels the runtime lists, as attnrt_runtime_plugin_kernel reports them.
struct KernelInfo {
  std::string name;
  std::string plugin;
  int32_t op_kind = 0;
  int32_t device_type = 0;
  int32_t priority = 0;
};
struct PluginInfo {
  std::string name, path, version, reason;
  uint32_t abi_major = 0, abi_minor = 0;
  int32_t available = 0;
  std::vector<std::pair<std::string, std::string>> facts;
  std::vector<KernelInfo> kernels;
};
struct Diagnostic {
  std::string path, message;
};
std::vector<PluginInfo> ListPlugins(const attnrt_runtime* runtime);
std::vector<Diagnostic> ListDiagnostics(const attnrt_runtime* runtime);

// Lower-case copy, for case-insensitive message checks.
std::string Lower(std::string s);
bool ContainsI(const std::string& haystack, const std::string& needle);

// Folders set by tests/CMakeLists.txt.
std::string DefaultPluginDir();  // build/lib/attnrt/plugins

}  // namespace attnrt_test
