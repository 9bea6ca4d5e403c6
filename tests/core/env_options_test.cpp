// Environment variables and runtime options: ATTNRT_NUM_THREADS / num_threads, ATTNRT_DEBUG / debug
// with a log callback. Variables are set in code (ScopedEnv) before the runtime is created.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

struct LogSink {
  std::mutex mutex;
  std::vector<std::pair<int32_t, std::string>> lines;

  static void Callback(void* user_data, int32_t level, const char* message) {
    auto* self = static_cast<LogSink*>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.emplace_back(level, message != nullptr ? message : "");
  }

  std::vector<std::string> Containing(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<std::string> out;
    for (const auto& [level, line] : lines) {
      if (line.find(needle) != std::string::npos) out.push_back(line);
    }
    return out;
  }

  std::string All() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string s;
    for (const auto& [level, line] : lines) s += "\n  [" + std::to_string(level) + "] " + line;
    return s;
  }
};

int32_t NumThreads(const attnrt_runtime* runtime) {
  int32_t n = -1;
  const attnrt_status st = attnrt_runtime_num_threads(runtime, &n);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return n;
}

class EnvOptionsTest : public testing::Test {
 protected:
  CleanAttnrtEnv env_;
  std::mt19937_64 rng_{TestSeed()};
};

TEST_F(EnvOptionsTest, DefaultThreadCountIsTheHardwareThreads) {
  ScopedEnv no_threads("ATTNRT_NUM_THREADS", std::nullopt);  // ATTNRT_TEST_NUM_THREADS may set it
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_EQ(NumThreads(runtime.get()), static_cast<int32_t>(hw));
  } else {
    EXPECT_GE(NumThreads(runtime.get()), 1);
  }
}

// The test runs' own thread count (scripts/test-arm.sh sets it): runtimes made with default
// options inside a CleanAttnrtEnv get it.
TEST_F(EnvOptionsTest, TestNumThreadsIsTheThreadCountOfDefaultRuntimes) {
  ScopedEnv test_threads("ATTNRT_TEST_NUM_THREADS", "3");
  CleanAttnrtEnv clean;
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  EXPECT_EQ(NumThreads(runtime.get()), 3);
}

TEST_F(EnvOptionsTest, NumThreadsFromEnvironment) {
  ScopedEnv threads("ATTNRT_NUM_THREADS", "3");
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  EXPECT_EQ(NumThreads(runtime.get()), 3);
}

TEST_F(EnvOptionsTest, NumThreadsOptionWinsOverEnvironment) {
  ScopedEnv threads("ATTNRT_NUM_THREADS", "3");
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = 2;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  EXPECT_EQ(NumThreads(runtime.get()), 2);
}

TEST_F(EnvOptionsTest, SingleThreadRuntimeRuns) {
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = 1;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  EXPECT_EQ(NumThreads(runtime.get()), 1);
  const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
  attnrt_op* op = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &op), ATTNRT_OK);
  OpPtr owner(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  PlanPtr plan = Plan(op, t);
  ASSERT_TRUE(plan);
  EXPECT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(EnvOptionsTest, NegativeThreadCountOptionIsRejected) {
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = -2;
  attnrt_runtime* runtime = nullptr;
  const attnrt_status st = attnrt_runtime_create(&options, &runtime);
  RuntimePtr owner(runtime);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(st);
  EXPECT_TRUE(ContainsI(attnrt_last_error_message(), "num_threads")) << attnrt_last_error_message();
}

// Plans one GQA op with distinctive shapes (B=1, S=T=7, N=3, Nkv=1, H=8: query width 24) twice and
// returns the kernel it chose.
std::string PlanTwice(attnrt_runtime* runtime, std::mt19937_64& rng) {
  const attnrt_gqa_attributes attributes = GqaAttributes(3, 1);
  attnrt_op* op = nullptr;
  EXPECT_EQ(attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op), ATTNRT_OK)
      << attnrt_last_error_message();
  OpPtr owner(op);
  SimpleGqa g;
  g.seq = 7;
  g.total = 7;
  g.num_heads = 3;
  g.kv_num_heads = 1;
  GqaTensors t = MakeGqaTensors(g, rng);
  PlanPtr plan = Plan(op, t);
  if (!plan) return "";
  PlanPtr again = Plan(op, t);
  return PlanKernel(plan.get());
}

void ExpectDebugLine(LogSink& sink, const std::string& kernel) {
  ASSERT_FALSE(kernel.empty());
  const auto lines = sink.Containing(kernel);
  ASSERT_GE(lines.size(), 1u) << "no log line names the chosen kernel " << kernel
                              << "; log:" << sink.All();
  // One line per planned op; a cache hit plans nothing new.
  EXPECT_LE(lines.size(), 2u) << sink.All();
  const std::string& line = lines.front();
  EXPECT_NE(line.find("gqa"), std::string::npos) << line;
  EXPECT_NE(line.find("float32"), std::string::npos) << line;
  // Shapes: the query width 24 (or N=3 when heads are printed instead of widths).
  EXPECT_TRUE(line.find("24") != std::string::npos || line.find("3") != std::string::npos)
      << "no query shape in: " << line;
  EXPECT_NE(line.find("7"), std::string::npos) << "no sequence length 7 in: " << line;
}

TEST_F(EnvOptionsTest, DebugFromEnvironmentLogsPlannedOps) {
  ScopedEnv debug("ATTNRT_DEBUG", "1");
  LogSink sink;
  attnrt_runtime_options options = DefaultOptions();
  options.log_fn = &LogSink::Callback;
  options.log_user_data = &sink;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  ExpectDebugLine(sink, PlanTwice(runtime.get(), rng_));
}

TEST_F(EnvOptionsTest, DebugOptionLogsPlannedOps) {
  LogSink sink;
  attnrt_runtime_options options = DefaultOptions();
  options.debug = 1;
  options.log_fn = &LogSink::Callback;
  options.log_user_data = &sink;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  ExpectDebugLine(sink, PlanTwice(runtime.get(), rng_));
}

TEST_F(EnvOptionsTest, DebugOptionOffWinsOverEnvironment) {
  ScopedEnv debug("ATTNRT_DEBUG", "1");
  LogSink sink;
  attnrt_runtime_options options = DefaultOptions();
  options.debug = 0;
  options.log_fn = &LogSink::Callback;
  options.log_user_data = &sink;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  const std::string kernel = PlanTwice(runtime.get(), rng_);
  ASSERT_FALSE(kernel.empty());
  for (const auto& line : sink.Containing(kernel)) {
    EXPECT_EQ(line.find("float32"), std::string::npos)
        << "a planned-op line with debug=0: " << line;
  }
}

TEST_F(EnvOptionsTest, NoDebugLinesByDefault) {
  LogSink sink;
  attnrt_runtime_options options = DefaultOptions();
  options.log_fn = &LogSink::Callback;
  options.log_user_data = &sink;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  const std::string kernel = PlanTwice(runtime.get(), rng_);
  ASSERT_FALSE(kernel.empty());
  for (const auto& line : sink.Containing(kernel)) {
    EXPECT_EQ(line.find("float32"), std::string::npos) << "a planned-op line by default: " << line;
  }
}

TEST_F(EnvOptionsTest, OptionsInitSetsDefaults) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  EXPECT_EQ(options.struct_size, ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE);
  EXPECT_EQ(options.plugin_paths, nullptr);
  EXPECT_EQ(options.num_plugin_paths, 0u);
  EXPECT_EQ(options.search_default_paths, 1);
  EXPECT_EQ(options.kernel, nullptr);
  EXPECT_EQ(options.disable, nullptr);
  EXPECT_EQ(options.debug, -1);
  EXPECT_EQ(options.num_threads, 0);
  EXPECT_EQ(options.log_fn, nullptr);
  EXPECT_EQ(options.log_user_data, nullptr);
  EXPECT_EQ(options.plan_cache_size, -1);
  EXPECT_EQ(options.executor, nullptr);
  EXPECT_EQ(options.executor_context, nullptr);
}

// The entry point of ABI 1.1 (programs built before plan_cache_size) writes nothing past the 1.1
// struct; the sized one nothing past the size it is given.
TEST_F(EnvOptionsTest, OptionsInitWritesNoMoreThanTheCallersStruct) {
  constexpr size_t kAbi11Size = offsetof(attnrt_runtime_options, log_user_data) + sizeof(void*);
  unsigned char buffer[sizeof(attnrt_runtime_options) + 16];
  std::memset(buffer, 0xAB, sizeof(buffer));
  auto* options = reinterpret_cast<attnrt_runtime_options*>(buffer);
  (attnrt_runtime_options_init)(options);
  EXPECT_EQ(options->struct_size, kAbi11Size);
  EXPECT_EQ(options->debug, -1);
  EXPECT_EQ(options->log_user_data, nullptr);
  for (size_t i = kAbi11Size; i < sizeof(buffer); ++i) {
    ASSERT_EQ(buffer[i], 0xAB) << "byte " << i << " past the ABI 1.1 struct was written";
  }
  // The runtime takes it, with the default plan cache.
  attnrt_runtime* runtime = nullptr;
  ASSERT_EQ(attnrt_runtime_create(options, &runtime), ATTNRT_OK) << attnrt_last_error_message();
  RuntimePtr owner(runtime);

  std::memset(buffer, 0xAB, sizeof(buffer));
  attnrt_runtime_options_init_sized(options, offsetof(attnrt_runtime_options, debug));
  EXPECT_EQ(options->struct_size, offsetof(attnrt_runtime_options, debug));
  EXPECT_EQ(options->disable, nullptr);
  for (size_t i = offsetof(attnrt_runtime_options, debug); i < sizeof(buffer); ++i) {
    ASSERT_EQ(buffer[i], 0xAB) << "byte " << i << " past the given size was written";
  }
}

// The header's macro compiles with nullptr in C++ (it sizes the type, not the argument) and the
// call is refused with a status; a size too small to hold struct_size likewise. Nothing is written.
TEST_F(EnvOptionsTest, OptionsInitRefusesNullAndTooSmallSizes) {
  EXPECT_EQ(attnrt_runtime_options_init(nullptr), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(ContainsI(attnrt_last_error_message(), "options")) << attnrt_last_error_message();
  EXPECT_TRUE(ContainsI(attnrt_last_error_message(), "NULL")) << attnrt_last_error_message();
  EXPECT_EQ(attnrt_runtime_options_init_sized(nullptr, sizeof(attnrt_runtime_options)),
            ATTNRT_ERROR_INVALID_ARGUMENT);

  unsigned char buffer[sizeof(attnrt_runtime_options)];
  std::memset(buffer, 0xAB, sizeof(buffer));
  auto* options = reinterpret_cast<attnrt_runtime_options*>(buffer);
  EXPECT_EQ(attnrt_runtime_options_init_sized(options, sizeof(size_t) - 1),
            ATTNRT_ERROR_ABI_MISMATCH);
  EXPECT_TRUE(ContainsI(attnrt_last_error_message(), "struct_size")) << attnrt_last_error_message();
  for (size_t i = 0; i < sizeof(buffer); ++i) ASSERT_EQ(buffer[i], 0xAB) << "byte " << i;

  EXPECT_EQ(attnrt_runtime_options_init(options), ATTNRT_OK);
  EXPECT_STREQ(attnrt_last_error_message(), "");
  EXPECT_EQ(options->struct_size, ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE);
}

}  // namespace
}  // namespace attnrt_test
