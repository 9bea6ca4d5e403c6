// libFuzzer target whose input is a plugin: each input is decoded with FuzzedDataProvider into the
// spec of the hostile fixture plugin (tests/core/plugins/hostile_plugin.cpp: its table fields and
// name, what attnrt_plugin_query, init, probe, kernel_count, kernel and shutdown do, and per kernel
// its name, op, device, priority, what supports, workspace_size and run return or throw, and the
// parallel_for calls they make, n and grain included). The spec is written to a file that the
// fixture reads when the runtime discovers it, through the normal discovery path: a runtime over
// the build's plugin folder, then the fixture's. Then one GroupQueryAttention call is planned,
// explained and run (pinned to the fixture's kernels half of the time).
//
// Invariants checked (a violation aborts with a description, which libFuzzer records as a crash):
//   - attnrt_runtime_create succeeds, and every plugin of the build's folder loads with exactly
//     the kernels it has alone;
//   - every registered kernel is named inside its plugin's prefix, no name twice, at most 1024
//     kernels per plugin, at most 20 diagnostics for the fixture's file, each with a message;
//   - every status is an attnrt_status, every failure has a message, and a failing call of a
//     fixture kernel names it; explain's statuses are attnrt_candidate_status values;
//   - nothing crashes, hangs or leaks (AddressSanitizer, libFuzzer's -timeout); a workspace the
//     runtime allocates is as large as promised (the fixture writes its first and last byte).
// PLUGIN_FUZZER_VERBOSE=1 prints each spec and the outcome.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"

// A workspace_size near SIZE_MAX that the runtime tries to allocate must come back as NULL (the
// runtime then reports OUT_OF_MEMORY), not as an AddressSanitizer report.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

constexpr const char* kHostileFile = "libattnrt_hostile.so";

std::string g_spec_path;
std::map<std::string, std::vector<std::string>> g_baseline;  // plugin -> kernels, build's folder
attnrt_runtime* g_baseline_runtime = nullptr;  // keeps the build's plugins loaded between inputs
bool g_verbose = false;

// Log lines of the runtime under test (a shutdown() that threw, a thread that did not start): kept
// off stderr, printed with PLUGIN_FUZZER_VERBOSE=1.
void Log(void* /*user_data*/, int32_t /*level*/, const char* message) {
  if (message == nullptr || message[0] == '\0') {
    std::fprintf(stderr, "plugin_fuzzer: invariant violated: a log line without text\n");
    std::abort();
  }
  if (g_verbose) std::fprintf(stderr, "plugin_fuzzer: log: %s\n", message);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "plugin_fuzzer: invariant violated: %s\n", what.c_str());
  std::abort();
}

std::string Action(FuzzedDataProvider& fdp, bool parallel_allowed) {
  static const char* const kKinds[] = {"std", "own", "foreign", "int"};
  const std::string kind = kKinds[fdp.ConsumeIntegralInRange<int>(0, 3)];
  switch (fdp.ConsumeIntegralInRange<int>(0, parallel_allowed ? 4 : 3)) {
    case 0:
      return "ok";
    case 1: {
      static const int64_t kStatuses[] = {0, 1, 5, 8, 9, 42, -1, INT32_MIN, INT32_MAX};
      const int64_t status =
          fdp.ConsumeBool() ? fdp.PickValueInArray(kStatuses) : fdp.ConsumeIntegral<int32_t>();
      return "status:" + std::to_string(status);
    }
    case 2:
      return "throw:" + kind;
    case 3:
      return "ok";
    default: {
      static const uint64_t kSizes[] = {0, 1, 7, 4096, SIZE_MAX, SIZE_MAX - 1, SIZE_MAX / 2 + 1};
      const uint64_t n = fdp.ConsumeBool() ? fdp.PickValueInArray(kSizes)
                                           : fdp.ConsumeIntegralInRange<uint64_t>(0, 100000);
      const uint64_t grain = fdp.ConsumeBool() ? fdp.PickValueInArray(kSizes)
                                               : fdp.ConsumeIntegralInRange<uint64_t>(0, 5000);
      std::string at = "none";
      const int where = fdp.ConsumeIntegralInRange<int>(0, 2);
      if (where == 1) at = "all";
      if (where == 2 && n > 0) at = std::to_string(fdp.ConsumeIntegralInRange<uint64_t>(0, n - 1));
      return "parallel:" + std::to_string(n) + ":" + std::to_string(grain) + ":" + at + ":" + kind;
    }
  }
}

std::string KernelName(FuzzedDataProvider& fdp, const std::string& plugin, size_t index) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return "cpu_x86.gqa.naive.scalar";  // another plugin's name
    case 1:
      return "cpu_x86.gqa.flash.avx2";
    case 2:
      return plugin + ".gqa.same";  // twice, when two kernels draw it
    case 3:
      return plugin;  // the prefix alone
    case 4:
      return "other." + plugin + ".x";
    case 5:
      return "bad!name";
    default:
      return plugin + ".gqa.k" + std::to_string(index);
  }
}

std::string MakeSpec(FuzzedDataProvider& fdp, std::string* plugin_name, bool* pinned) {
  static const char* const kNames[] = {"hostile", "h", "cpu_x86", "sparse_mla", "a.b", "x-y_z"};
  std::string spec;
  *plugin_name = fdp.ConsumeIntegralInRange<int>(0, 9) == 0 ? std::string(300, 'n')
                                                            : fdp.PickValueInArray(kNames);
  spec += "name " + *plugin_name + "\n";
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    spec += "abi_major " + std::to_string(fdp.ConsumeIntegral<uint32_t>()) + "\n";
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    spec += "struct_size " + std::to_string(fdp.ConsumeIntegralInRange<uint64_t>(0, 128)) + "\n";
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    spec += "query " + std::string(fdp.ConsumeBool() ? "null" : "throw:own") + "\n";
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) spec += "init " + Action(fdp, true) + "\n";
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    spec += "probe " + (fdp.ConsumeBool() ? "unavailable" : Action(fdp, true)) + "\n";
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) spec += "shutdown " + Action(fdp, true) + "\n";
  if (fdp.ConsumeIntegralInRange<int>(0, 5) == 0) {
    static const uint64_t kCounts[] = {0, 1, 3, 1023, 1024, 1025, 5000, SIZE_MAX};
    spec += "kernel_count " +
            (fdp.ConsumeIntegralInRange<int>(0, 5) == 0
                 ? std::string("throw:own")
                 : std::to_string(fdp.PickValueInArray(kCounts))) +
            "\n";
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    spec += "kernel_throw_at " + std::to_string(fdp.ConsumeIntegralInRange<int>(0, 8)) + "\n";
  }
  const size_t kernels = fdp.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < kernels; ++i) {
    static const int32_t kOps[] = {
        ATTNRT_OP_GQA, ATTNRT_OP_GQA, ATTNRT_OP_PAGED_GQA, ATTNRT_OP_SPARSE_MLA, -1, 99};
    static const int32_t kDevices[] = {ATTNRT_DEVICE_CPU, ATTNRT_DEVICE_CPU, ATTNRT_DEVICE_CUDA,
                                       -5};
    spec += "kernel " + KernelName(fdp, *plugin_name, i);
    spec += " op=" + std::to_string(fdp.PickValueInArray(kOps));
    spec += " device=" + std::to_string(fdp.PickValueInArray(kDevices));
    spec += " priority=" + std::to_string(fdp.ConsumeIntegral<int32_t>());
    if (fdp.ConsumeBool()) spec += " supports=" + Action(fdp, true);
    switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        spec += " workspace=" + std::to_string(fdp.ConsumeIntegralInRange<uint64_t>(0, 1 << 20));
        break;
      case 1:  // within an alignment of SIZE_MAX: wrapped when rounded up
        spec +=
            " workspace=" + std::to_string(SIZE_MAX - fdp.ConsumeIntegralInRange<uint64_t>(0, 255));
        break;
      case 2:  // far more than any machine has
        spec +=
            " workspace=" + std::to_string((uint64_t{1} << 62) + fdp.ConsumeIntegral<uint32_t>());
        break;
      case 3:
        spec += " workspace=throw:" + std::string(fdp.ConsumeBool() ? "own" : "foreign");
        break;
      default:
        break;
    }
    if (fdp.ConsumeBool()) spec += " run=" + Action(fdp, true);
    spec += "\n";
  }
  *pinned = fdp.ConsumeBool();
  return spec;
}

std::string FileName(const char* path) {
  const std::string p = path != nullptr ? path : "";
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void CheckStatus(const char* call, attnrt_status status) {
  if (status < ATTNRT_OK || status > ATTNRT_ERROR_INTERNAL) {
    Fail(std::string(call) + " returned " + std::to_string(status) + ", not an attnrt_status");
  }
  if (status != ATTNRT_OK && attnrt_last_error_message()[0] == '\0') {
    Fail(std::string(call) + " failed with " + attnrt_status_name(status) + " and no message");
  }
}

// The plugins and their kernels; checks the naming invariants on the way.
std::map<std::string, std::vector<std::string>> Plugins(attnrt_runtime* runtime,
                                                        std::string* fixture_name) {
  std::map<std::string, std::vector<std::string>> plugins;
  std::set<std::string> names;
  size_t count = 0;
  attnrt_runtime_plugin_count(runtime, &count);
  for (size_t i = 0; i < count; ++i) {
    attnrt_plugin_info info{};
    info.struct_size = sizeof(info);
    CheckStatus("attnrt_runtime_plugin_info", attnrt_runtime_plugin_info(runtime, i, &info));
    const std::string name = info.name;
    if (FileName(info.path) == kHostileFile) *fixture_name = name;
    if (info.num_kernels > 1024) Fail("plugin " + name + " registered more than 1024 kernels");
    std::vector<std::string>& kernels = plugins[name + "@" + FileName(info.path)];
    for (size_t k = 0; k < info.num_kernels; ++k) {
      attnrt_kernel_info kernel{};
      kernel.struct_size = sizeof(kernel);
      CheckStatus("attnrt_runtime_plugin_kernel",
                  attnrt_runtime_plugin_kernel(runtime, i, k, &kernel));
      const std::string kernel_name = kernel.name;
      if (kernel_name.rfind(name + ".", 0) != 0 || kernel_name.size() <= name.size() + 1) {
        Fail("kernel " + kernel_name + " of plugin " + name + " is outside its prefix");
      }
      if (!names.insert(kernel_name).second) Fail("kernel " + kernel_name + " registered twice");
      kernels.push_back(kernel_name);
    }
  }
  return plugins;
}

void RunGqa(attnrt_runtime* runtime, const std::string& fixture_name) {
  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  attributes.num_heads = 2;
  attributes.kv_num_heads = 1;
  attnrt_op* op = nullptr;
  attnrt_status status = attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op);
  CheckStatus("attnrt_op_create", status);
  if (status != ATTNRT_OK) return;
  // query (1,1,16), key/value (1,1,8), seqlens_k [0], total_sequence_length 1 -> output (1,1,16).
  const attnrt_dtype f32 = ATTNRT_DTYPE_FLOAT32;
  const attnrt_dtype i32 = ATTNRT_DTYPE_INT32;
  const attnrt_device cpu{ATTNRT_DEVICE_CPU, 0};
  std::vector<float> query(16, 0.5f), key(8, 0.25f), value(8, 1.0f), output(16, 0.0f);
  int32_t seqlens_k = 0, total = 1;
  const int64_t q_shape[] = {1, 1, 16}, kv_shape[] = {1, 1, 8}, one[] = {1};
  const attnrt_tensor q{query.data(), cpu, 3, f32, q_shape, nullptr, 0};
  const attnrt_tensor k{key.data(), cpu, 3, f32, kv_shape, nullptr, 0};
  const attnrt_tensor v{value.data(), cpu, 3, f32, kv_shape, nullptr, 0};
  const attnrt_tensor s{&seqlens_k, cpu, 1, i32, one, nullptr, 0};
  const attnrt_tensor t{&total, cpu, 1, i32, one, nullptr, 0};
  const attnrt_tensor o{output.data(), cpu, 3, f32, q_shape, nullptr, 0};
  const attnrt_tensor* inputs[ATTNRT_GQA_NUM_INPUTS] = {};
  inputs[ATTNRT_GQA_INPUT_QUERY] = &q;
  inputs[ATTNRT_GQA_INPUT_KEY] = &k;
  inputs[ATTNRT_GQA_INPUT_VALUE] = &v;
  inputs[ATTNRT_GQA_INPUT_SEQLENS_K] = &s;
  inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &t;
  const attnrt_tensor* outputs[ATTNRT_GQA_NUM_OUTPUTS] = {};
  outputs[ATTNRT_GQA_OUTPUT_OUTPUT] = &o;

  attnrt_explanation* explanation = nullptr;
  status = attnrt_op_explain(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, ATTNRT_GQA_NUM_OUTPUTS,
                             &explanation);
  CheckStatus("attnrt_op_explain", status);
  if (status == ATTNRT_OK) {
    size_t count = 0;
    attnrt_explanation_count(explanation, &count);
    for (size_t i = 0; i < count; ++i) {
      attnrt_candidate candidate{};
      candidate.struct_size = sizeof(candidate);
      CheckStatus("attnrt_explanation_candidate",
                  attnrt_explanation_candidate(explanation, i, &candidate));
      if (candidate.status < ATTNRT_CANDIDATE_SELECTED ||
          candidate.status > ATTNRT_CANDIDATE_WRONG_DEVICE) {
        Fail("candidate status " + std::to_string(candidate.status) + " out of range");
      }
    }
    attnrt_explanation_destroy(explanation);
  }
  attnrt_plan* plan = nullptr;
  status =
      attnrt_op_plan(op, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, ATTNRT_GQA_NUM_OUTPUTS, &plan);
  CheckStatus("attnrt_op_plan", status);
  if (status == ATTNRT_OK) {
    attnrt_plan_info info{};
    info.struct_size = sizeof(info);
    CheckStatus("attnrt_plan_get_info", attnrt_plan_get_info(plan, &info));
    const std::string kernel = info.kernel != nullptr ? info.kernel : "";
    status = attnrt_plan_run(plan, inputs, ATTNRT_GQA_NUM_INPUTS, outputs, ATTNRT_GQA_NUM_OUTPUTS,
                             nullptr, 0, nullptr);
    CheckStatus("attnrt_plan_run", status);
    const std::string message = attnrt_last_error_message();
    if (status != ATTNRT_OK && !fixture_name.empty() && kernel.rfind(fixture_name + ".", 0) == 0 &&
        message.find(kernel) == std::string::npos) {
      Fail("run of " + kernel + " failed without naming it: " + message);
    }
    if (g_verbose) {
      std::fprintf(stderr, "plugin_fuzzer: ran %s: %s %s\n", kernel.c_str(),
                   attnrt_status_name(status), message.c_str());
    }
    attnrt_plan_release(plan);
  } else if (g_verbose) {
    std::fprintf(stderr, "plugin_fuzzer: plan: %s\n", attnrt_last_error_message());
  }
  attnrt_op_destroy(op);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  g_verbose = std::getenv("PLUGIN_FUZZER_VERBOSE") != nullptr;
  g_spec_path = "/tmp/attnrt_plugin_fuzzer_" + std::to_string(getpid()) + ".spec";
  unsetenv("ATTNRT_TEST_HOSTILE_SPEC");
  const char* paths[] = {ATTNRT_FUZZ_PLUGIN_DIR};
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  options.num_threads = 1;
  if (attnrt_runtime_create(&options, &g_baseline_runtime) != ATTNRT_OK) {
    std::fprintf(stderr, "plugin_fuzzer: runtime: %s\n", attnrt_last_error_message());
    std::abort();
  }
  std::string unused;
  g_baseline = Plugins(g_baseline_runtime, &unused);
  if (g_baseline.empty()) {
    std::fprintf(stderr, "plugin_fuzzer: no plugin in %s\n", ATTNRT_FUZZ_PLUGIN_DIR);
    std::abort();
  }
  setenv("ATTNRT_TEST_HOSTILE_SPEC", g_spec_path.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  std::string plugin_name;
  bool pinned = false;
  const int32_t threads = fdp.ConsumeIntegralInRange<int32_t>(1, 4);
  const std::string spec = MakeSpec(fdp, &plugin_name, &pinned);
  std::ofstream(g_spec_path, std::ios::trunc) << spec;
  if (g_verbose) std::fprintf(stderr, "plugin_fuzzer: spec:\n%s", spec.c_str());

  // The build's plugins first: each must load as it does alone, whatever the fixture does.
  const char* paths[] = {ATTNRT_FUZZ_PLUGIN_DIR, ATTNRT_FUZZ_HOSTILE_DIR};
  const std::string pin = plugin_name + ".*";
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.plugin_paths = paths;
  options.num_plugin_paths = 2;
  options.search_default_paths = 0;
  options.num_threads = threads;
  options.log_fn = Log;
  if (pinned) options.kernel = pin.c_str();
  attnrt_runtime* runtime = nullptr;
  const attnrt_status created = attnrt_runtime_create(&options, &runtime);
  if (created != ATTNRT_OK) {
    Fail(std::string("attnrt_runtime_create failed: ") + attnrt_last_error_message());
  }
  std::string fixture_name;
  const auto plugins = Plugins(runtime, &fixture_name);
  for (const auto& [plugin, kernels] : g_baseline) {
    const auto it = plugins.find(plugin);
    if (it == plugins.end()) Fail("plugin " + plugin + " did not load beside the fixture");
    if (it->second != kernels) Fail("plugin " + plugin + " lost kernels beside the fixture");
  }
  size_t num_diagnostics = 0, fixture_diagnostics = 0;
  attnrt_runtime_diagnostic_count(runtime, &num_diagnostics);
  for (size_t i = 0; i < num_diagnostics; ++i) {
    attnrt_diagnostic diagnostic{};
    diagnostic.struct_size = sizeof(diagnostic);
    CheckStatus("attnrt_runtime_diagnostic", attnrt_runtime_diagnostic(runtime, i, &diagnostic));
    if (diagnostic.message == nullptr || diagnostic.message[0] == '\0') {
      Fail("diagnostic without a message");
    }
    if (FileName(diagnostic.path) == kHostileFile) ++fixture_diagnostics;
    if (g_verbose) std::fprintf(stderr, "plugin_fuzzer: %s\n", diagnostic.message);
  }
  if (fixture_diagnostics > 20) {
    Fail(std::to_string(fixture_diagnostics) + " diagnostics for the fixture's file");
  }
  RunGqa(runtime, fixture_name);
  attnrt_runtime_destroy(runtime);
  return 0;
}
