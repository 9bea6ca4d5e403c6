// Rejections of malformed PER_BLOCK_32 (ggml Q8_0 / Q4_0) KV-cache calls through the public API
// (attnrt/ops/gqa.h, ABI 1.7), for GQA and paged GQA: the status, and a message naming the input
// or attribute with the expected and the actual value. Each error case starts from a call that is
// checked to plan and run (so the error comes from the one change the case makes).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;

enum class Format { kQ8_0, kQ4_0 };

int64_t BlockBytes(Format f) { return f == Format::kQ8_0 ? 34 : 18; }
int32_t BitWidth(Format f) { return f == Format::kQ8_0 ? 8 : 4; }
const char* Name(Format f) { return f == Format::kQ8_0 ? "Q8_0" : "Q4_0"; }

constexpr int64_t kB = 2, kN = 4, kNkv = 2, kP = 8, kT = 9;

attnrt_gqa_attributes BlockAttributes(Format f) {
  attnrt_gqa_attributes a = GqaAttributes(kN, kNkv);
  a.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.kv_cache_bit_width = BitWidth(f);
  return a;
}

// Fills a cache with valid blocks: d = 1/64 (float16 0x2400) and random codes.
void FillBlocks(Tensor& t, int64_t block_bytes, std::mt19937_64& rng) {
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i) {
    const size_t in_block = i % static_cast<size_t>(block_bytes);
    p[i] = in_block == 0 ? 0x00 : in_block == 1 ? 0x24 : static_cast<uint8_t>(rng());
  }
}

// A decode step (B 2, N 4, Nkv 2, past 8 rows, T 9) over a block-quantized cache; `width` is the
// caches' last dimension (the right one when < 0), `cache` their dtype.
GqaTensors DecodeCall(Format f, int64_t H, std::mt19937_64& rng, int64_t width = -1,
                      attnrt_dtype cache = kU8) {
  if (width < 0) width = H / 32 * BlockBytes(f);
  GqaTensors t;
  t[ATTNRT_GQA_INPUT_QUERY] = F32({kB, 1, kN * H});
  t[ATTNRT_GQA_INPUT_KEY] = F32({kB, 1, kNkv * H});
  t[ATTNRT_GQA_INPUT_VALUE] = F32({kB, 1, kNkv * H});
  for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    t[i].FillNormal(rng);
  }
  for (auto i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
    t[i] = Tensor(cache, {kB, kNkv, kP, width});
    FillBlocks(t[i], BlockBytes(f), rng);
  }
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32({8, 5}, {kB});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(kT)}, {1});
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = F32({kB, 1, kN * H});
  for (auto o : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
    t[o] = Tensor(cache, {kB, kNkv, kT, width});
    std::memset(t[o].data(), 0xA5, t[o].bytes());
  }
  return t;
}

class GqaBlockQuantErrors : public testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  OpPtr MakeOp(const attnrt_gqa_attributes& a) {
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &a, &op);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
    return OpPtr(st == ATTNRT_OK ? op : nullptr);
  }

  // op_create must fail with INVALID_ARGUMENT; returns the message.
  std::string CreateRejected(const attnrt_gqa_attributes& a) {
    attnrt_op* op = nullptr;
    const attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &a, &op);
    const std::string message = attnrt_last_error_message();
    OpPtr owner(op);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_EQ(op, nullptr);
    return message;
  }

  // attnrt_op_plan must fail with INVALID_ARGUMENT, and explain with it; returns plan's message.
  std::string PlanRejected(const attnrt_gqa_attributes& a, GqaTensors& t) {
    OpPtr op = MakeOp(a);
    if (!op) return "";
    attnrt_plan* plan = nullptr;
    attnrt_status st = attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                                      ATTNRT_GQA_NUM_OUTPUTS, &plan);
    const std::string message = attnrt_last_error_message();
    PlanPtr owner(plan);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_EQ(plan, nullptr);
    attnrt_explanation* e = nullptr;
    st = attnrt_op_explain(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                           ATTNRT_GQA_NUM_OUTPUTS, &e);
    ExplanationPtr e_owner(e);
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << "explain: " << attnrt_last_error_message();
    return message;
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

// Every substring must be in the message.
void ExpectNames(const std::string& message, std::initializer_list<std::string> parts) {
  std::printf("[message] %s\n", message.c_str());
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "message does not name " << part << ": " << message;
  }
}

// The control: the well-formed call plans and runs (head sizes 32 to 256).
TEST_P(GqaBlockQuantErrors, WellFormedCallRuns) {
  SCOPED_TRACE(SeedTrace());
  for (const int64_t H : {32, 64, 256}) {
    SCOPED_TRACE("head_size " + std::to_string(H));
    GqaTensors t = DecodeCall(GetParam(), H, rng_);
    OpPtr op = MakeOp(BlockAttributes(GetParam()));
    ASSERT_TRUE(op);
    PlanPtr plan = Plan(op.get(), t);
    ASSERT_TRUE(plan);
    const attnrt_status st = RunPlan(plan.get(), t);
    EXPECT_EQ(st, ATTNRT_OK) << LastError(st);
  }
}

TEST_P(GqaBlockQuantErrors, ScalesMustBeAbsent) {
  SCOPED_TRACE(SeedTrace());
  for (const auto input : {ATTNRT_GQA_INPUT_K_SCALE, ATTNRT_GQA_INPUT_V_SCALE}) {
    const std::string name = input == ATTNRT_GQA_INPUT_K_SCALE ? "k_scale" : "v_scale";
    SCOPED_TRACE(name);
    GqaTensors t = DecodeCall(GetParam(), 64, rng_);
    t[input] = F32({1});
    t[input].Fill(0.5f);
    ExpectNames(PlanRejected(BlockAttributes(GetParam()), t), {name});
  }
}

TEST_P(GqaBlockQuantErrors, HeadSizeNotAMultipleOf32) {
  SCOPED_TRACE(SeedTrace());
  // 48 passes every other head-size rule (a multiple of 8); the cache rows are given 51 bytes
  // (48 · 34 / 32, the nearest to a Q8_0 row) or 27 (Q4_0).
  GqaTensors t = DecodeCall(GetParam(), 48, rng_, 48 * BlockBytes(GetParam()) / 32);
  ExpectNames(PlanRejected(BlockAttributes(GetParam()), t), {"head_size", "48", "32"});
}

TEST_P(GqaBlockQuantErrors, CacheMustBeUint8) {
  SCOPED_TRACE(SeedTrace());
  GqaTensors t = DecodeCall(GetParam(), 64, rng_, -1, kI8);
  ExpectNames(PlanRejected(BlockAttributes(GetParam()), t), {"past_key", "uint8", "int8"});
}

TEST_P(GqaBlockQuantErrors, CacheRowWidth) {
  SCOPED_TRACE(SeedTrace());
  const std::string expected = std::to_string(64 / 32 * BlockBytes(GetParam()));
  // H/2 (the int4 width), H (the int8 width), and one block too many.
  for (const int64_t width : {int64_t{32}, int64_t{64}, 3 * BlockBytes(GetParam())}) {
    SCOPED_TRACE("past_key width " + std::to_string(width));
    GqaTensors t = DecodeCall(GetParam(), 64, rng_, width);
    ExpectNames(PlanRejected(BlockAttributes(GetParam()), t),
                {"past_key", expected, std::to_string(width)});
  }
  // The past right, present_key's rows too narrow.
  GqaTensors t = DecodeCall(GetParam(), 64, rng_);
  t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = Tensor(kU8, {kB, kNkv, kT, 32});
  ExpectNames(PlanRejected(BlockAttributes(GetParam()), t), {"present_key", expected, "32"});
}

TEST_P(GqaBlockQuantErrors, QuantTypesMustMatch) {
  attnrt_gqa_attributes a = BlockAttributes(GetParam());
  a.v_quant_type = ATTNRT_GQA_QUANT_NONE;
  ExpectNames(CreateRejected(a), {"v_quant_type"});
  a = BlockAttributes(GetParam());
  a.k_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
  ExpectNames(CreateRejected(a), {"k_quant_type"});
}

TEST_P(GqaBlockQuantErrors, UnknownQuantType) {
  attnrt_gqa_attributes a = BlockAttributes(GetParam());
  a.k_quant_type = 4;
  a.v_quant_type = 4;
  ExpectNames(CreateRejected(a), {"k_quant_type", "4"});
}

TEST_P(GqaBlockQuantErrors, BitWidthMustBe4Or8) {
  for (const int32_t bits : {0, 2, 16}) {
    SCOPED_TRACE("kv_cache_bit_width " + std::to_string(bits));
    attnrt_gqa_attributes a = BlockAttributes(GetParam());
    a.kv_cache_bit_width = bits;
    ExpectNames(CreateRejected(a), {"kv_cache_bit_width", std::to_string(bits)});
  }
}

// Paged GQA: the pools follow the same rules (key_cache/value_cache in place of past_key).
TEST_P(GqaBlockQuantErrors, PagedPoolRowWidthAndScales) {
  SCOPED_TRACE(SeedTrace());
  const Format f = GetParam();
  const int64_t H = 64, block_size = 16, num_blocks = 4;
  const std::string expected = std::to_string(H / 32 * BlockBytes(f));
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = BlockAttributes(f);
  a.block_size = static_cast<int32_t>(block_size);
  attnrt_op* raw = nullptr;
  attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_PAGED_GQA, &a, &raw);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw);

  // width < 0: the right one; scale: a k_scale input.
  auto attempt = [&](int64_t width, bool scale, std::string* message) {
    std::vector<Tensor> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = F32({1, 1, kN * H});
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = F32({1, 1, kNkv * H});
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = F32({1, 1, kNkv * H});
    for (auto i :
         {ATTNRT_PAGED_GQA_INPUT_QUERY, ATTNRT_PAGED_GQA_INPUT_KEY, ATTNRT_PAGED_GQA_INPUT_VALUE}) {
      in[i].FillNormal(rng_);
    }
    for (auto i : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
      in[i] =
          Tensor(kU8, {num_blocks, block_size, kNkv, width < 0 ? H / 32 * BlockBytes(f) : width});
      FillBlocks(in[i], BlockBytes(f), rng_);
    }
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({20}, {1});
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({21}, {1});
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32({2, 0}, {1, 2});
    if (scale) {
      in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = F32({1});
      in[ATTNRT_PAGED_GQA_INPUT_K_SCALE].Fill(0.5f);
    }
    Tensor out = F32({1, 1, kN * H});
    std::vector<const attnrt_tensor*> ins;
    for (auto& x : in) ins.push_back(x.empty() ? nullptr : x.get());
    const attnrt_tensor* outs[] = {out.get(), nullptr};
    attnrt_plan* plan = nullptr;
    attnrt_status s = attnrt_op_plan(op.get(), ins.data(), ins.size(), outs, 2, &plan);
    PlanPtr owner(plan);
    if (s == ATTNRT_OK)
      s = attnrt_plan_run(plan, ins.data(), ins.size(), outs, 2, nullptr, 0, nullptr);
    *message = s == ATTNRT_OK ? "" : attnrt_last_error_message();
    return s;
  };
  std::string message;
  st = attempt(-1, false, &message);
  ASSERT_EQ(st, ATTNRT_OK) << message;  // the control
  st = attempt(32, false, &message);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
  ExpectNames(message, {"key_cache", expected, "32"});
  st = attempt(-1, true, &message);
  EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
  ExpectNames(message, {"k_scale"});
}

std::string FormatName(const testing::TestParamInfo<Format>& param) { return Name(param.param); }

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaBlockQuantErrors,
                         testing::Values(Format::kQ8_0, Format::kQ4_0), FormatName);

}  // namespace
}  // namespace attnrt_test
