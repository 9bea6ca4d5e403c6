// Kernel ranking, pinning and disabling, through the fake plugin
// (tests/core/plugins/fake_plugin.c):
//   fake.gqa.top.x 500 (declines head_size 96), fake.gqa.mid.a 300, fake.gqa.mid.b 300,
//   fake.gqa.low.x 50. Each kernel's run() fills the output with a constant that names it.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr const char* kTop = "fake.gqa.top.x";
constexpr const char* kMidA = "fake.gqa.mid.a";
constexpr const char* kMidB = "fake.gqa.mid.b";
constexpr const char* kLow = "fake.gqa.low.x";

// The value each fake kernel writes into the output.
float Signature(const std::string& kernel) {
  if (kernel == kTop) return 500.0f;
  if (kernel == kMidA) return 300.0f;
  if (kernel == kMidB) return 301.0f;
  if (kernel == kLow) return 50.0f;
  return -1.0f;
}

struct Overrides {
  std::optional<std::string> kernel;   // options.kernel; nullopt = NULL (defer to ATTNRT_KERNEL)
  std::optional<std::string> disable;  // options.disable; nullopt = NULL (defer to ATTNRT_DISABLE)
  bool with_default_plugins = false;
};

class RegistryTest : public testing::Test {
 protected:
  // A runtime over the fake plugin folder only (plus the default plugins when asked).
  RuntimePtr MakeRuntime(const Overrides& o = {}) {
    fake_dir_ = ATTNRT_TEST_PLUGINS_FAKE;
    path_ = fake_dir_.c_str();
    attnrt_runtime_options options = DefaultOptions();
    options.plugin_paths = &path_;
    options.num_plugin_paths = 1;
    options.search_default_paths = o.with_default_plugins ? 1 : 0;
    options.kernel = o.kernel ? o.kernel->c_str() : nullptr;
    options.disable = o.disable ? o.disable->c_str() : nullptr;
    return CreateRuntime(options);
  }

  OpPtr MakeOp(attnrt_runtime* runtime) {
    const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    return OpPtr(st == ATTNRT_OK ? op : nullptr);
  }

  GqaTensors Tensors(int64_t head_size = 8) {
    SimpleGqa spec;
    spec.head_size = head_size;
    return MakeGqaTensors(spec, rng_);
  }

  // Plans with `overrides`, checks the chosen kernel and that running it is the one that wrote.
  void ExpectSelected(const Overrides& overrides, const std::string& kernel,
                      int64_t head_size = 8) {
    RuntimePtr runtime = MakeRuntime(overrides);
    ASSERT_TRUE(runtime);
    OpPtr op = MakeOp(runtime.get());
    ASSERT_TRUE(op);
    GqaTensors t = Tensors(head_size);
    PlanPtr plan = Plan(op.get(), t);
    ASSERT_TRUE(plan);
    EXPECT_EQ(PlanKernel(plan.get()), kernel);
    const attnrt_status st = RunPlan(plan.get(), t);
    ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
    const Tensor& out = t[ATTNRT_GQA_OUTPUT_OUTPUT];
    for (int64_t i = 0; i < out.numel(); ++i) {
      ASSERT_EQ(out.f32()[i], Signature(kernel)) << "element " << i << ": another kernel ran";
    }
  }

  std::vector<Candidate> ExplainWith(const Overrides& overrides, int64_t head_size = 8) {
    RuntimePtr runtime = MakeRuntime(overrides);
    if (!runtime) return {};
    OpPtr op = MakeOp(runtime.get());
    if (!op) return {};
    GqaTensors t = Tensors(head_size);
    return Explain(op.get(), t);
  }

  CleanAttnrtEnv env_;
  std::mt19937_64 rng_{TestSeed()};
  std::string fake_dir_;
  const char* path_ = nullptr;
};

struct Expected {
  const char* kernel;
  int32_t priority;
  int32_t status;
};

void ExpectCandidates(const std::vector<Candidate>& got, const std::vector<Expected>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("candidate " + std::to_string(i));
    EXPECT_EQ(got[i].kernel, expected[i].kernel);
    EXPECT_EQ(got[i].priority, expected[i].priority);
    EXPECT_EQ(got[i].status, expected[i].status)
        << "got " << attnrt_candidate_status_name(got[i].status) << " (" << got[i].reason
        << "), expected " << attnrt_candidate_status_name(expected[i].status);
    if (expected[i].status == ATTNRT_CANDIDATE_SELECTED ||
        expected[i].status == ATTNRT_CANDIDATE_ELIGIBLE) {
      EXPECT_EQ(got[i].reason, "");
    } else {
      EXPECT_NE(got[i].reason, "");
    }
  }
}

TEST_F(RegistryTest, ExplainListsKernelsByPriorityThenName) {
  ExpectCandidates(ExplainWith({}), {{kTop, 500, ATTNRT_CANDIDATE_SELECTED},
                                     {kMidA, 300, ATTNRT_CANDIDATE_ELIGIBLE},
                                     {kMidB, 300, ATTNRT_CANDIDATE_ELIGIBLE},
                                     {kLow, 50, ATTNRT_CANDIDATE_ELIGIBLE}});
  ExpectSelected({}, kTop);
}

TEST_F(RegistryTest, DecliningTopKernelFallsThroughToTheNext) {
  const auto candidates = ExplainWith({}, /*head_size=*/96);
  ExpectCandidates(candidates, {{kTop, 500, ATTNRT_CANDIDATE_DECLINED},
                                {kMidA, 300, ATTNRT_CANDIDATE_SELECTED},
                                {kMidB, 300, ATTNRT_CANDIDATE_ELIGIBLE},
                                {kLow, 50, ATTNRT_CANDIDATE_ELIGIBLE}});
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].reason, "head_size 96 unsupported");
  ExpectSelected({}, kMidA, /*head_size=*/96);
}

TEST_F(RegistryTest, PinByExactName) {
  Overrides o;
  o.kernel = kLow;
  ExpectCandidates(ExplainWith(o), {{kTop, 500, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kMidA, 300, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kMidB, 300, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kLow, 50, ATTNRT_CANDIDATE_SELECTED}});
  ExpectSelected(o, kLow);
}

TEST_F(RegistryTest, PinByGlobKeepsRankOrderAmongPinned) {
  Overrides o;
  o.kernel = "fake.gqa.mid.*";
  ExpectCandidates(ExplainWith(o), {{kTop, 500, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kMidA, 300, ATTNRT_CANDIDATE_SELECTED},
                                    {kMidB, 300, ATTNRT_CANDIDATE_ELIGIBLE},
                                    {kLow, 50, ATTNRT_CANDIDATE_NOT_PINNED}});
  ExpectSelected(o, kMidA);
}

TEST_F(RegistryTest, PinByCommaSeparatedList) {
  Overrides o;
  o.kernel = "fake.gqa.low.x,*mid.b";
  ExpectCandidates(ExplainWith(o), {{kTop, 500, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kMidA, 300, ATTNRT_CANDIDATE_NOT_PINNED},
                                    {kMidB, 300, ATTNRT_CANDIDATE_SELECTED},
                                    {kLow, 50, ATTNRT_CANDIDATE_ELIGIBLE}});
  ExpectSelected(o, kMidB);
}

TEST_F(RegistryTest, DisableByGlobs) {
  Overrides o;
  o.disable = "fake.gqa.mid.*,*top*";
  ExpectCandidates(ExplainWith(o), {{kTop, 500, ATTNRT_CANDIDATE_DISABLED},
                                    {kMidA, 300, ATTNRT_CANDIDATE_DISABLED},
                                    {kMidB, 300, ATTNRT_CANDIDATE_DISABLED},
                                    {kLow, 50, ATTNRT_CANDIDATE_SELECTED}});
  ExpectSelected(o, kLow);
}

TEST_F(RegistryTest, DisablingEverythingFailsPlanWithEveryReason) {
  Overrides o;
  o.disable = "*";
  ExpectCandidates(ExplainWith(o), {{kTop, 500, ATTNRT_CANDIDATE_DISABLED},
                                    {kMidA, 300, ATTNRT_CANDIDATE_DISABLED},
                                    {kMidB, 300, ATTNRT_CANDIDATE_DISABLED},
                                    {kLow, 50, ATTNRT_CANDIDATE_DISABLED}});
  RuntimePtr runtime = MakeRuntime(o);
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = Tensors();
  attnrt_plan* plan = nullptr;
  const attnrt_status st = attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                          ATTNRT_GQA_NUM_OUTPUTS, &plan);
  EXPECT_EQ(st, ATTNRT_ERROR_UNSUPPORTED) << LastError(st);
  EXPECT_EQ(plan, nullptr);
  attnrt_plan_release(plan);
  const std::string message = attnrt_last_error_message();
  for (const char* k : {kTop, kMidA, kMidB, kLow}) {
    EXPECT_NE(message.find(k), std::string::npos) << "message lacks " << k << ": " << message;
  }
  EXPECT_TRUE(ContainsI(message, "disabled")) << message;
}

TEST_F(RegistryTest, PinnedKernelThatDeclinesFailsWithItsReason) {
  Overrides o;
  o.kernel = kTop;
  RuntimePtr runtime = MakeRuntime(o);
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = Tensors(/*head_size=*/96);
  attnrt_plan* plan = nullptr;
  const attnrt_status st = attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                          ATTNRT_GQA_NUM_OUTPUTS, &plan);
  EXPECT_EQ(st, ATTNRT_ERROR_UNSUPPORTED) << LastError(st);
  attnrt_plan_release(plan);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find("head_size 96 unsupported"), std::string::npos) << message;
  for (const char* k : {kTop, kMidA, kMidB, kLow}) {
    EXPECT_NE(message.find(k), std::string::npos) << "message lacks " << k << ": " << message;
  }
}

TEST_F(RegistryTest, PinMatchingNothingFailsPlan) {
  Overrides o;
  o.kernel = "nomatch.*";
  const auto candidates = ExplainWith(o);
  ASSERT_EQ(candidates.size(), 4u);
  for (const auto& c : candidates) EXPECT_EQ(c.status, ATTNRT_CANDIDATE_NOT_PINNED) << c.kernel;
  RuntimePtr runtime = MakeRuntime(o);
  ASSERT_TRUE(runtime);
  OpPtr op = MakeOp(runtime.get());
  ASSERT_TRUE(op);
  GqaTensors t = Tensors();
  attnrt_plan* plan = nullptr;
  EXPECT_EQ(attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                           ATTNRT_GQA_NUM_OUTPUTS, &plan),
            ATTNRT_ERROR_UNSUPPORTED);
  attnrt_plan_release(plan);
}

TEST_F(RegistryTest, EnvironmentPin) {
  ScopedEnv pin("ATTNRT_KERNEL", kMidB);
  ExpectSelected({}, kMidB);
}

TEST_F(RegistryTest, EnvironmentDisable) {
  ScopedEnv disable("ATTNRT_DISABLE", "*top*");
  ExpectSelected({}, kMidA);
  const auto candidates = ExplainWith({});
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_DISABLED);
}

TEST_F(RegistryTest, EnvironmentPinAndDisableTogether) {
  ScopedEnv pin("ATTNRT_KERNEL", "fake.gqa.mid.*,fake.gqa.low.x");
  ScopedEnv disable("ATTNRT_DISABLE", "fake.gqa.mid.a");
  ExpectSelected({}, kMidB);
}

TEST_F(RegistryTest, OptionsWinOverEnvironment) {
  ScopedEnv pin("ATTNRT_KERNEL", kLow);
  ScopedEnv disable("ATTNRT_DISABLE", "fake.gqa.mid.b");
  Overrides o;
  o.kernel = kMidB;
  o.disable = "";
  ExpectSelected(o, kMidB);
}

TEST_F(RegistryTest, EmptyOptionStringsClearTheEnvironment) {
  ScopedEnv pin("ATTNRT_KERNEL", kLow);
  ScopedEnv disable("ATTNRT_DISABLE", "*");
  Overrides o;
  o.kernel = "";
  o.disable = "";
  ExpectSelected(o, kTop);
}

TEST_F(RegistryTest, RankingMergesPluginsByPriorityThenName) {
  Overrides o;
  o.with_default_plugins = true;
  const auto candidates = ExplainWith(o);
  ASSERT_GE(candidates.size(), 6u);
  EXPECT_EQ(candidates.front().kernel, kTop);
  EXPECT_EQ(candidates.back().kernel, kLow);
  for (size_t i = 1; i < candidates.size(); ++i) {
    const auto& a = candidates[i - 1];
    const auto& b = candidates[i];
    EXPECT_TRUE(a.priority > b.priority || (a.priority == b.priority && a.kernel < b.kernel))
        << a.kernel << " (" << a.priority << ") before " << b.kernel << " (" << b.priority << ")";
  }
  bool has_scalar = false;
  for (const auto& c : candidates)
    has_scalar = has_scalar || c.kernel == ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar";
  EXPECT_TRUE(has_scalar);
  int selected = 0;
  for (const auto& c : candidates) selected += c.status == ATTNRT_CANDIDATE_SELECTED ? 1 : 0;
  EXPECT_EQ(selected, 1);
}

TEST(CandidateStatusNames, AreStable) {
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_SELECTED), "selected");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_ELIGIBLE), "eligible");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_DECLINED), "declined");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_DISABLED), "disabled");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_NOT_PINNED), "not-pinned");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_UNAVAILABLE), "unavailable");
  EXPECT_STREQ(attnrt_candidate_status_name(ATTNRT_CANDIDATE_WRONG_DEVICE), "wrong-device");
  EXPECT_NE(attnrt_candidate_status_name(12345), nullptr);
}

}  // namespace
}  // namespace attnrt_test
