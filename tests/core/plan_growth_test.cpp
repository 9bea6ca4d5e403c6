// Plans for a growing cache: a GQA decode whose present output is a new buffer one row longer than
// the past each step (ONNX Runtime's default I/O) plans once per capacity (the present length
// rounded up to a power of two, at least 16) instead of once per step, every step equal to the
// float64 reference with every CPU GQA kernel; a plan runs the lengths up to its capacity, and is
// never reused for tensors its kernel declines or whose workspace exceeds the plan's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

attnrt_plan_cache_info CacheInfo(const attnrt_op* op) {
  attnrt_plan_cache_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  const attnrt_status st = attnrt_op_plan_cache_info(op, &info);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  return info;
}

size_t WorkspaceSize(const attnrt_plan* plan) {
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  EXPECT_EQ(attnrt_plan_get_info(plan, &info), ATTNRT_OK) << attnrt_last_error_message();
  return info.workspace_size;
}

// One decode step over a past of `past` rows into a new present of past + 1 rows.
SimpleGqa DecodeStep(int64_t past) {
  SimpleGqa g;
  g.batch = 2;
  g.seq = 1;
  g.num_heads = 4;
  g.kv_num_heads = 2;
  g.head_size = 16;
  g.past = past;
  g.total = past + 1;
  g.present = true;
  return g;
}

GqaRefOutputs Reference(const SimpleGqa& g, GqaTensors& t) {
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
  p.present_length = g.past + 1;
  p.total_sequence_length = static_cast<int32_t>(g.total);
  p.seqlens_k.assign(static_cast<size_t>(g.batch), static_cast<int32_t>(g.total - 1));
  GqaRefInputs in;
  in.query = t[ATTNRT_GQA_INPUT_QUERY].f32();
  in.key = t[ATTNRT_GQA_INPUT_KEY].f32();
  in.value = t[ATTNRT_GQA_INPUT_VALUE].f32();
  in.past_key = t[ATTNRT_GQA_INPUT_PAST_KEY].f32();
  in.past_value = t[ATTNRT_GQA_INPUT_PAST_VALUE].f32();
  return ComputeGqaReference(p, in);
}

void ExpectReference(const SimpleGqa& g, GqaTensors& t, const GqaRefOutputs& ref) {
  const float* out = t[ATTNRT_GQA_OUTPUT_OUTPUT].f32();
  for (size_t i = 0; i < ref.output.size(); ++i) {
    ASSERT_NEAR(out[i], ref.output[i], 1e-5) << "output element " << i << ", past " << g.past;
  }
  const float* pk = t[ATTNRT_GQA_OUTPUT_PRESENT_KEY].f32();
  const float* pv = t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE].f32();
  for (size_t i = 0; i < ref.present_key.size(); ++i) {
    ASSERT_EQ(pk[i], static_cast<float>(ref.present_key[i])) << "present_key element " << i;
    ASSERT_EQ(pv[i], static_cast<float>(ref.present_value[i])) << "present_value element " << i;
  }
}

// Every GQA kernel of the CPU plugins this runtime loads.
std::vector<std::string> CpuGqaKernels() {
  RuntimePtr runtime = CreateRuntime();
  std::vector<std::string> names;
  if (!runtime) return names;
  for (const auto& plugin : ListPlugins(runtime.get())) {
    if (!plugin.available) continue;
    for (const auto& kernel : plugin.kernels) {
      if (kernel.op_kind == ATTNRT_OP_GQA && kernel.device_type == ATTNRT_DEVICE_CPU) {
        names.push_back(kernel.name);
      }
    }
  }
  return names;
}

class PlanGrowthTest : public testing::Test {
 protected:
  OpPtr MakeOp(const attnrt_runtime_options& options) {
    runtime_ = CreateRuntime(options);
    if (!runtime_) return nullptr;
    const attnrt_gqa_attributes attributes = GqaAttributes(4, 2);
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    return OpPtr(st == ATTNRT_OK ? op : nullptr);
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

TEST_F(PlanGrowthTest, GrowingDecodePlansOncePerCapacityWithEveryKernel) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<std::string> kernels = CpuGqaKernels();
  ASSERT_FALSE(kernels.empty());
  for (const std::string& kernel : kernels) {
    SCOPED_TRACE(kernel);
    attnrt_runtime_options options = DefaultOptions();
    options.kernel = kernel.c_str();
    OpPtr op = MakeOp(options);
    ASSERT_TRUE(op);
    {  // A kernel that declines these problems (an int8-query approximation, say) is left out;
       // asked on an op of its own, so the counts below are this op's.
      OpPtr probe_op = MakeOp(options);
      ASSERT_TRUE(probe_op);
      GqaTensors t = MakeGqaTensors(DecodeStep(1), rng_);
      attnrt_plan* probe = nullptr;
      const attnrt_status st = attnrt_op_plan(probe_op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS,
                                              t.Outputs(), ATTNRT_GQA_NUM_OUTPUTS, &probe);
      attnrt_plan_release(probe);
      if (st == ATTNRT_ERROR_UNSUPPORTED) continue;
    }
    // Present lengths 2 .. 100: capacities 16, 32, 64, 128.
    for (int64_t past = 1; past < 100; ++past) {
      const SimpleGqa g = DecodeStep(past);
      GqaTensors t = MakeGqaTensors(g, rng_);
      const GqaRefOutputs ref = Reference(g, t);
      PlanPtr plan = Plan(op.get(), t);
      ASSERT_TRUE(plan) << "past " << past;
      EXPECT_EQ(PlanKernel(plan.get()), kernel);
      // RunPlan passes a workspace of exactly the plan's size.
      const attnrt_status st = RunPlan(plan.get(), t);
      ASSERT_EQ(st, ATTNRT_OK) << LastError(st) << " (past " << past << ")";
      ExpectReference(g, t, ref);
      if (HasFatalFailure()) return;
    }
    const attnrt_plan_cache_info info = CacheInfo(op.get());
    EXPECT_EQ(info.misses, 4u);
    EXPECT_EQ(info.hits, 95u);
    EXPECT_EQ(info.size, 4u);
  }
}

TEST_F(PlanGrowthTest, PlanRunsLengthsUpToItsCapacity) {
  OpPtr op = MakeOp(DefaultOptions());
  ASSERT_TRUE(op);
  SimpleGqa g = DecodeStep(20);  // present 21: capacity 32
  GqaTensors planned = MakeGqaTensors(g, rng_);
  PlanPtr plan = Plan(op.get(), planned);
  ASSERT_TRUE(plan);
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
  EXPECT_NE(std::string(info.signature).find("up to 32"), std::string::npos) << info.signature;

  for (int64_t past : {20, 5, 31}) {
    SCOPED_TRACE("past " + std::to_string(past));
    g = DecodeStep(past);
    GqaTensors t = MakeGqaTensors(g, rng_);
    const GqaRefOutputs ref = Reference(g, t);
    const attnrt_status st = RunPlan(plan.get(), t);  // without planning these shapes
    ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
    ExpectReference(g, t, ref);
  }

  g = DecodeStep(32);  // present 33: beyond the capacity
  GqaTensors beyond = MakeGqaTensors(g, rng_);
  attnrt_status st = RunPlan(plan.get(), beyond);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("up to 32"), std::string::npos)
      << attnrt_last_error_message();
  for (int64_t i = 0; i < beyond[ATTNRT_GQA_OUTPUT_OUTPUT].numel(); ++i) {
    ASSERT_TRUE(std::isnan(beyond[ATTNRT_GQA_OUTPUT_OUTPUT].f32()[i])) << "output " << i;
  }

  // Any other difference still needs its own plan: a shorter query, a shared buffer.
  SimpleGqa other = DecodeStep(20);
  other.head_size = 8;
  GqaTensors narrower = MakeGqaTensors(other, rng_);
  st = RunPlan(plan.get(), narrower);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);
}

// The fake plugin's fake.gqa.top.x declines a present of 77 rows, and every fake kernel asks for a
// workspace of 1 MiB for a present of 90 rows only: neither length reuses the plan of capacity 128.
TEST_F(PlanGrowthTest, PlanIsNotReusedWhereItsKernelDeclinesOrItsWorkspaceIsTooSmall) {
  const std::string fake = ATTNRT_TEST_PLUGINS_FAKE;
  const char* paths[1] = {fake.c_str()};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  OpPtr op = MakeOp(options);
  ASSERT_TRUE(op);
  GqaTensors first = MakeGqaTensors(DecodeStep(70), rng_);  // present 71: capacity 128
  PlanPtr plan = Plan(op.get(), first);
  ASSERT_TRUE(plan);
  EXPECT_EQ(PlanKernel(plan.get()), "fake.gqa.top.x");
  EXPECT_EQ(WorkspaceSize(plan.get()), 0u);

  GqaTensors declined = MakeGqaTensors(DecodeStep(76), rng_);
  PlanPtr other = Plan(op.get(), declined);
  ASSERT_TRUE(other);
  EXPECT_EQ(PlanKernel(other.get()), "fake.gqa.mid.a");
  attnrt_status st = RunPlan(plan.get(), declined);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("present length 77 unsupported"),
            std::string::npos)
      << attnrt_last_error_message();

  GqaTensors larger = MakeGqaTensors(DecodeStep(89), rng_);
  PlanPtr sized = Plan(op.get(), larger);
  ASSERT_TRUE(sized);
  EXPECT_EQ(WorkspaceSize(sized.get()), size_t{1} << 20);
  st = RunPlan(plan.get(), larger);
  EXPECT_EQ(st, ATTNRT_ERROR_PLAN_MISMATCH) << LastError(st);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("1048576"), std::string::npos)
      << attnrt_last_error_message();
  EXPECT_EQ(RunPlan(sized.get(), larger), ATTNRT_OK) << attnrt_last_error_message();

  // Between them the plan of capacity 128 serves.
  GqaTensors between = MakeGqaTensors(DecodeStep(80), rng_);
  const uint64_t misses = CacheInfo(op.get()).misses;
  PlanPtr reused = Plan(op.get(), between);
  ASSERT_TRUE(reused);
  EXPECT_EQ(CacheInfo(op.get()).misses, misses);
  EXPECT_EQ(RunPlan(reused.get(), between), ATTNRT_OK) << attnrt_last_error_message();
  EXPECT_EQ(between[ATTNRT_GQA_OUTPUT_OUTPUT].f32()[0], 500.0f);  // fake.gqa.top.x ran
}

}  // namespace
}  // namespace attnrt_test
