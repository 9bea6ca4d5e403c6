#include "common/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>

namespace attnrt_test {

std::string LastError(attnrt_status status) {
  const std::string message = attnrt_last_error_message();  // before any other attnrt call
  return std::string(attnrt_status_name(status)) + ": " + message;
}

attnrt_runtime_options DefaultOptions() {
  attnrt_runtime_options options;
  std::memset(&options, 0, sizeof(options));
  attnrt_runtime_options_init(&options);
  return options;
}

RuntimePtr CreateRuntime(const attnrt_runtime_options& options) {
  attnrt_runtime* runtime = nullptr;
  const attnrt_status st = attnrt_runtime_create(&options, &runtime);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return RuntimePtr(st == ATTNRT_OK ? runtime : nullptr);
}

RuntimePtr CreateRuntime() { return CreateRuntime(DefaultOptions()); }

// ---- environment
// ----------------------------------------------------------------------------------
ScopedEnv::ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str())) old_ = old;
  if (value) {
    setenv(name_.c_str(), value->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    setenv(name_.c_str(), old_->c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

CleanAttnrtEnv::CleanAttnrtEnv() {
  // threads_ has unset ATTNRT_NUM_THREADS and puts back its old value when the scope ends.
  const char* test_threads = std::getenv("ATTNRT_TEST_NUM_THREADS");
  if (test_threads != nullptr && *test_threads != '\0') {
    setenv("ATTNRT_NUM_THREADS", test_threads, 1);
  }
}

// ---- seed
// -------------------------------------------------------------------------------------------
uint64_t BaseSeed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("ATTNRT_TEST_SEED"); env != nullptr && *env != '\0') {
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    }
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

uint64_t TestSeed() {
  std::string name;
  if (const auto* info = testing::UnitTest::GetInstance()->current_test_info()) {
    name = std::string(info->test_suite_name()) + "." + info->name();
  }
  // splitmix64 of base ^ hash(name): stable across runs for the same base seed.
  uint64_t z = BaseSeed() ^ std::hash<std::string>{}(name);
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string SeedTrace() {
  const std::string seed = std::to_string(BaseSeed());
  testing::Test::RecordProperty("ATTNRT_TEST_SEED", seed);
  return "reproduce with ATTNRT_TEST_SEED=" + seed;
}

// ---- tensors
// ----------------------------------------------------------------------------------------
namespace {
size_t ElementBytes(attnrt_dtype dtype) { return (dtype.bits + 7u) / 8u; }
}  // namespace

Tensor::Tensor(attnrt_dtype dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  // At least 64 bytes, so an empty tensor (e.g. key with L = 0) still has a valid data pointer.
  const size_t size = std::max<size_t>(64, (bytes() + 63) / 64 * 64);
  void* p = ::operator new (size, std::align_val_t{64});
  std::memset(p, 0, size);
  storage_ = std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p), [](unsigned char* q) {
    ::operator delete (q, std::align_val_t{64});
  });
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

size_t Tensor::bytes() const { return static_cast<size_t>(numel()) * ElementBytes(dtype_); }

void Tensor::Fill(float value) {
  float* p = f32();
  for (int64_t i = 0; i < numel(); ++i) p[i] = value;
}

void Tensor::FillNormal(std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float* p = f32();
  for (int64_t i = 0; i < numel(); ++i) p[i] = dist(rng);
}

Tensor Tensor::Clone() const {
  Tensor copy(dtype_, shape_);
  std::memcpy(copy.storage_.get(), storage_.get(), bytes());
  return copy;
}

Tensor Tensor::View(std::vector<int64_t> shape) const {
  Tensor view = *this;
  view.shape_ = std::move(shape);
  return view;
}

const attnrt_tensor* Tensor::get() {
  if (!storage_) return nullptr;
  desc_.data = storage_.get();
  desc_.device = attnrt_device{ATTNRT_DEVICE_CPU, 0};
  desc_.ndim = static_cast<int32_t>(shape_.size());
  desc_.dtype = dtype_;
  desc_.shape = shape_.data();
  desc_.strides = nullptr;
  desc_.byte_offset = 0;
  return &desc_;
}

Tensor F32(std::vector<int64_t> shape) { return Tensor(kF32, std::move(shape)); }

Tensor I32(std::vector<int32_t> values, std::vector<int64_t> shape) {
  Tensor t(kI32, std::move(shape));
  std::copy(values.begin(), values.end(), t.i32());
  return t;
}

Tensor I64(std::vector<int64_t> values, std::vector<int64_t> shape) {
  Tensor t(kI64, std::move(shape));
  std::copy(values.begin(), values.end(), t.i64());
  return t;
}

const attnrt_tensor* const* GqaTensors::Inputs() {
  for (size_t i = 0; i < in.size(); ++i) in_ptrs_[i] = in[i].get();
  return in_ptrs_.data();
}

const attnrt_tensor* const* GqaTensors::Outputs() {
  for (size_t i = 0; i < out.size(); ++i) out_ptrs_[i] = out[i].get();
  return out_ptrs_.data();
}

GqaTensors MakeGqaTensors(const SimpleGqa& g, std::mt19937_64& rng) {
  GqaTensors t;
  t[ATTNRT_GQA_INPUT_QUERY] = F32({g.batch, g.seq, g.num_heads * g.head_size});
  t[ATTNRT_GQA_INPUT_KEY] = F32({g.batch, g.seq, g.kv_num_heads * g.head_size});
  t[ATTNRT_GQA_INPUT_VALUE] = F32({g.batch, g.seq, g.kv_num_heads * g.head_size});
  for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    t[i].FillNormal(rng);
  }
  if (g.past >= 0) {
    t[ATTNRT_GQA_INPUT_PAST_KEY] = F32({g.batch, g.kv_num_heads, g.past, g.head_size});
    t[ATTNRT_GQA_INPUT_PAST_VALUE] = F32({g.batch, g.kv_num_heads, g.past, g.head_size});
    t[ATTNRT_GQA_INPUT_PAST_KEY].FillNormal(rng);
    t[ATTNRT_GQA_INPUT_PAST_VALUE].FillNormal(rng);
  }
  std::vector<int32_t> seqlens = g.seqlens;
  if (seqlens.empty())
    seqlens.assign(static_cast<size_t>(g.batch), static_cast<int32_t>(g.total - 1));
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {g.batch});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(g.total)}, {1});
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = F32({g.batch, g.seq, g.num_heads * g.head_size});
  t[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(std::numeric_limits<float>::quiet_NaN());
  if (g.shared_buffer) {
    t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY];
    t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = t[ATTNRT_GQA_INPUT_PAST_VALUE];
  } else if (g.present) {
    const int64_t rows = std::max<int64_t>(g.total, std::max<int64_t>(g.past, 0));
    t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = F32({g.batch, g.kv_num_heads, rows, g.head_size});
    t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = F32({g.batch, g.kv_num_heads, rows, g.head_size});
  }
  return t;
}

attnrt_gqa_attributes GqaAttributes(int32_t num_heads, int32_t kv_num_heads) {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  a.num_heads = num_heads;
  a.kv_num_heads = kv_num_heads;
  return a;
}

PlanPtr Plan(attnrt_op* op, GqaTensors& t) {
  attnrt_plan* plan = nullptr;
  const attnrt_status st = attnrt_op_plan(op, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                          ATTNRT_GQA_NUM_OUTPUTS, &plan);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return PlanPtr(st == ATTNRT_OK ? plan : nullptr);
}

attnrt_status RunPlan(attnrt_plan* plan, GqaTensors& t) {
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (const attnrt_status st = attnrt_plan_get_info(plan, &info); st != ATTNRT_OK) return st;
  const size_t alignment = std::max<size_t>(64, info.workspace_alignment);
  void* workspace = nullptr;
  if (info.workspace_size > 0) {
    workspace = ::operator new ((info.workspace_size + alignment - 1) / alignment * alignment,
                                std::align_val_t{alignment});
  }
  const attnrt_status st =
      attnrt_plan_run(plan, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(), ATTNRT_GQA_NUM_OUTPUTS,
                      workspace, info.workspace_size, nullptr);
  if (workspace != nullptr) ::operator delete (workspace, std::align_val_t{alignment});
  return st;
}

bool NoKernelForOp(attnrt_status status) {
  return status == ATTNRT_ERROR_UNSUPPORTED &&
         std::string(attnrt_last_error_message()).find("no kernel is registered for this op") !=
             std::string::npos;
}

std::string PlanKernel(const attnrt_plan* plan) {
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  if (attnrt_plan_get_info(plan, &info) != ATTNRT_OK || info.kernel == nullptr) return "";
  return info.kernel;
}

std::vector<Candidate> Explain(attnrt_op* op, GqaTensors& t) {
  return Explain(op, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(), ATTNRT_GQA_NUM_OUTPUTS);
}

std::vector<Candidate> Explain(attnrt_op* op, const attnrt_tensor* const* inputs, size_t num_inputs,
                               const attnrt_tensor* const* outputs, size_t num_outputs) {
  attnrt_explanation* raw = nullptr;
  attnrt_status st = attnrt_op_explain(op, inputs, num_inputs, outputs, num_outputs, &raw);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  if (st != ATTNRT_OK) return {};
  ExplanationPtr explanation(raw);
  size_t count = 0;
  st = attnrt_explanation_count(explanation.get(), &count);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  std::vector<Candidate> out;
  for (size_t i = 0; i < count; ++i) {
    attnrt_candidate c;
    std::memset(&c, 0, sizeof(c));
    c.struct_size = sizeof(c);
    st = attnrt_explanation_candidate(explanation.get(), i, &c);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    if (st != ATTNRT_OK) break;
    out.push_back({c.kernel ? c.kernel : "", c.priority, c.status, c.reason ? c.reason : ""});
  }
  return out;
}

std::vector<PluginInfo> ListPlugins(const attnrt_runtime* runtime) {
  std::vector<PluginInfo> plugins;
  size_t count = 0;
  attnrt_status st = attnrt_runtime_plugin_count(runtime, &count);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  for (size_t i = 0; i < count && st == ATTNRT_OK; ++i) {
    attnrt_plugin_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    st = attnrt_runtime_plugin_info(runtime, i, &info);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    if (st != ATTNRT_OK) break;
    PluginInfo p;
    p.name = info.name ? info.name : "";
    p.path = info.path ? info.path : "";
    p.version = info.version ? info.version : "";
    p.reason = info.reason ? info.reason : "";
    p.abi_major = info.abi_major;
    p.abi_minor = info.abi_minor;
    p.available = info.available;
    for (size_t f = 0; f < info.num_facts; ++f) {
      const char* key = nullptr;
      const char* value = nullptr;
      st = attnrt_runtime_plugin_fact(runtime, i, f, &key, &value);
      EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
      if (st != ATTNRT_OK) break;
      p.facts.emplace_back(key ? key : "", value ? value : "");
    }
    for (size_t k = 0; k < info.num_kernels && st == ATTNRT_OK; ++k) {
      attnrt_kernel_info ki;
      std::memset(&ki, 0, sizeof(ki));
      ki.struct_size = sizeof(ki);
      st = attnrt_runtime_plugin_kernel(runtime, i, k, &ki);
      EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
      if (st != ATTNRT_OK) break;
      p.kernels.push_back({ki.name ? ki.name : "", ki.plugin ? ki.plugin : "", ki.op_kind,
                           ki.device_type, ki.priority});
    }
    plugins.push_back(std::move(p));
  }
  return plugins;
}

std::vector<Diagnostic> ListDiagnostics(const attnrt_runtime* runtime) {
  std::vector<Diagnostic> out;
  size_t count = 0;
  attnrt_status st = attnrt_runtime_diagnostic_count(runtime, &count);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  for (size_t i = 0; i < count && st == ATTNRT_OK; ++i) {
    attnrt_diagnostic d;
    std::memset(&d, 0, sizeof(d));
    d.struct_size = sizeof(d);
    st = attnrt_runtime_diagnostic(runtime, i, &d);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    if (st == ATTNRT_OK) out.push_back({d.path ? d.path : "", d.message ? d.message : ""});
  }
  return out;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool ContainsI(const std::string& haystack, const std::string& needle) {
  return Lower(haystack).find(Lower(needle)) != std::string::npos;
}

std::string DefaultPluginDir() { return ATTNRT_TEST_DEFAULT_PLUGIN_DIR; }

}  // namespace attnrt_test
