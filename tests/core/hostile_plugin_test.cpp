// Hostile plugins (tests/core/plugins/hostile_plugin.cpp, driven by a spec file): exceptions out of
// every function of the plugin table and out of parallel_for callbacks, statuses outside
// attnrt_status, absurd kernel counts and workspace sizes, kernel names of another plugin. In each
// case the host survives, the plugin file is named in a diagnostic or the failing kernel in the
// status message, and every other plugin still loads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

namespace fs = std::filesystem;

const std::string kHostileDir = ATTNRT_TEST_PLUGINS_HOSTILE;
constexpr const char* kFile = "libattnrt_hostile.so";
constexpr const char* kKernel = "hostile.gqa.k";

struct Logged {
  std::vector<std::string> lines;
  static void Sink(void* user_data, int32_t /*level*/, const char* message) {
    static_cast<Logged*>(user_data)->lines.push_back(message);
  }
  bool Contains(const std::string& a, const std::string& b) const {
    for (const auto& line : lines) {
      if (ContainsI(line, a) && ContainsI(line, b)) return true;
    }
    return false;
  }
};

class HostilePluginTest : public testing::Test {
 protected:
  // Writes the spec the fixture reads at its next attnrt_plugin_query.
  void Spec(const std::string& text) {
    spec_path_ =
        (fs::temp_directory_path() / ("attnrt_hostile_spec_" + std::to_string(getpid()) + ".txt"))
            .string();
    std::ofstream(spec_path_) << text;
    spec_env_.emplace("ATTNRT_TEST_HOSTILE_SPEC", spec_path_);
  }
  void TearDown() override {
    if (!spec_path_.empty()) fs::remove(spec_path_);
  }

  // The hostile folder first, then (when asked) the default plugins.
  RuntimePtr Make(bool with_default_plugins = true, int32_t num_threads = 4) {
    path_ = kHostileDir.c_str();
    attnrt_runtime_options options = DefaultOptions();
    options.plugin_paths = &path_;
    options.num_plugin_paths = 1;
    options.search_default_paths = with_default_plugins ? 1 : 0;
    options.num_threads = num_threads;
    options.log_fn = Logged::Sink;
    options.log_user_data = &log_;
    return CreateRuntime(options);
  }

  std::vector<Diagnostic> HostileDiagnostics(const attnrt_runtime* runtime) {
    std::vector<Diagnostic> mine;
    for (const auto& d : ListDiagnostics(runtime)) {
      if (fs::path(d.path).filename() == kFile) mine.push_back(d);
    }
    return mine;
  }

  // Discovery skipped the hostile plugin with one diagnostic holding every word of `words`, and
  // the CPU plugin of this build loaded.
  void ExpectSkipped(const std::vector<std::string>& words) {
    RuntimePtr runtime = Make();
    ASSERT_TRUE(runtime);
    bool cpu_loaded = false;
    for (const auto& p : ListPlugins(runtime.get())) {
      EXPECT_NE(fs::path(p.path).filename(), kFile)
          << "the hostile plugin was loaded as " << p.name;
      cpu_loaded = cpu_loaded || (p.name == ATTNRT_TEST_CPU_PLUGIN && !p.kernels.empty());
    }
    EXPECT_TRUE(cpu_loaded) << ATTNRT_TEST_CPU_PLUGIN " did not load beside the hostile plugin";
    const auto mine = HostileDiagnostics(runtime.get());
    ASSERT_EQ(mine.size(), 1u);
    for (const auto& word : words) {
      EXPECT_TRUE(ContainsI(mine[0].message, word))
          << "diagnostic \"" << mine[0].message << "\" lacks \"" << word << "\"";
    }
  }

  // Plans the plain float32 GQA call on a runtime of the hostile plugin alone; returns the status
  // and leaves the message in *message (and the plan in plan_ when it succeeded).
  attnrt_status PlanGqa(attnrt_runtime* runtime, std::string* message) {
    const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
    attnrt_op* op = nullptr;
    attnrt_status st = attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op);
    if (st != ATTNRT_OK) {
      *message = LastError(st);
      return st;
    }
    op_.reset(op);
    tensors_ = MakeGqaTensors(SimpleGqa{}, rng_);
    attnrt_plan* plan = nullptr;
    st = attnrt_op_plan(op, tensors_.Inputs(), ATTNRT_GQA_NUM_INPUTS, tensors_.Outputs(),
                        ATTNRT_GQA_NUM_OUTPUTS, &plan);
    *message = st == ATTNRT_OK ? "" : attnrt_last_error_message();
    plan_.reset(plan);
    return st;
  }

  // Plans and runs (workspace allocated by the runtime); returns the run's status and message.
  attnrt_status RunGqa(const std::string& spec, std::string* message, int32_t threads = 4) {
    Spec(spec);
    runtime_ = Make(/*with_default_plugins=*/false, threads);
    if (!runtime_) return ATTNRT_ERROR_INTERNAL;
    const attnrt_status planned = PlanGqa(runtime_.get(), message);
    EXPECT_EQ(planned, ATTNRT_OK) << *message;
    if (planned != ATTNRT_OK) return planned;
    const attnrt_status st =
        attnrt_plan_run(plan_.get(), tensors_.Inputs(), ATTNRT_GQA_NUM_INPUTS, tensors_.Outputs(),
                        ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr);
    *message = st == ATTNRT_OK ? "" : attnrt_last_error_message();
    return st;
  }

  CleanAttnrtEnv env_;
  std::optional<ScopedEnv> spec_env_;
  std::string spec_path_;
  const char* path_ = nullptr;
  Logged log_;
  std::mt19937_64 rng_{TestSeed()};
  RuntimePtr runtime_;
  OpPtr op_;
  PlanPtr plan_;
  GqaTensors tensors_;
};

// ---- exceptions during discovery --------------------------------------------------------------

struct ThrowCase {
  const char* spec;
  std::vector<std::string> words;  // the diagnostic names the function and the exception
};

class DiscoveryThrowTest : public HostilePluginTest,
                           public testing::WithParamInterface<ThrowCase> {};

TEST_P(DiscoveryThrowTest, PluginIsSkippedWithADiagnosticNamingTheFile) {
  Spec(GetParam().spec);
  ExpectSkipped(GetParam().words);
}

INSTANTIATE_TEST_SUITE_P(
    Functions, DiscoveryThrowTest,
    testing::Values(
        ThrowCase{"query throw:std\n", {"attnrt_plugin_query", "runtime_error", "hostile"}},
        ThrowCase{"query throw:own\n", {"attnrt_plugin_query", "OwnError", "hostile"}},
        ThrowCase{"init throw:std\n", {"init()", "std::runtime_error", "hostile init"}},
        ThrowCase{"init throw:own\n", {"init()", "OwnError", "hostile init"}},
        ThrowCase{"init throw:foreign\n", {"init()", "ForeignError", "not a std::exception"}},
        ThrowCase{"init throw:int\n", {"init()", "type int"}},
        ThrowCase{"probe throw:own\n", {"probe()", "hostile probe"}},
        ThrowCase{"kernel hostile.gqa.k\nkernel_count throw:own\n",
                  {"kernel_count()", "hostile kernel_count"}},
        ThrowCase{"kernel hostile.gqa.k\nkernel hostile.gqa.l\nkernel_throw_at 1\n",
                  {"kernel #1", "hostile kernel", "skipped"}},
        // A callback that throws on every range, so on pool workers as well as on the caller.
        ThrowCase{"init parallel:4096:1:all:own\n",
                  {"init()", "parallel_for callback", "OwnError", "hostile callback"}},
        ThrowCase{"probe parallel:4096:1:4000:std\n",
                  {"probe()", "parallel_for callback", "hostile callback"}},
        // A status outside attnrt_status is named as such (it was cast to the enum).
        ThrowCase{"init status:42\n", {"init failed", "42", "not an attnrt_status"}},
        // A failure after init also runs shutdown(), whose exception is reported with it.
        ThrowCase{"probe status:8\nshutdown throw:own\n", {"probe failed", "hostile shutdown"}}));

TEST_F(HostilePluginTest, ShutdownThatThrowsAtDestroyIsLogged) {
  const std::string failure = RunInChild(60, [&](std::string*) {
    Spec("kernel hostile.gqa.k\nshutdown throw:own\n");
    RuntimePtr runtime = Make(false);
    if (!runtime || ListPlugins(runtime.get()).size() != 1) return 2;
    runtime.reset();
    return log_.Contains("shutdown()", "hostile shutdown") ? 0 : 3;
  });
  EXPECT_EQ(failure, "") << "2: the plugin did not load, 3: no log line names shutdown()";
}

// A plugin named like one loaded before it is skipped once its query has named it: its init() and
// probe() never run (here they would throw, and the diagnostic would say so).
TEST_F(HostilePluginTest, DuplicateNameIsSkippedBeforeInitAndProbe) {
  Spec("name " ATTNRT_TEST_CPU_PLUGIN "\ninit throw:std\nprobe throw:std\n");
  const std::string cpu_dir = DefaultPluginDir();
  const char* paths[] = {cpu_dir.c_str(), kHostileDir.c_str()};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 2;
  options.search_default_paths = 0;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  int named_cpu = 0;
  for (const auto& p : ListPlugins(runtime.get())) {
    EXPECT_NE(fs::path(p.path).filename(), kFile) << "the duplicate was loaded as " << p.name;
    named_cpu += p.name == ATTNRT_TEST_CPU_PLUGIN ? 1 : 0;
  }
  EXPECT_EQ(named_cpu, 1);
  const auto mine = HostileDiagnostics(runtime.get());
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_TRUE(ContainsI(mine[0].message, "duplicate plugin name '" ATTNRT_TEST_CPU_PLUGIN "'"))
      << mine[0].message;
  EXPECT_TRUE(ContainsI(mine[0].message, "before init()")) << mine[0].message;
  EXPECT_FALSE(ContainsI(mine[0].message, "hostile init")) << mine[0].message;
}

// ---- absurd tables
// -------------------------------------------------------------------------------

TEST_F(HostilePluginTest, HugeKernelCountIsCappedAndDiagnosticsBounded) {
  // kernel_count() = SIZE_MAX with kernel() NULL: discovery stops at the cap, quickly.
  const std::string failure = RunInChild(30, [&](std::string*) {
    Spec("kernel_count 18446744073709551615\nkernel hostile.gqa.k\n");
    RuntimePtr runtime = Make(false);
    if (!runtime) return 2;
    const auto mine = HostileDiagnostics(runtime.get());
    if (mine.size() > 20) return 3;
    bool cap_named = false;
    for (const auto& d : mine) cap_named = cap_named || ContainsI(d.message, "1024");
    if (!cap_named) return 4;
    const auto plugins = ListPlugins(runtime.get());
    if (plugins.size() != 1 || plugins[0].kernels.size() != 1) return 5;
    return 0;
  });
  EXPECT_EQ(failure, "") << "3: too many diagnostics, 4: the cap is not named, 5: the valid kernel "
                            "is not registered";
}

TEST_F(HostilePluginTest, KernelNamedOutsideItsPluginPrefixIsRefused) {
  // "shadow" registers a kernel name of the CPU plugin; it is searched first, so before the prefix
  // rule it took the name and the real kernel was refused as a duplicate.
  Spec("name shadow\nkernel " ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar\nkernel shadow.gqa.own\n");
  RuntimePtr runtime = Make();
  ASSERT_TRUE(runtime);
  bool real_kernel = false;
  for (const auto& p : ListPlugins(runtime.get())) {
    for (const auto& k : p.kernels) {
      if (k.name == ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar") {
        EXPECT_EQ(k.plugin, ATTNRT_TEST_CPU_PLUGIN);
        real_kernel = true;
      }
      if (p.name == "shadow") {
        EXPECT_EQ(k.name, "shadow.gqa.own");
      }
    }
  }
  EXPECT_TRUE(real_kernel);
  const auto mine = HostileDiagnostics(runtime.get());
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_TRUE(ContainsI(mine[0].message, "prefix")) << mine[0].message;
  EXPECT_TRUE(ContainsI(mine[0].message, ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"));
  for (const auto& d : ListDiagnostics(runtime.get())) {
    EXPECT_FALSE(ContainsI(d.message, "duplicate")) << d.path << ": " << d.message;
  }
}

// ---- calls at plan and run time
// --------------------------------------------------------------------

struct RunCase {
  const char* kernel_fields;
  attnrt_status expected;
  std::vector<std::string> words;
};

class RunStatusTest : public HostilePluginTest, public testing::WithParamInterface<RunCase> {};

// In a child: before the fixes, some of these ended in std::terminate, a wild write or 2^64
// callbacks.
TEST_P(RunStatusTest, KernelFailureBecomesAStatusNamingTheKernel) {
  std::string output;
  const std::string failure = RunInChild(
      60,
      [&](std::string* out) {
        std::string message;
        const attnrt_status st = RunGqa(
            std::string("kernel ") + kKernel + " " + GetParam().kernel_fields + "\n", &message);
        *out = std::to_string(static_cast<int>(st)) + "\n" + message;
        return 0;
      },
      &output);
  ASSERT_EQ(failure, "");
  const size_t newline = output.find('\n');
  ASSERT_NE(newline, std::string::npos) << output;
  const int st = std::stoi(output.substr(0, newline));
  const std::string message = output.substr(newline + 1);
  EXPECT_EQ(st, GetParam().expected) << message;
  for (const auto& word : GetParam().words) {
    EXPECT_TRUE(ContainsI(message, word)) << "\"" << message << "\" lacks \"" << word << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, RunStatusTest,
    testing::Values(
        RunCase{"run=status:42", ATTNRT_ERROR_INTERNAL, {kKernel, "42", "not an attnrt_status"}},
        RunCase{"run=status:-1", ATTNRT_ERROR_INTERNAL, {kKernel, "-1", "hostile run status"}},
        RunCase{"run=status:9", ATTNRT_ERROR_INTERNAL, {kKernel, "9 (not an attnrt_status)"}},
        // A defined code is passed on with the kernel's message.
        RunCase{"run=status:5", ATTNRT_ERROR_OUT_OF_MEMORY, {kKernel, "hostile run status 5"}},
        RunCase{"run=throw:own", ATTNRT_ERROR_INTERNAL, {kKernel, "OwnError", "hostile run"}},
        RunCase{"run=throw:foreign", ATTNRT_ERROR_INTERNAL, {kKernel, "ForeignError"}},
        RunCase{"run=parallel:4096:1:all:own",
                ATTNRT_ERROR_INTERNAL,
                {kKernel, "parallel_for callback", "OwnError", "hostile callback"}},
        RunCase{"run=parallel:4096:1:4095:std",
                ATTNRT_ERROR_INTERNAL,
                {kKernel, "parallel_for callback", "hostile callback"}},
        // parallel_for with n = SIZE_MAX and grain 0 returns after a few ranges.
        RunCase{"run=parallel:18446744073709551615:0:none:std", ATTNRT_OK, {}},
        // A workspace within one alignment of SIZE_MAX wrapped to a 0-byte buffer when rounded.
        RunCase{
            "workspace=18446744073709551615", ATTNRT_ERROR_OUT_OF_MEMORY, {"workspace", kKernel}},
        RunCase{
            "workspace=18446744073709551605", ATTNRT_ERROR_OUT_OF_MEMORY, {"workspace", kKernel}},
        RunCase{"workspace=100", ATTNRT_OK, {}}));

TEST_F(HostilePluginTest, CallbackExceptionOnTheCallingThreadFailsTheRunWithItsMessage) {
  std::string message;
  ASSERT_EQ(RunGqa(std::string("kernel ") + kKernel + " run=parallel:64:1:all:own\n", &message, 1),
            ATTNRT_ERROR_INTERNAL);
  EXPECT_TRUE(ContainsI(message, "hostile callback")) << message;
}

TEST_F(HostilePluginTest, SupportsOutsideZeroOrOneIsAMalfunctionNamingTheKernel) {
  Spec(std::string("kernel ") + kKernel + " supports=status:42\n");
  runtime_ = Make(false);
  ASSERT_TRUE(runtime_);
  std::string message;
  EXPECT_EQ(PlanGqa(runtime_.get(), &message), ATTNRT_ERROR_INTERNAL) << message;
  EXPECT_TRUE(ContainsI(message, kKernel)) << message;
  EXPECT_TRUE(ContainsI(message, "returned 42")) << message;
}

TEST_F(HostilePluginTest, SupportsThatThrowsFallsThroughToTheNextKernel) {
  Spec("kernel hostile.gqa.a priority=2000 supports=throw:own\nkernel hostile.gqa.b\n");
  runtime_ = Make(false);
  ASSERT_TRUE(runtime_);
  std::string message;
  ASSERT_EQ(PlanGqa(runtime_.get(), &message), ATTNRT_OK) << message;
  EXPECT_EQ(PlanKernel(plan_.get()), "hostile.gqa.b");
  const auto candidates = Explain(op_.get(), tensors_);
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].kernel, "hostile.gqa.a");
  EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_DECLINED);
  EXPECT_TRUE(ContainsI(candidates[0].reason, "hostile supports")) << candidates[0].reason;
  EXPECT_TRUE(ContainsI(candidates[0].reason, "OwnError")) << candidates[0].reason;
}

TEST_F(HostilePluginTest, WorkspaceSizeThatThrowsFailsThePlanWithItsMessage) {
  Spec(std::string("kernel ") + kKernel + " workspace=throw:own\n");
  runtime_ = Make(false);
  ASSERT_TRUE(runtime_);
  std::string message;
  EXPECT_EQ(PlanGqa(runtime_.get(), &message), ATTNRT_ERROR_INTERNAL) << message;
  EXPECT_TRUE(ContainsI(message, "workspace_size()")) << message;
  EXPECT_TRUE(ContainsI(message, "hostile workspace_size")) << message;
}

}  // namespace
}  // namespace attnrt_test
