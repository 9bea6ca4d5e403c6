// One runtime shared by 4 threads, each creating ops and plans and running decode loops (~200
// runs per thread). Every thread's results must equal the same work done on a single thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr int kThreads = 4;
constexpr int kSessionsPerThread = 4;
constexpr int kDecodeSteps = 49;  // + 1 prompt = 50 runs per session, 200 per thread

struct SessionResult {
  std::vector<float> outputs;  // every run's output, concatenated
  std::string error;           // first failure, "" when all went well
};

// A prompt of 8 tokens into a 64-row shared buffer, then kDecodeSteps decode steps, all inputs
// drawn from `seed`. A new op per session; one plan per step (cache hits after the first decode).
SessionResult RunSession(attnrt_runtime* runtime, uint64_t seed) {
  SessionResult result;
  std::mt19937_64 rng(seed);
  const attnrt_gqa_attributes attributes = GqaAttributes(4, 2);
  attnrt_op* raw_op = nullptr;
  if (attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &raw_op) != ATTNRT_OK) {
    result.error = std::string("op_create: ") + attnrt_last_error_message();
    return result;
  }
  OpPtr op(raw_op);

  auto run = [&](GqaTensors& t) -> bool {
    attnrt_plan* raw_plan = nullptr;
    attnrt_status st = attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                      ATTNRT_GQA_NUM_OUTPUTS, &raw_plan);
    if (st != ATTNRT_OK) {
      result.error = std::string("plan: ") + attnrt_last_error_message();
      return false;
    }
    PlanPtr plan(raw_plan);
    st = attnrt_plan_run(plan.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                         ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr);
    if (st != ATTNRT_OK) {
      result.error = std::string("run: ") + attnrt_last_error_message();
      return false;
    }
    const Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
    result.outputs.insert(result.outputs.end(), out.f32(), out.f32() + out.numel());
    return true;
  };

  // Prompt: S = T = 8 with the 64-row buffer as both past (content ignored) and present.
  SimpleGqa prompt;
  prompt.batch = 2;
  prompt.seq = 8;
  prompt.total = 8;
  prompt.num_heads = 4;
  prompt.kv_num_heads = 2;
  prompt.head_size = 16;
  prompt.past = 64;
  prompt.shared_buffer = true;
  GqaTensors p = MakeGqaTensors(prompt, rng);
  if (!run(p)) return result;

  SimpleGqa decode = prompt;
  decode.seq = 1;
  GqaTensors d = MakeGqaTensors(decode, rng);
  d[ATTNRT_GQA_INPUT_PAST_KEY] = p[ATTNRT_GQA_INPUT_PAST_KEY];  // the same buffer, shared
  d[ATTNRT_GQA_INPUT_PAST_VALUE] = p[ATTNRT_GQA_INPUT_PAST_VALUE];
  d[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = p[ATTNRT_GQA_INPUT_PAST_KEY];
  d[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = p[ATTNRT_GQA_INPUT_PAST_VALUE];
  for (int step = 0; step < kDecodeSteps; ++step) {
    const int32_t past = 8 + step;
    d[ATTNRT_GQA_INPUT_SEQLENS_K].i32()[0] = past;
    d[ATTNRT_GQA_INPUT_SEQLENS_K].i32()[1] = past / 2 + 4;  // ragged, still growing
    d[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH].i32()[0] = past + 1;
    for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
      d[i].FillNormal(rng);
    }
    if (!run(d)) return result;
  }
  return result;
}

TEST(ConcurrencyTest, SharedRuntimeGivesSingleThreadedResults) {
  CleanAttnrtEnv env;
  SCOPED_TRACE(SeedTrace());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  const uint64_t base = TestSeed();

  std::vector<std::vector<SessionResult>> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int s = 0; s < kSessionsPerThread; ++s) {
      expected[t].push_back(RunSession(runtime.get(), base + 1000 * t + s));
      ASSERT_EQ(expected[t].back().error, "");
    }
  }

  std::vector<std::vector<SessionResult>> got(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (int s = 0; s < kSessionsPerThread; ++s) {
        got[t].push_back(RunSession(runtime.get(), base + 1000 * t + s));
      }
    });
  }
  for (auto& th : threads) th.join();

  for (int t = 0; t < kThreads; ++t) {
    for (int s = 0; s < kSessionsPerThread; ++s) {
      SCOPED_TRACE("thread " + std::to_string(t) + " session " + std::to_string(s));
      const auto& e = expected[t][s];
      const auto& g = got[t][s];
      ASSERT_EQ(g.error, "");
      ASSERT_EQ(g.outputs.size(), e.outputs.size());
      size_t mismatches = 0;
      double max_diff = 0.0;
      for (size_t i = 0; i < e.outputs.size(); ++i) {
        const double diff = std::fabs(double{g.outputs[i]} - double{e.outputs[i]});
        if (!(diff <= 1e-6)) ++mismatches;
        if (diff > max_diff || std::isnan(diff)) max_diff = diff;
      }
      EXPECT_EQ(mismatches, 0u) << "max difference " << max_diff;
    }
  }
}

TEST(ConcurrencyTest, ConcurrentRuntimeCreationAndUse) {
  CleanAttnrtEnv env;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        attnrt_runtime* runtime = nullptr;
        if (attnrt_runtime_create(nullptr, &runtime) != ATTNRT_OK) {
          ++failures;
          continue;
        }
        RuntimePtr owner(runtime);
        if (RunSession(runtime, 7u + static_cast<uint64_t>(i)).error != "") ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace attnrt_test
