// A runtime whose parallel work runs on the host's threads (attnrt_runtime_options.executor,
// ABI 1.3): the options are checked, the runtime starts no thread and reports the team size, and a
// GroupQueryAttention run gives bitwise the output of a runtime with its own pool of as many
// threads, whatever the executor's mapping of members to threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/executors.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

// Members out of order, each twice, with indices out of range (negative, team_size and beyond)
// between them, on more threads than the team: fn must ignore the index and claim work.
void UnrulyExecutor(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  auto* log = static_cast<ExecutorLog*>(context);
  log->Called(team_size);
  std::vector<std::thread> threads;
  for (int32_t t = 0; t < 2 * team_size + 1; ++t) {
    threads.emplace_back([=] {
      fn(user_data, -1 - t);
      fn(user_data, team_size - 1 - t % team_size);
      fn(user_data, team_size + t);
    });
  }
  fn(user_data, 0);
  for (auto& t : threads) t.join();
  fn(user_data, 0);
}

// What a re-entrant executor runs before a member's work: a whole GQA plan on the same runtime.
struct ReentrantContext {
  ExecutorLog log;
  attnrt_plan* plan = nullptr;
  GqaTensors* tensors = nullptr;
  std::atomic<bool> started{false};
  std::atomic<int> nested_runs{0};
  std::atomic<int> nested_failures{0};
};

// The first member of the first call runs another plan of the runtime first (on the member's
// thread, itself calling this executor, while the other members work), then its share of the
// work.
void ReentrantExecutor(void* context, int32_t team_size, attnrt_team_fn fn, void* user_data) {
  auto* c = static_cast<ReentrantContext*>(context);
  c->log.calls.fetch_add(1);
  c->log.team_size.store(team_size);
  auto member = [=](int32_t m) {
    if (m == 1 && c->plan != nullptr && !c->started.exchange(true)) {
      if (RunPlan(c->plan, *c->tensors) != ATTNRT_OK) c->nested_failures.fetch_add(1);
      c->nested_runs.fetch_add(1);
    }
    fn(user_data, m);
  };
  std::vector<std::thread> threads;
  for (int32_t m = 1; m < team_size; ++m) threads.emplace_back(member, m);
  member(0);
  for (auto& t : threads) t.join();
}

// Must never be called (a field the runtime should not have read).
void FailingExecutor(void* /*context*/, int32_t /*team_size*/, attnrt_team_fn /*fn*/,
                     void* /*user_data*/) {
  ADD_FAILURE() << "an executor the runtime should not have read was called";
}

int32_t NumThreads(const attnrt_runtime* runtime) {
  int32_t threads = 0;
  const attnrt_status st = attnrt_runtime_num_threads(runtime, &threads);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return threads;
}

class ExecutorTest : public ::testing::Test {
 protected:
  CleanAttnrtEnv env_;
};

TEST_F(ExecutorTest, OptionsInitLeavesNoExecutor) {
  attnrt_runtime_options options;
  std::memset(&options, 0xAB, sizeof(options));
  attnrt_runtime_options_init(&options);
  EXPECT_EQ(options.executor, nullptr);
  EXPECT_EQ(options.executor_context, nullptr);
}

TEST_F(ExecutorTest, ContextWithoutExecutorIsRejected) {
  attnrt_runtime_options options = DefaultOptions();
  int context = 0;
  options.executor_context = &context;
  attnrt_runtime* runtime = nullptr;
  const attnrt_status st = attnrt_runtime_create(&options, &runtime);
  RuntimePtr owner(runtime);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(st);
  EXPECT_EQ(runtime, nullptr);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find("options.executor_context"), std::string::npos) << message;
  EXPECT_NE(message.find("expected NULL when options.executor is NULL"), std::string::npos)
      << message;
  EXPECT_NE(message.find("got a pointer"), std::string::npos) << message;
}

// A caller built against ABI 1.2 passes a struct that ends before executor: what lies beyond is
// not read (an executor there would run the work, a context alone would be rejected).
TEST_F(ExecutorTest, OptionsOfAbi12KeepTheRuntimesOwnPool) {
  constexpr size_t kAbi12Size = offsetof(attnrt_runtime_options, executor);
  attnrt_runtime_options options = DefaultOptions();
  options.struct_size = kAbi12Size;
  options.num_threads = 2;
  options.executor = FailingExecutor;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  options.executor = nullptr;
  int context = 0;
  options.executor_context = &context;
  RuntimePtr again = CreateRuntime(options);
  ASSERT_TRUE(again);

  // attnrt_runtime_options_init_sized with the 1.2 size writes nothing past it.
  unsigned char buffer[sizeof(attnrt_runtime_options)];
  std::memset(buffer, 0xAB, sizeof(buffer));
  auto* sized = reinterpret_cast<attnrt_runtime_options*>(buffer);
  attnrt_runtime_options_init_sized(sized, kAbi12Size);
  EXPECT_EQ(sized->struct_size, kAbi12Size);
  EXPECT_EQ(sized->plan_cache_size, -1);
  for (size_t i = kAbi12Size; i < sizeof(buffer); ++i) {
    ASSERT_EQ(buffer[i], 0xAB) << "byte " << i << " past the ABI 1.2 struct was written";
  }

  // The runtime's own pool runs a GQA call; the executor is never called.
  attnrt_gqa_attributes attributes = GqaAttributes(4, 2);
  attnrt_op* op = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &op), ATTNRT_OK);
  OpPtr op_owner(op);
  std::mt19937_64 rng(TestSeed());
  SimpleGqa spec;
  spec.batch = 4;
  spec.seq = 16;
  spec.num_heads = 4;
  spec.kv_num_heads = 2;
  spec.total = 16;
  GqaTensors t = MakeGqaTensors(spec, rng);
  PlanPtr plan = Plan(op, t);
  ASSERT_TRUE(plan);
  EXPECT_EQ(RunPlan(plan.get(), t), ATTNRT_OK);
}

TEST_F(ExecutorTest, StartsNoThreadAndReportsTheTeamSize) {
  ExecutorLog log;
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = 5;
  options.executor = ThreadsExecutor;
  options.executor_context = &log;
  const size_t before = ThreadsOfProcess();
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  EXPECT_EQ(ThreadsOfProcess(), before);
  EXPECT_EQ(NumThreads(runtime.get()), 5);

  // num_threads 0: the usual rules (ATTNRT_NUM_THREADS here) give the team size.
  ScopedEnv threads("ATTNRT_NUM_THREADS", "3");
  options.num_threads = 0;
  RuntimePtr from_env = CreateRuntime(options);
  ASSERT_TRUE(from_env);
  EXPECT_EQ(NumThreads(from_env.get()), 3);
  EXPECT_EQ(log.calls.load(), 0);
}

// A plugin built against ABI 1.2 (before the executor) loads into a runtime with an executor: the
// host services it gets are those of ABI 1.2 and it never sees the executor.
TEST_F(ExecutorTest, APluginOfAbi12LoadsIntoAnExecutorRuntime) {
  ExecutorLog log;
  const char* paths[] = {ATTNRT_TEST_PLUGINS_ABI12};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  options.num_threads = 2;
  options.executor = ThreadsExecutor;
  options.executor_context = &log;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  EXPECT_TRUE(ListDiagnostics(runtime.get()).empty());
  const std::vector<PluginInfo> plugins = ListPlugins(runtime.get());
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].name, "abi12");
  EXPECT_EQ(plugins[0].abi_major, 1u);
  EXPECT_EQ(plugins[0].abi_minor, 2u);
  EXPECT_EQ(plugins[0].available, 1);
  EXPECT_EQ(plugins[0].kernels.size(), 2u);
}

// The output of one GQA prompt (and its plan's kernel and workspace) on a runtime made with these
// options, from a fixed seed.
struct GqaResult {
  std::vector<float> output;
  std::string kernel;
  size_t workspace = 0;
};

// The prompt RunGqa runs (and the re-entrant test runs beside it): 3 sequences of 48 tokens, 8
// heads over 2 kv heads, head size 64.
SimpleGqa ComparedSpec() {
  SimpleGqa spec;
  spec.batch = 3;
  spec.seq = 48;
  spec.num_heads = 8;
  spec.kv_num_heads = 2;
  spec.head_size = 64;
  spec.total = 48;
  return spec;
}

GqaResult RunGqa(const attnrt_runtime_options& options, uint64_t seed) {
  GqaResult result;
  RuntimePtr runtime = CreateRuntime(options);
  if (!runtime) return result;
  attnrt_gqa_attributes attributes = GqaAttributes(8, 2);
  attnrt_op* op = nullptr;
  const attnrt_status created = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &op);
  EXPECT_EQ(created, ATTNRT_OK) << LastError(created);
  OpPtr op_owner(op);
  if (created != ATTNRT_OK) return result;
  std::mt19937_64 rng(seed);
  const SimpleGqa spec = ComparedSpec();
  GqaTensors t = MakeGqaTensors(spec, rng);
  PlanPtr plan = Plan(op, t);
  if (!plan) return result;
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  EXPECT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
  result.workspace = info.workspace_size;
  result.kernel = PlanKernel(plan.get());
  const attnrt_status run = RunPlan(plan.get(), t);
  EXPECT_EQ(run, ATTNRT_OK) << LastError(run);
  const Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
  result.output.assign(out.f32(), out.f32() + out.numel());
  return result;
}

TEST_F(ExecutorTest, GqaOutputIsBitwiseThatOfTheOwnPool) {
  SCOPED_TRACE(SeedTrace());
  const uint64_t seed = TestSeed();
  for (const int32_t threads : {2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    attnrt_runtime_options pool_options = DefaultOptions();
    pool_options.num_threads = threads;
    const GqaResult expected = RunGqa(pool_options, seed);
    ASSERT_FALSE(expected.output.empty());
    for (const auto executor :
         {ThreadsExecutor, SequentialExecutor, NobodyExecutor, UnrulyExecutor}) {
      ExecutorLog log;
      attnrt_runtime_options options = pool_options;
      options.executor = executor;
      options.executor_context = &log;
      const GqaResult got = RunGqa(options, seed);
      ASSERT_EQ(got.output.size(), expected.output.size());
      EXPECT_EQ(got.kernel, expected.kernel);
      EXPECT_EQ(got.workspace, expected.workspace);
      EXPECT_EQ(std::memcmp(got.output.data(), expected.output.data(),
                            expected.output.size() * sizeof(float)),
                0)
          << "the output differs from the own pool's";
      // The kernel's parallel regions went to the executor, with the team size asked for.
      EXPECT_GE(log.calls.load(), 1);
      EXPECT_EQ(log.team_size.load(), threads);
    }
  }
}

// An executor whose members call back into the runtime (a plan of another op run from inside a
// member, on the member's thread): both plans give the own pool's output.
TEST_F(ExecutorTest, MembersThatRunPlansOfTheRuntimeGetTheOwnPoolsOutput) {
  SCOPED_TRACE(SeedTrace());
  const uint64_t seed = TestSeed();
  attnrt_runtime_options pool_options = DefaultOptions();
  pool_options.num_threads = 3;
  const GqaResult expected = RunGqa(pool_options, seed);
  const GqaResult expected_nested = RunGqa(pool_options, seed + 1);
  ASSERT_FALSE(expected.output.empty());

  ReentrantContext context;
  attnrt_runtime_options options = pool_options;
  options.executor = ReentrantExecutor;
  options.executor_context = &context;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_gqa_attributes attributes = GqaAttributes(8, 2);
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &raw), ATTNRT_OK);
  OpPtr op(raw);
  const SimpleGqa spec = ComparedSpec();
  std::mt19937_64 rng(seed);
  GqaTensors outer = MakeGqaTensors(spec, rng);
  std::mt19937_64 nested_rng(seed + 1);
  GqaTensors nested = MakeGqaTensors(spec, nested_rng);
  PlanPtr outer_plan = Plan(op.get(), outer);
  PlanPtr nested_plan = Plan(op.get(), nested);
  ASSERT_TRUE(outer_plan && nested_plan);
  context.plan = nested_plan.get();
  context.tensors = &nested;
  const attnrt_status run = RunPlan(outer_plan.get(), outer);
  ASSERT_EQ(run, ATTNRT_OK) << LastError(run);
  EXPECT_EQ(context.nested_runs.load(), 1);
  EXPECT_EQ(context.nested_failures.load(), 0);
  const Tensor& out = outer[ATTNRT_GQA_OUTPUT_OUTPUT];
  const Tensor& nested_out = nested[ATTNRT_GQA_OUTPUT_OUTPUT];
  ASSERT_EQ(out.numel(), expected.output.size());
  EXPECT_EQ(std::memcmp(out.f32(), expected.output.data(), out.numel() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(nested_out.f32(), expected_nested.output.data(),
                        nested_out.numel() * sizeof(float)),
            0);
}

// A broken executor that throws before running any member.
void ThrowingExecutor(void* context, int32_t team_size, attnrt_team_fn /*fn*/,
                      void* /*user_data*/) {
  static_cast<ExecutorLog*>(context)->Called(team_size);
  throw std::runtime_error("executor out of threads");
}

// The run fails (the executor broke its contract) but the calling thread did the work: the status
// says the outputs are complete, and they are the own pool's.
TEST_F(ExecutorTest, AThrowingExecutorFailsTheRunAndSaysTheOutputsAreComplete) {
  SCOPED_TRACE(SeedTrace());
  const uint64_t seed = TestSeed();
  attnrt_runtime_options pool_options = DefaultOptions();
  pool_options.num_threads = 2;
  const GqaResult expected = RunGqa(pool_options, seed);
  ASSERT_FALSE(expected.output.empty());

  ExecutorLog log;
  attnrt_runtime_options options = pool_options;
  options.executor = ThrowingExecutor;
  options.executor_context = &log;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_gqa_attributes attributes = GqaAttributes(8, 2);
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &raw), ATTNRT_OK);
  OpPtr op(raw);
  std::mt19937_64 rng(seed);
  GqaTensors t = MakeGqaTensors(ComparedSpec(), rng);
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  const attnrt_status run = RunPlan(plan.get(), t);
  const std::string message = attnrt_last_error_message();
  EXPECT_EQ(run, ATTNRT_ERROR_INTERNAL) << message;
  EXPECT_GE(log.calls.load(), 1);
  EXPECT_NE(message.find("the runtime's executor threw"), std::string::npos) << message;
  EXPECT_NE(message.find("executor out of threads"), std::string::npos) << message;
  EXPECT_NE(message.find("every range ran, the outputs are complete"), std::string::npos)
      << message;
  const Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
  ASSERT_EQ(static_cast<size_t>(out.numel()), expected.output.size());
  EXPECT_EQ(std::memcmp(out.f32(), expected.output.data(), out.numel() * sizeof(float)), 0)
      << "the outputs are not the own pool's";
}

}  // namespace
}  // namespace attnrt_test
