// Plan cache: identical shape signatures return the cached plan, other shapes make new plans, run
// rejects tensors the plan was not made for, and a decode loop over a shared past/present buffer
// plans exactly once. The cache keeps plan_cache_size plans (option, else ATTNRT_PLAN_CACHE_SIZE,
// else 64), dropping the least recently used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

struct Stats {
  uint64_t hits = 0;
  uint64_t misses = 0;
};

Stats CacheStats(const attnrt_op* op) {
  Stats s;
  const attnrt_status st = attnrt_op_plan_cache_stats(op, &s.hits, &s.misses);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return s;
}

std::string Signature(const attnrt_plan* plan) {
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  const attnrt_status st = attnrt_plan_get_info(plan, &info);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return info.signature != nullptr ? info.signature : "";
}

class PlanCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  OpPtr MakeOp(int32_t num_heads, int32_t kv_num_heads) {
    const attnrt_gqa_attributes attributes = GqaAttributes(num_heads, kv_num_heads);
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    return OpPtr(st == ATTNRT_OK ? op : nullptr);
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

TEST_F(PlanCacheTest, IdenticalShapesHitTheCache) {
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  SimpleGqa spec;
  GqaTensors a = MakeGqaTensors(spec, rng_);
  GqaTensors b = MakeGqaTensors(spec, rng_);  // same shapes, other memory and values

  PlanPtr first = Plan(op.get(), a);
  ASSERT_TRUE(first);
  Stats s = CacheStats(op.get());
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 1u);

  PlanPtr second = Plan(op.get(), b);
  ASSERT_TRUE(second);
  s = CacheStats(op.get());
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(PlanKernel(first.get()), PlanKernel(second.get()));
  EXPECT_EQ(Signature(first.get()), Signature(second.get()));
  EXPECT_FALSE(Signature(first.get()).empty());

  // Both references run, each on its own tensors.
  ASSERT_EQ(RunPlan(first.get(), a), ATTNRT_OK) << attnrt_last_error_message();
  ASSERT_EQ(RunPlan(second.get(), b), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(PlanCacheTest, DifferentShapesMiss) {
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  SimpleGqa small;
  SimpleGqa longer = small;
  longer.seq = 6;
  longer.total = 6;
  SimpleGqa with_present = small;
  with_present.present = true;
  GqaTensors a = MakeGqaTensors(small, rng_);
  GqaTensors b = MakeGqaTensors(longer, rng_);
  GqaTensors c = MakeGqaTensors(with_present, rng_);
  PlanPtr pa = Plan(op.get(), a);
  PlanPtr pb = Plan(op.get(), b);
  PlanPtr pc = Plan(op.get(), c);
  ASSERT_TRUE(pa && pb && pc);
  Stats s = CacheStats(op.get());
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_NE(Signature(pa.get()), Signature(pb.get()));
  EXPECT_NE(Signature(pa.get()), Signature(pc.get()));
  PlanPtr again = Plan(op.get(), b);
  ASSERT_TRUE(again);
  s = CacheStats(op.get());
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 3u);
}

TEST_F(PlanCacheTest, CachesArePerOp) {
  OpPtr op1 = MakeOp(2, 1);
  OpPtr op2 = MakeOp(2, 1);
  ASSERT_TRUE(op1 && op2);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  PlanPtr p1 = Plan(op1.get(), t);
  PlanPtr p2 = Plan(op2.get(), t);
  ASSERT_TRUE(p1 && p2);
  EXPECT_EQ(CacheStats(op1.get()).misses, 1u);
  EXPECT_EQ(CacheStats(op2.get()).misses, 1u);
  EXPECT_EQ(CacheStats(op2.get()).hits, 0u);
}

TEST_F(PlanCacheTest, RunWithOtherShapesIsPlanMismatch) {
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  SimpleGqa planned;
  SimpleGqa other = planned;
  other.seq = 5;
  other.total = 5;
  GqaTensors a = MakeGqaTensors(planned, rng_);
  GqaTensors b = MakeGqaTensors(other, rng_);
  PlanPtr plan = Plan(op.get(), a);
  ASSERT_TRUE(plan);

  attnrt_status st = RunPlan(plan.get(), b);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);
  EXPECT_STRNE(attnrt_last_error_message(), "");
  const Tensor& out = b[ATTNRT_GQA_OUTPUT_OUTPUT];
  for (int64_t i = 0; i < out.numel(); ++i) {
    ASSERT_TRUE(std::isnan(out.f32()[i])) << "a rejected run wrote output element " << i;
  }

  // Same shapes but an output the plan was not made for.
  GqaTensors c = MakeGqaTensors(planned, rng_);
  c[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = F32({1, 1, 4, 8});
  c[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = F32({1, 1, 4, 8});
  st = RunPlan(plan.get(), c);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);

  // Same shapes, but a past the plan was not made for.
  SimpleGqa with_past = planned;
  with_past.past = 4;
  GqaTensors d = MakeGqaTensors(with_past, rng_);
  st = RunPlan(plan.get(), d);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);

  // The plan still runs on what it was made for.
  st = RunPlan(plan.get(), a);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
}

// Reference of one shared-buffer decode step, from the buffer content before the step.
GqaRefOutputs ReferenceStep(const SimpleGqa& g, GqaTensors& t, const std::vector<int32_t>& seqlens,
                            int32_t total) {
  GqaRefProblem p;
  p.batch_size = g.batch;
  p.sequence_length = g.seq;
  p.kv_sequence_length = g.seq;
  p.num_heads = g.num_heads;
  p.kv_num_heads = g.kv_num_heads;
  p.head_size = g.head_size;
  p.has_past = true;
  p.past_length = g.past;
  p.has_present = true;
  p.present_length = g.past;
  p.present_shares_past = true;
  p.total_sequence_length = total;
  p.seqlens_k = seqlens;
  GqaRefInputs in;
  in.query = t[ATTNRT_GQA_INPUT_QUERY].f32();
  in.key = t[ATTNRT_GQA_INPUT_KEY].f32();
  in.value = t[ATTNRT_GQA_INPUT_VALUE].f32();
  in.past_key = t[ATTNRT_GQA_INPUT_PAST_KEY].f32();
  in.past_value = t[ATTNRT_GQA_INPUT_PAST_VALUE].f32();
  return ComputeGqaReference(p, in);
}

TEST_F(PlanCacheTest, DecodeLoopWithSharedBufferPlansOnce) {
  SCOPED_TRACE(SeedTrace());
  SimpleGqa g;
  g.batch = 2;
  g.seq = 1;
  g.num_heads = 4;
  g.kv_num_heads = 2;
  g.head_size = 16;
  g.past = 32;
  g.shared_buffer = true;
  std::vector<int32_t> seqlens = {9, 4};  // P_b before the first step
  g.seqlens = seqlens;
  g.total = 10;
  GqaTensors t = MakeGqaTensors(g, rng_);
  OpPtr op = MakeOp(4, 2);
  ASSERT_TRUE(op);

  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE("decode step " + std::to_string(step));
    const int32_t total = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
    std::copy(seqlens.begin(), seqlens.end(), t[ATTNRT_GQA_INPUT_SEQLENS_K].i32());
    t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH].i32()[0] = total;
    for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
      t[i].FillNormal(rng_);
    }
    t[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(std::numeric_limits<float>::quiet_NaN());
    const GqaRefOutputs ref = ReferenceStep(g, t, seqlens, total);

    PlanPtr plan = Plan(op.get(), t);
    ASSERT_TRUE(plan);
    const attnrt_status st = RunPlan(plan.get(), t);
    ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

    const float* out = t[ATTNRT_GQA_OUTPUT_OUTPUT].f32();
    for (size_t i = 0; i < ref.output.size(); ++i) {
      ASSERT_NEAR(out[i], ref.output[i], 1e-5) << "output element " << i;
    }
    const float* pk = t[ATTNRT_GQA_OUTPUT_PRESENT_KEY].f32();
    const float* pv = t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE].f32();
    for (size_t i = 0; i < ref.present_key.size(); ++i) {
      ASSERT_EQ(pk[i], static_cast<float>(ref.present_key[i])) << "present_key element " << i;
      ASSERT_EQ(pv[i], static_cast<float>(ref.present_value[i])) << "present_value element " << i;
    }
    for (auto& s : seqlens) ++s;
  }
  const Stats s = CacheStats(op.get());
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 19u);
}

attnrt_plan_cache_info CacheInfo(const attnrt_op* op) {
  attnrt_plan_cache_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  const attnrt_status st = attnrt_op_plan_cache_info(op, &info);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return info;
}

// A prompt of `seq` tokens: one shape signature per length.
GqaTensors PromptOf(int64_t seq, std::mt19937_64& rng) {
  SimpleGqa g;
  g.seq = seq;
  g.total = seq;
  return MakeGqaTensors(g, rng);
}

class BoundedPlanCacheTest : public PlanCacheTest {
 protected:
  OpPtr MakeOpWithCache(int32_t plan_cache_size) {
    attnrt_runtime_options options = DefaultOptions();
    options.plan_cache_size = plan_cache_size;
    runtime_ = CreateRuntime(options);
    return runtime_ ? MakeOp(2, 1) : nullptr;
  }
};

TEST_F(BoundedPlanCacheTest, LeastRecentlyUsedPlanIsDropped) {
  OpPtr op = MakeOpWithCache(2);
  ASSERT_TRUE(op);
  GqaTensors a = PromptOf(3, rng_), b = PromptOf(4, rng_), c = PromptOf(5, rng_);
  PlanPtr pa = Plan(op.get(), a);
  PlanPtr pb = Plan(op.get(), b);
  ASSERT_TRUE(Plan(op.get(), a));  // a is now the most recently used
  PlanPtr pc = Plan(op.get(), c);  // drops b
  ASSERT_TRUE(pa && pb && pc);
  attnrt_plan_cache_info info = CacheInfo(op.get());
  EXPECT_EQ(info.hits, 1u);
  EXPECT_EQ(info.misses, 3u);
  EXPECT_EQ(info.evictions, 1u);
  EXPECT_EQ(info.size, 2u);
  EXPECT_EQ(info.capacity, 2u);

  ASSERT_TRUE(Plan(op.get(), a));  // kept
  ASSERT_TRUE(Plan(op.get(), c));  // kept
  info = CacheInfo(op.get());
  EXPECT_EQ(info.hits, 3u);
  EXPECT_EQ(info.misses, 3u);
  ASSERT_TRUE(Plan(op.get(), b));  // dropped: planned again, which drops a
  info = CacheInfo(op.get());
  EXPECT_EQ(info.misses, 4u);
  EXPECT_EQ(info.evictions, 2u);
  EXPECT_EQ(info.size, 2u);

  // The old counters agree, and a dropped plan still runs for the reference its caller holds.
  const Stats s = CacheStats(op.get());
  EXPECT_EQ(s.hits, info.hits);
  EXPECT_EQ(s.misses, info.misses);
  EXPECT_EQ(RunPlan(pb.get(), b), ATTNRT_OK) << attnrt_last_error_message();
  EXPECT_EQ(RunPlan(pa.get(), a), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(BoundedPlanCacheTest, SizeZeroKeepsNoPlan) {
  OpPtr op = MakeOpWithCache(0);
  ASSERT_TRUE(op);
  GqaTensors t = PromptOf(4, rng_);
  PlanPtr first = Plan(op.get(), t);
  PlanPtr second = Plan(op.get(), t);
  ASSERT_TRUE(first && second);
  const attnrt_plan_cache_info info = CacheInfo(op.get());
  EXPECT_EQ(info.hits, 0u);
  EXPECT_EQ(info.misses, 2u);
  EXPECT_EQ(info.size, 0u);
  EXPECT_EQ(info.capacity, 0u);
  EXPECT_EQ(RunPlan(first.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  EXPECT_EQ(RunPlan(second.get(), t), ATTNRT_OK) << attnrt_last_error_message();
}

// Without a bound, an op planning ever new shapes (a decode whose present output grows each step)
// kept every plan: the first shape stayed cached however many came after it.
TEST_F(PlanCacheTest, DefaultCacheDropsOldShapes) {
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  GqaTensors first = PromptOf(1, rng_);
  ASSERT_TRUE(Plan(op.get(), first));
  for (int64_t seq = 2; seq <= 65; ++seq) {
    GqaTensors t = PromptOf(seq, rng_);
    ASSERT_TRUE(Plan(op.get(), t)) << "S = " << seq;
  }
  Stats before = CacheStats(op.get());
  ASSERT_TRUE(Plan(op.get(), first));
  Stats after = CacheStats(op.get());
  EXPECT_EQ(after.misses, before.misses + 1) << "the first of 65 shapes is still cached";
  const attnrt_plan_cache_info info = CacheInfo(op.get());
  EXPECT_EQ(info.capacity, 64u);
  EXPECT_EQ(info.size, 64u);
  EXPECT_EQ(info.evictions, 2u);
}

TEST_F(PlanCacheTest, SizeFromEnvironmentAndOptionWinsOverIt) {
  ScopedEnv size("ATTNRT_PLAN_CACHE_SIZE", "3");
  runtime_ = CreateRuntime();
  ASSERT_TRUE(runtime_);
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  EXPECT_EQ(CacheInfo(op.get()).capacity, 3u);

  attnrt_runtime_options options = DefaultOptions();
  options.plan_cache_size = 5;
  runtime_ = CreateRuntime(options);
  ASSERT_TRUE(runtime_);
  op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  EXPECT_EQ(CacheInfo(op.get()).capacity, 5u);
}

TEST_F(PlanCacheTest, BadEnvironmentSizeWarnsAndKeepsTheDefault) {
  for (const char* bad : {"-1", "many", "12x"}) {
    SCOPED_TRACE(bad);
    ScopedEnv size("ATTNRT_PLAN_CACHE_SIZE", bad);
    std::vector<std::string> lines;
    attnrt_runtime_options options = DefaultOptions();
    options.log_fn = [](void* user, int32_t level, const char* message) {
      if (level == ATTNRT_LOG_WARNING)
        static_cast<std::vector<std::string>*>(user)->push_back(message);
    };
    options.log_user_data = &lines;
    runtime_ = CreateRuntime(options);
    ASSERT_TRUE(runtime_);
    OpPtr op = MakeOp(2, 1);
    ASSERT_TRUE(op);
    EXPECT_EQ(CacheInfo(op.get()).capacity, 64u);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("ATTNRT_PLAN_CACHE_SIZE"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find(bad), std::string::npos) << lines[0];
  }
}

TEST_F(PlanCacheTest, NegativeSizeOptionIsRejected) {
  attnrt_runtime_options options = DefaultOptions();
  options.plan_cache_size = -2;
  attnrt_runtime* runtime = nullptr;
  const attnrt_status st = attnrt_runtime_create(&options, &runtime);
  RuntimePtr owner(runtime);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("options.plan_cache_size"),
            std::string::npos)
      << attnrt_last_error_message();
}

// A caller built against ABI 1.1 passes a struct that ends at log_user_data: the field after it is
// not read (a garbage value there would otherwise be rejected), and the cache has its default size.
TEST_F(PlanCacheTest, OptionsOfAbi11KeepTheDefaultSize) {
  attnrt_runtime_options options = DefaultOptions();
  options.struct_size = offsetof(attnrt_runtime_options, log_user_data) + sizeof(void*);
  options.plan_cache_size = -7;
  runtime_ = CreateRuntime(options);
  ASSERT_TRUE(runtime_);
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  EXPECT_EQ(CacheInfo(op.get()).capacity, 64u);
}

TEST_F(PlanCacheTest, CacheInfoChecksItsArguments) {
  OpPtr op = MakeOp(2, 1);
  ASSERT_TRUE(op);
  attnrt_plan_cache_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  attnrt_status st = attnrt_op_plan_cache_info(nullptr, &info);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("op"), std::string::npos);
  st = attnrt_op_plan_cache_info(op.get(), nullptr);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("out_info"), std::string::npos);
  info.struct_size = sizeof(info) - 1;
  st = attnrt_op_plan_cache_info(op.get(), &info);
  EXPECT_EQ(st, ATTNRT_ERROR_ABI_MISMATCH) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("struct_size"), std::string::npos);
}

}  // namespace
}  // namespace attnrt_test
