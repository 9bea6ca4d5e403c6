// A paged varlen kernel of a plugin built against the ABI 1.4 or the ABI 1.7 headers
// (tests/core/plugins/old_abi_paged_plugin.c, compiled against copies of them) keeps working under
// ABI 1.5, which appended p_precision to attnrt_paged_gqa_problem, and ABI 1.8, which appended
// v_head_size, each moving the varlen problem's own fields: the runtime hands it the problem in the
// layout it was built for (docs/plugins.md, "The plugin ABI"). The fixture reads the fields through
// its own structs and writes them into the output; the values expected here are the tensors' own.
// A problem its layout cannot describe is refused for it, with the reason: INPUT (ABI 1.4), a
// PER_BLOCK_32 (ggml Q8_0/Q4_0) cache of ABI 1.7 (ABI 1.4: its uint8 pools would read as an int4
// or int8 cache) and a value head size other than head_size (both: it would read value rows as
// head_size wide).
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"
#include "core/plugins/old_abi_paged_plugin.h"

namespace {

using namespace attnrt_test;

// One fixture plugin: its folder, name and ABI minor version.
struct OldAbi {
  const char* folder;
  const char* plugin;
  int minor;
};
void PrintTo(const OldAbi& abi, std::ostream* os) { *os << abi.plugin; }

const OldAbi kAbi14{ATTNRT_TEST_PLUGINS_ABI14, "abi14paged", 4};
const OldAbi kAbi17{ATTNRT_TEST_PLUGINS_ABI17, "abi17paged", 7};

std::string VarlenKernel(const OldAbi& abi) {
  return std::string(abi.plugin) + ".paged_gqa_varlen.fixture.scalar";
}

std::string Refusal(const OldAbi& abi, const std::string& feature, int needs_minor) {
  return VarlenKernel(abi) + ": plugin '" + abi.plugin + "' was built for ABI 1." +
         std::to_string(abi.minor) + ", and " + feature + " needs ABI 1." +
         std::to_string(needs_minor);
}

constexpr int64_t kHeads = 2, kKvHeads = 1, kHeadSize = 8;
constexpr int64_t kBlockSizeValue = 4, kNumBlocksValue = 9, kSlots = 3;
// Two sequences of 3 and 1 new rows (6 rows: the last 2 are an engine's padding), contexts 5 and 9.
constexpr int64_t kTokens = 6;

RuntimePtr OldAbiRuntime(const OldAbi& abi) {
  const char* paths[] = {abi.folder};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  return CreateRuntime(options);
}

struct Call {
  // BNSH pools [num_blocks, Nkv, block_size, H]: dimension 0 strides Nkv * block_size * H.
  Tensor key_cache = F32({kNumBlocksValue, kKvHeads, kBlockSizeValue, kHeadSize});
  Tensor value_cache = F32({kNumBlocksValue, kKvHeads, kBlockSizeValue, kHeadSize});
  Tensor query = F32({kTokens, kHeads* kHeadSize});
  Tensor key = F32({kTokens, kKvHeads* kHeadSize});
  Tensor value = F32({kTokens, kKvHeads* kHeadSize});
  Tensor query_start_loc = I32({0, 3, 4}, {3});
  Tensor seq_lens = I32({5, 9}, {2});
  Tensor block_table = I32({0, 1, -1, 2, 3, 4}, {2, kSlots});
  // Row i of sequence 0 is token 2 + i (blocks 0, 1); row 0 of sequence 1 is token 8 (block 4).
  Tensor slot_mapping = I64({2, 3, 4, 4 * 4 + 0, -1, -1}, {kTokens});
  Tensor output = F32({kTokens, kHeads* kHeadSize});
  std::vector<const attnrt_tensor*> in;

  explicit Call(bool with_slot_mapping) {
    for (Tensor* t : {&key_cache, &value_cache, &query, &key, &value}) t->Fill(0.5f);
    output.Fill(-7.0f);
    in.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = query.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = key.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = value.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = key_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = value_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = query_start_loc.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = seq_lens.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = block_table.get();
    if (with_slot_mapping) in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = slot_mapping.get();
  }
  const attnrt_tensor* const* outputs() {
    out_ = output.get();
    return &out_;
  }

 private:
  const attnrt_tensor* out_ = nullptr;
};

OpPtr VarlenOp(attnrt_runtime* runtime, int32_t p_precision) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = kHeads;
  a.gqa.kv_num_heads = kKvHeads;
  a.block_size = kBlockSizeValue;
  a.kv_layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  a.p_precision = p_precision;
  attnrt_op* op = nullptr;
  const attnrt_status s = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA_VARLEN, &a, &op);
  EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
  return OpPtr(op);
}

// The candidates of explain, "kernel: reason".
std::vector<std::string> ExplainVarlen(attnrt_op* op, Call& call) {
  std::vector<std::string> out;
  for (const Candidate& c : Explain(op, call.in.data(), call.in.size(), call.outputs(), 1)) {
    out.push_back(c.kernel + ": " + c.reason +
                  (c.status == ATTNRT_CANDIDATE_SELECTED ? " (selected)" : ""));
  }
  return out;
}

class PagedVarlenOldAbi : public ::testing::TestWithParam<OldAbi> {};

TEST_P(PagedVarlenOldAbi, KernelReadsTheProblemInTheLayoutItWasBuiltFor) {
  CleanAttnrtEnv env;
  const std::string kernel = VarlenKernel(GetParam());
  RuntimePtr runtime = OldAbiRuntime(GetParam());
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT);
  ASSERT_TRUE(op);
  for (bool with_slot_mapping : {true, false}) {
    SCOPED_TRACE(with_slot_mapping ? "with slot_mapping" : "without slot_mapping");
    Call call(with_slot_mapping);
    const std::vector<std::string> explained = ExplainVarlen(op.get(), call);
    ASSERT_EQ(explained.size(), 1u);
    EXPECT_EQ(explained[0], kernel + ":  (selected)");

    attnrt_plan* raw = nullptr;
    attnrt_status s =
        attnrt_op_plan(op.get(), call.in.data(), call.in.size(), call.outputs(), 1, &raw);
    ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
    PlanPtr plan(raw);
    EXPECT_EQ(PlanKernel(plan.get()), kernel);
    // workspace_size() read num_tokens and has_slot_mapping at that version's offsets.
    attnrt_plan_info info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
    const size_t workspace = kTokens * 64 + (with_slot_mapping ? 1 : 0);
    EXPECT_EQ(info.workspace_size, workspace);

    // Two runs of the plan: run() gets the problem workspace_size() saw at plan time.
    for (int run = 0; run < 2; ++run) {
      call.output.Fill(-7.0f);
      s = attnrt_plan_run(plan.get(), call.in.data(), call.in.size(), call.outputs(), 1, nullptr, 0,
                          nullptr);
      ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
      const float* out = call.output.f32();
      EXPECT_EQ(out[kOutNumTokens], kTokens);
      EXPECT_EQ(out[kOutHasSlotMapping], with_slot_mapping ? 1.0f : 0.0f);
      EXPECT_EQ(out[kOutMaxBlocksPerSeq], kSlots);
      EXPECT_EQ(out[kOutBlockSize], kBlockSizeValue);
      EXPECT_EQ(out[kOutNumBlocks], kNumBlocksValue);
      EXPECT_EQ(out[kOutKvLayout], ATTNRT_PAGED_KV_LAYOUT_BNSH);
      EXPECT_EQ(out[kOutBatchSize], 2);
      EXPECT_EQ(out[kOutNumHeads], kHeads);
      EXPECT_EQ(out[kOutKvNumHeads], kKvHeads);
      EXPECT_EQ(out[kOutHeadSize], kHeadSize);
      EXPECT_EQ(out[kOutKeyCacheStride0], kKvHeads * kBlockSizeValue * kHeadSize);
      EXPECT_EQ(out[kOutValueCacheStride0], kKvHeads * kBlockSizeValue * kHeadSize);
      EXPECT_EQ(out[kOutMaxQueryLen], 3);
      EXPECT_EQ(out[kOutLastQueryStart], 4);
      EXPECT_EQ(out[kOutWorkspaceSize], static_cast<float>(workspace));
      EXPECT_EQ(out[kOutSameProblemAsPlan], 1.0f);
      EXPECT_EQ(out[kOutCount], -7.0f) << "the fixture writes " << kOutCount << " elements only";
    }
  }
}

TEST(PagedVarlenAbi14, InputProblemIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = OldAbiRuntime(kAbi14);
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_INPUT);
  ASSERT_TRUE(op);
  Call call(true);
  const std::vector<std::string> explained = ExplainVarlen(op.get(), call);
  ASSERT_EQ(explained.size(), 1u);
  EXPECT_EQ(explained[0], Refusal(kAbi14, "p_precision INPUT", 5));
  attnrt_plan* raw = nullptr;
  const attnrt_status s =
      attnrt_op_plan(op.get(), call.in.data(), call.in.size(), call.outputs(), 1, &raw);
  PlanPtr plan(raw);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find("p_precision INPUT needs ABI 1.5"), std::string::npos) << message;
  for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(call.output.f32()[i], -7.0f) << i;
}

// ABI 1.7's PER_BLOCK_32 caches are not offered to the ABI 1.4 kernel: its attributes have the
// field, but an int8/int4 reading of the blocks would be wrong. Nothing is written.
TEST(PagedVarlenAbi14, BlockQuantizedCacheIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = OldAbiRuntime(kAbi14);
  ASSERT_TRUE(runtime);
  for (int32_t bits : {8, 4}) {
    SCOPED_TRACE(bits == 8 ? "Q8_0" : "Q4_0");
    constexpr int64_t kBlockHeadSize = 32;
    const int64_t row_bytes =
        bits == 8 ? ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES : ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES;
    const attnrt_dtype u8{ATTNRT_DTYPE_CODE_UINT, 8, 1};
    Tensor key_cache(u8, {kNumBlocksValue, kKvHeads, kBlockSizeValue, row_bytes});
    Tensor value_cache(u8, {kNumBlocksValue, kKvHeads, kBlockSizeValue, row_bytes});
    Tensor query = F32({kTokens, kHeads * kBlockHeadSize});
    Tensor key = F32({kTokens, kKvHeads * kBlockHeadSize});
    Tensor value = F32({kTokens, kKvHeads * kBlockHeadSize});
    Tensor query_start_loc = I32({0, 3, 4}, {3});
    Tensor seq_lens = I32({5, 9}, {2});
    Tensor block_table = I32({0, 1, -1, 2, 3, 4}, {2, kSlots});
    Tensor output = F32({kTokens, kHeads * kBlockHeadSize});
    for (Tensor* t : {&key_cache, &value_cache}) std::memset(t->data(), 0, t->bytes());
    for (Tensor* t : {&query, &key, &value}) t->Fill(0.5f);
    output.Fill(-7.0f);
    std::vector<const attnrt_tensor*> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = query.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = key.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = value.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = key_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = value_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = query_start_loc.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = seq_lens.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = block_table.get();
    const attnrt_tensor* out = output.get();

    attnrt_paged_gqa_attributes a;
    attnrt_paged_gqa_attributes_init(&a);
    a.gqa.num_heads = kHeads;
    a.gqa.kv_num_heads = kKvHeads;
    a.gqa.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    a.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    a.gqa.kv_cache_bit_width = bits;
    a.block_size = kBlockSizeValue;
    a.kv_layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
    attnrt_op* raw_op = nullptr;
    attnrt_status s = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA_VARLEN, &a, &raw_op);
    ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
    OpPtr op(raw_op);
    const std::string feature =
        std::string("a PER_BLOCK_32 (") + (bits == 8 ? "Q8_0" : "Q4_0") + ") KV cache";
    const std::vector<Candidate> candidates = Explain(op.get(), in.data(), in.size(), &out, 1);
    ASSERT_EQ(candidates.size(), 1u);
    EXPECT_EQ(candidates[0].kernel + ": " + candidates[0].reason, Refusal(kAbi14, feature, 7));
    attnrt_plan* raw = nullptr;
    s = attnrt_op_plan(op.get(), in.data(), in.size(), &out, 1, &raw);
    PlanPtr plan(raw);
    EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
    const std::string message = attnrt_last_error_message();
    EXPECT_NE(message.find(feature + " needs ABI 1.7"), std::string::npos) << message;
    for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(output.f32()[i], -7.0f) << i;
  }
}

// ABI 1.8's value head size is not offered to either: they would read value rows, and write
// output rows, head_size wide. Nothing is written.
TEST_P(PagedVarlenOldAbi, ValueHeadSizeIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = OldAbiRuntime(GetParam());
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT);
  ASSERT_TRUE(op);
  constexpr int64_t kValueHeadSize = 2 * kHeadSize;
  Call call(true);
  call.value_cache = F32({kNumBlocksValue, kKvHeads, kBlockSizeValue, kValueHeadSize});
  call.value = F32({kTokens, kKvHeads * kValueHeadSize});
  call.output = F32({kTokens, kHeads * kValueHeadSize});
  for (Tensor* t : {&call.value_cache, &call.value}) t->Fill(0.5f);
  call.output.Fill(-7.0f);
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = call.value_cache.get();
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = call.value.get();
  const std::vector<std::string> explained = ExplainVarlen(op.get(), call);
  ASSERT_EQ(explained.size(), 1u);
  EXPECT_EQ(explained[0], Refusal(GetParam(), "a value head size other than head_size", 8));
  attnrt_plan* raw = nullptr;
  const attnrt_status s =
      attnrt_op_plan(op.get(), call.in.data(), call.in.size(), call.outputs(), 1, &raw);
  PlanPtr plan(raw);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(call.output.f32()[i], -7.0f) << i;
}

INSTANTIATE_TEST_SUITE_P(Layouts, PagedVarlenOldAbi, ::testing::Values(kAbi14, kAbi17),
                         [](const ::testing::TestParamInfo<OldAbi>& param_info) {
                           return std::string(param_info.param.plugin);
                         });

}  // namespace
