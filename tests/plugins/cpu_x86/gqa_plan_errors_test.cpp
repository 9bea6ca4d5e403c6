// End-to-end rejections through the public API (attnrt_op_create, attnrt_op_plan, attnrt_plan_run)
// with the real plugins: the status code, a message naming the offending input or attribute
// (ONNX Runtime's messages), and, for run-time rejections, outputs left untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

class GqaPlanErrorsTest : public testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  OpPtr MakeOp(const attnrt_gqa_attributes& attributes) {
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    return OpPtr(st == ATTNRT_OK ? op : nullptr);
  }

  // op_create must fail with INVALID_ARGUMENT naming `name`.
  void ExpectCreateRejected(const attnrt_gqa_attributes& attributes, const std::string& name) {
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &op);
    const std::string message = attnrt_last_error_message();
    OpPtr owner(op);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_EQ(op, nullptr);
    EXPECT_NE(message.find(name), std::string::npos)
        << "message does not name " << name << ": " << message;
  }

  // attnrt_op_plan (and attnrt_op_explain) must fail with INVALID_ARGUMENT naming `name`.
  void ExpectPlanRejected(attnrt_op* op, GqaTensors& t, const std::string& name) {
    attnrt_plan* plan = nullptr;
    attnrt_status st = attnrt_op_plan(op, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                      ATTNRT_GQA_NUM_OUTPUTS, &plan);
    std::string message = attnrt_last_error_message();
    PlanPtr owner(plan);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_EQ(plan, nullptr);
    EXPECT_NE(message.find(name), std::string::npos)
        << "plan message does not name " << name << ": " << message;
    attnrt_explanation* e = nullptr;
    st = attnrt_op_explain(op, t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                           ATTNRT_GQA_NUM_OUTPUTS, &e);
    message = attnrt_last_error_message();
    ExplanationPtr e_owner(e);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << "explain: " << message;
    EXPECT_NE(message.find(name), std::string::npos)
        << "explain message does not name " << name << ": " << message;
  }

  // Plans t, then run must fail with INVALID_ARGUMENT naming `name`, writing no output.
  void ExpectRunRejected(attnrt_op* op, GqaTensors& t, const std::string& name) {
    PlanPtr plan = Plan(op, t);
    ASSERT_TRUE(plan);
    for (auto& out : t.out) {
      if (!out.empty()) out.Fill(std::numeric_limits<float>::quiet_NaN());
    }
    const attnrt_status st = RunPlan(plan.get(), t);
    const std::string message = attnrt_last_error_message();
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_NE(message.find(name), std::string::npos)
        << "run message does not name " << name << ": " << message;
    for (size_t o = 0; o < t.out.size(); ++o) {
      const Tensor& out = t.out[o];
      if (out.empty()) continue;
      for (int64_t i = 0; i < out.numel(); ++i) {
        ASSERT_TRUE(std::isnan(out.f32()[i]))
            << "rejected run wrote output " << o << " element " << i;
      }
    }
  }

  SimpleGqa Decode() const {
    SimpleGqa g;
    g.batch = 2;
    g.seq = 1;
    g.num_heads = 4;
    g.kv_num_heads = 2;
    g.head_size = 16;
    g.past = 8;
    g.total = 9;
    g.present = true;
    g.seqlens = {8, 5};
    return g;
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

// ---- attributes (op_create)
// ------------------------------------------------------------------------
TEST_F(GqaPlanErrorsTest, NumHeadsNotMultipleOfKvNumHeads) {
  ExpectCreateRejected(GqaAttributes(3, 2), "num_heads");
}

TEST_F(GqaPlanErrorsTest, NonPositiveHeads) {
  ExpectCreateRejected(GqaAttributes(0, 1), "num_heads");
  ExpectCreateRejected(GqaAttributes(4, 0), "kv_num_heads");
}

TEST_F(GqaPlanErrorsTest, CausalMustBeZeroOrOne) {
  attnrt_gqa_attributes a = GqaAttributes(2, 1);
  a.causal = 2;
  ExpectCreateRejected(a, "causal");
}

// Non-finite scale/softcap would make whole rows NaN; attnrt rejects them by name.
TEST_F(GqaPlanErrorsTest, NonFiniteScaleAndSoftcap) {
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    attnrt_gqa_attributes a = GqaAttributes(4, 2);
    a.scale = bad;
    ExpectCreateRejected(a, "scale");
    a = GqaAttributes(4, 2);
    a.softcap = -bad;
    ExpectCreateRejected(a, "softcap");
  }
}

TEST_F(GqaPlanErrorsTest, NonCausalWithLocalWindow) {
  attnrt_gqa_attributes a = GqaAttributes(2, 1);
  a.causal = 0;
  a.local_window_size = 1;
  ExpectCreateRejected(a, "local_window_size");
}

// ---- shapes (plan)
// ---------------------------------------------------------------------------------
TEST_F(GqaPlanErrorsTest, QueryOfWrongRank) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_QUERY] = t[ATTNRT_GQA_INPUT_QUERY].View({4, 16});
  ExpectPlanRejected(op.get(), t, "query");
}

TEST_F(GqaPlanErrorsTest, HeadSizeNotMultipleOf8) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  SimpleGqa g;
  g.head_size = 12;
  GqaTensors t = MakeGqaTensors(g, rng_);
  ExpectPlanRejected(op.get(), t, "head_size");
}

TEST_F(GqaPlanErrorsTest, KeyHeadSizeDiffersFromQuery) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_KEY] = F32({1, 4, 16});
  t[ATTNRT_GQA_INPUT_VALUE] = F32({1, 4, 16});
  ExpectPlanRejected(op.get(), t, "key");
}

TEST_F(GqaPlanErrorsTest, ValueMissingWithKey) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_VALUE] = Tensor();
  ExpectPlanRejected(op.get(), t, "value");
}

TEST_F(GqaPlanErrorsTest, QueryOfWrongDtype) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_QUERY] = Tensor(kI32, {1, 4, 16});
  ExpectPlanRejected(op.get(), t, "query");
}

TEST_F(GqaPlanErrorsTest, MissingSeqlensK) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = Tensor();
  ExpectPlanRejected(op.get(), t, "seqlens_k");
}

TEST_F(GqaPlanErrorsTest, PastKeyOfWrongRank) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_PAST_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY].View({2, 2, 8 * 16});
  ExpectPlanRejected(op.get(), t, "past_key");
}

TEST_F(GqaPlanErrorsTest, PastKeyWithOtherKvHeads) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_PAST_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY].View({2, 1, 16, 16});
  ExpectPlanRejected(op.get(), t, "past_key");
}

TEST_F(GqaPlanErrorsTest, AttentionBiasOfWrongShape) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({1, 2, 3, 4});  // dim 2 must be S = 4
  ExpectPlanRejected(op.get(), t, "attention_bias");
  t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({1, 3, 4, 4});  // dim 1 must be N = 2 or 1
  ExpectPlanRejected(op.get(), t, "attention_bias");
}

TEST_F(GqaPlanErrorsTest, HeadSinkOfWrongShape) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_HEAD_SINK] = F32({3});
  ExpectPlanRejected(op.get(), t, "head_sink");
}

TEST_F(GqaPlanErrorsTest, QkOutputWithoutItsBuffer) {
  attnrt_gqa_attributes a = GqaAttributes(2, 1);
  a.qk_output = 1;
  OpPtr op = MakeOp(a);
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  ExpectPlanRejected(op.get(), t, "qk_output");
}

TEST_F(GqaPlanErrorsTest, QueryNormWeightIsRejectedOnCpu) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  t[ATTNRT_GQA_INPUT_Q_NORM_WEIGHT] = F32({8});
  ExpectPlanRejected(op.get(), t, "q_norm_weight");
}

TEST_F(GqaPlanErrorsTest, NonCompactStridesAreRejectedByName) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  attnrt_tensor query = *t[ATTNRT_GQA_INPUT_QUERY].get();
  const int64_t strides[3] = {64, 1, 4};  // a transposed view of (1, 4, 16)
  query.strides = strides;
  const attnrt_tensor* const* inputs = t.Inputs();
  const attnrt_tensor* patched[ATTNRT_GQA_NUM_INPUTS];
  std::copy(inputs, inputs + ATTNRT_GQA_NUM_INPUTS, patched);
  patched[ATTNRT_GQA_INPUT_QUERY] = &query;
  attnrt_plan* plan = nullptr;
  const attnrt_status st = attnrt_op_plan(op.get(), patched, ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                          ATTNRT_GQA_NUM_OUTPUTS, &plan);
  const std::string message = attnrt_last_error_message();
  PlanPtr owner(plan);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_NE(message.find("query"), std::string::npos) << message;
}

TEST_F(GqaPlanErrorsTest, ExplicitCompactStridesAreAccepted) {
  OpPtr op = MakeOp(GqaAttributes(2, 1));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(SimpleGqa{}, rng_);
  attnrt_tensor query = *t[ATTNRT_GQA_INPUT_QUERY].get();
  const int64_t strides[3] = {64, 16, 1};
  query.strides = strides;
  const attnrt_tensor* const* inputs = t.Inputs();
  const attnrt_tensor* patched[ATTNRT_GQA_NUM_INPUTS];
  std::copy(inputs, inputs + ATTNRT_GQA_NUM_INPUTS, patched);
  patched[ATTNRT_GQA_INPUT_QUERY] = &query;
  attnrt_plan* plan = nullptr;
  const attnrt_status st = attnrt_op_plan(op.get(), patched, ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                          ATTNRT_GQA_NUM_OUTPUTS, &plan);
  PlanPtr owner(plan);
  EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
}

// ---- values (run)
// ----------------------------------------------------------------------------------
TEST_F(GqaPlanErrorsTest, SeqlensKBeyondPresentLength) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_SEQLENS_K].i32()[1] = 9;  // present has max(T, P) = 9 rows
  ExpectRunRejected(op.get(), t, "seqlens_k");
}

TEST_F(GqaPlanErrorsTest, NegativeSeqlensK) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_SEQLENS_K].i32()[0] = -1;
  ExpectRunRejected(op.get(), t, "seqlens_k");
}

TEST_F(GqaPlanErrorsTest, SeqlensKNeedingMorePastThanTheBuffer) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  SimpleGqa g = Decode();
  g.total = 12;  // present 12 rows, past only 8
  g.seqlens = {10, 5};
  GqaTensors t = MakeGqaTensors(g, rng_);
  ExpectRunRejected(op.get(), t, "seqlens_k");
}

TEST_F(GqaPlanErrorsTest, NonPositiveTotalSequenceLength) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH].i32()[0] = 0;
  ExpectRunRejected(op.get(), t, "total_sequence_length");
}

// Its last dimension must be T, a value known only at run time.
TEST_F(GqaPlanErrorsTest, AttentionBiasNotMatchingTotalSequenceLength) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({2, 4, 1, 10});  // T is 9
  ExpectRunRejected(op.get(), t, "attention_bias");
}

TEST_F(GqaPlanErrorsTest, PositionIdOutOfRotaryCache) {
  attnrt_gqa_attributes a = GqaAttributes(4, 2);
  a.do_rotary = 1;
  OpPtr op = MakeOp(a);
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  t[ATTNRT_GQA_INPUT_COS_CACHE] = F32({16, 8});
  t[ATTNRT_GQA_INPUT_SIN_CACHE] = F32({16, 8});
  t[ATTNRT_GQA_INPUT_POSITION_IDS] = I64({3, 16}, {2, 1});  // 16 is outside [0, 16)
  ExpectRunRejected(op.get(), t, "position_ids");
}

// Kernels access elements through typed pointers: an element 0 that is not aligned to its size is
// rejected at run, naming the tensor, before anything is written (found by the fuzzer).
TEST_F(GqaPlanErrorsTest, MisalignedTensorAddresses) {
  OpPtr op = MakeOp(GqaAttributes(4, 2));
  ASSERT_TRUE(op);
  GqaTensors t = MakeGqaTensors(Decode(), rng_);
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  for (const bool misalign_output : {true, false}) {
    Tensor storage = F32({t[ATTNRT_GQA_OUTPUT_OUTPUT].numel() + 1});
    storage.Fill(std::numeric_limits<float>::quiet_NaN());
    std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_INPUTS> inputs{};
    std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_OUTPUTS> outputs{};
    std::copy_n(t.Inputs(), inputs.size(), inputs.begin());
    std::copy_n(t.Outputs(), outputs.size(), outputs.begin());
    attnrt_tensor moved;
    std::vector<int32_t> seqlens_bytes(8);
    if (misalign_output) {
      moved = *t[ATTNRT_GQA_OUTPUT_OUTPUT].get();
      moved.data = storage.data();
      moved.byte_offset = 2;
      outputs[ATTNRT_GQA_OUTPUT_OUTPUT] = &moved;
    } else {
      moved = *t[ATTNRT_GQA_INPUT_SEQLENS_K].get();
      std::memcpy(reinterpret_cast<char*>(seqlens_bytes.data()) + 1, moved.data,
                  2 * sizeof(int32_t));
      moved.data = seqlens_bytes.data();
      moved.byte_offset = 1;
      inputs[ATTNRT_GQA_INPUT_SEQLENS_K] = &moved;
    }
    const attnrt_status st = attnrt_plan_run(plan.get(), inputs.data(), inputs.size(),
                                             outputs.data(), outputs.size(), nullptr, 0, nullptr);
    const std::string message = attnrt_last_error_message();
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_NE(message.find(misalign_output ? "'output'" : "'seqlens_k'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("aligned to 4 bytes"), std::string::npos) << message;
    for (int64_t i = 0; i < storage.numel(); ++i) {
      ASSERT_TRUE(std::isnan(storage.f32()[i])) << "rejected run wrote element " << i;
    }
  }
}

}  // namespace
}  // namespace attnrt_test
