// Handle lifetimes: plugins stay loaded while any op or plan made from a runtime lives, so ops and
// plans keep working after attnrt_runtime_destroy; plans outlive their op; plan references are
// counted. Leaks are left to LeakSanitizer in sanitizer builds.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

OpPtr MakeOp(attnrt_runtime* runtime) {
  const attnrt_gqa_attributes attributes = GqaAttributes(4, 2);
  attnrt_op* op = nullptr;
  const attnrt_status st = attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return OpPtr(st == ATTNRT_OK ? op : nullptr);
}

SimpleGqa Shape(int64_t seq) {
  SimpleGqa g;
  g.batch = 2;
  g.seq = seq;
  g.total = seq;
  g.num_heads = 4;
  g.kv_num_heads = 2;
  g.head_size = 16;
  g.present = true;
  return g;
}

std::vector<float> Output(GqaTensors& t) {
  const Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
  return std::vector<float>(out.f32(), out.f32() + out.numel());
}

class LifetimeTest : public testing::Test {
 protected:
  CleanAttnrtEnv env_;
  std::mt19937_64 rng_{TestSeed()};
};

TEST_F(LifetimeTest, OpAndPlanOutliveTheRuntime) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Shape(6), rng_);
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  ASSERT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  const std::vector<float> before = Output(t);

  runtime.reset();  // attnrt_runtime_destroy while the op and the plan live

  t[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(-1.0f);
  ASSERT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  EXPECT_EQ(Output(t), before) << "the same plan on the same inputs gave another result";
  EXPECT_FALSE(PlanKernel(plan.get()).empty());

  // The op still plans (a new shape) and explains.
  GqaTensors u = MakeGqaTensors(Shape(3), rng_);
  PlanPtr plan2 = Plan(op.get(), u);
  ASSERT_TRUE(plan2);
  ASSERT_EQ(RunPlan(plan2.get(), u), ATTNRT_OK) << attnrt_last_error_message();
  EXPECT_FALSE(Explain(op.get(), u).empty());

  plan.reset();
  op.reset();
  ASSERT_EQ(RunPlan(plan2.get(), u), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(LifetimeTest, PlanOutlivesItsOp) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Shape(5), rng_);
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  op.reset();
  runtime.reset();
  ASSERT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(LifetimeTest, PlanReferencesAreCounted) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Shape(4), rng_);
  PlanPtr first = Plan(op.get(), t);
  PlanPtr second = Plan(op.get(), t);  // a cache hit: another reference
  ASSERT_TRUE(first && second);
  first.reset();
  ASSERT_EQ(RunPlan(second.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  op.reset();
  ASSERT_EQ(RunPlan(second.get(), t), ATTNRT_OK) << attnrt_last_error_message();
}

TEST_F(LifetimeTest, ManyRuntimesComeAndGo) {
  for (int i = 0; i < 8; ++i) {
    RuntimePtr runtime = CreateRuntime();
    ASSERT_TRUE(runtime);
    OpPtr op = MakeOp(runtime.get());
    ASSERT_TRUE(op);
    GqaTensors t = MakeGqaTensors(Shape(2), rng_);
    PlanPtr plan = Plan(op.get(), t);
    ASSERT_TRUE(plan);
    // Release in the "wrong" order every other round.
    if (i % 2 == 0) runtime.reset();
    ASSERT_EQ(RunPlan(plan.get(), t), ATTNRT_OK) << attnrt_last_error_message();
  }
}

TEST_F(LifetimeTest, NullHandlesAreIgnoredByDestroyFunctions) {
  attnrt_runtime_destroy(nullptr);
  attnrt_op_destroy(nullptr);
  attnrt_plan_release(nullptr);
  attnrt_explanation_destroy(nullptr);
}

}  // namespace
}  // namespace attnrt_test
