// A paged varlen kernel of a plugin built against the ABI 1.4, 1.7 or 1.8 headers
// (tests/core/plugins/old_abi_paged_plugin.c, compiled against copies of them) keeps working under
// ABI 1.5, which appended p_precision to attnrt_paged_gqa_problem, ABI 1.8, which appended
// v_head_size, and ABI 1.9, which appended value_cache_dtype and v_cache_bit_width, each moving the
// varlen problem's own fields: the runtime hands it the problem in the layout it was built for
// (docs/plugins.md, "The plugin ABI"). The fixture reads the fields through its own structs and
// writes them into the output; the values expected here are the tensors' own.
// A problem its layout cannot describe is refused for it, with the reason: INPUT (ABI 1.4), a
// PER_BLOCK_32 (ggml Q8_0/Q4_0) cache of ABI 1.7 (ABI 1.4: its uint8 pools would read as an int4
// or int8 cache), a value head size other than head_size (ABI 1.4 and 1.7: it would read value rows
// as head_size wide) and a value_cache type other than key_cache's (all three: it would read value
// rows as key_cache's type). Everything else is offered as before: pools of one type, whether
// v_cache_own_type is left at its default or names key_cache's type.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
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

// One fixture plugin: its folder, name and ABI minor version, and its version's layout of the
// varlen problem on LP64 (x86-64, AArch64): sizeof of the varlen and the paged problem and the
// offsets of num_tokens and has_slot_mapping (ABI 1.9: 392, 368, 376, 384).
struct OldAbi {
  const char* folder;
  const char* plugin;
  int minor;
  size_t varlen_problem_size;
  size_t paged_problem_size;
  size_t num_tokens_offset;
  size_t has_slot_mapping_offset;
};
void PrintTo(const OldAbi& abi, std::ostream* os) { *os << abi.plugin; }

const OldAbi kAbi14{ATTNRT_TEST_PLUGINS_ABI14, "abi14paged", 4, 368, 344, 352, 360};
const OldAbi kAbi17{ATTNRT_TEST_PLUGINS_ABI17, "abi17paged", 7, 376, 352, 360, 368};
const OldAbi kAbi18{ATTNRT_TEST_PLUGINS_ABI18, "abi18paged", 8, 384, 360, 368, 376};

// The current layout moved the varlen problem's fields past every older one's.
static_assert(sizeof(attnrt_paged_gqa_problem) > 360);
static_assert(offsetof(attnrt_paged_gqa_varlen_problem, num_tokens) > 368);

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

// A runtime with the fixture plugin only; `kernel` pins kernels (options.kernel) when given.
RuntimePtr OldAbiRuntime(const OldAbi& abi, const char* kernel = nullptr) {
  const char* paths[] = {abi.folder};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  options.kernel = kernel;
  return CreateRuntime(options);
}

// The fields the fixture reports about its own layout, and the version's fields it read.
void ExpectLayout(const OldAbi& abi, const float* out) {
  EXPECT_EQ(out[kOutVarlenProblemSize], static_cast<float>(abi.varlen_problem_size));
  EXPECT_EQ(out[kOutPagedProblemSize], static_cast<float>(abi.paged_problem_size));
  EXPECT_EQ(out[kOutNumTokensOffset], static_cast<float>(abi.num_tokens_offset));
  EXPECT_EQ(out[kOutHasSlotMappingOffset], static_cast<float>(abi.has_slot_mapping_offset));
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

OpPtr VarlenOp(attnrt_runtime* runtime, int32_t p_precision, int32_t do_rotary = 0,
               int32_t alibi_form = ATTNRT_ALIBI_FORM_SIGNED) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = kHeads;
  a.gqa.kv_num_heads = kKvHeads;
  a.gqa.do_rotary = do_rotary;
  a.block_size = kBlockSizeValue;
  a.kv_layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  a.p_precision = p_precision;
  a.alibi_form = alibi_form;
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

// Planning the call fails UNSUPPORTED with a message that contains `expected`.
void ExpectPlanUnsupported(attnrt_op* op, Call& call, const std::string& expected) {
  attnrt_plan* raw = nullptr;
  const attnrt_status s =
      attnrt_op_plan(op, call.in.data(), call.in.size(), call.outputs(), 1, &raw);
  PlanPtr plan(raw);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find(expected), std::string::npos) << message;
}

class PagedVarlenOldAbi : public ::testing::TestWithParam<OldAbi> {};

TEST_P(PagedVarlenOldAbi, KernelReadsTheProblemInTheLayoutItWasBuiltFor) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  const std::string kernel = VarlenKernel(abi);
  RuntimePtr runtime = OldAbiRuntime(abi);
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT);
  ASSERT_TRUE(op);
  // A caller built before ABI 1.10 passes the 12 inputs it knows (no key_start_loc): the same
  // signature, so the same plan, as the call before it.
  for (const auto& [with_slot_mapping, num_inputs] :
       {std::pair{true, size_t{ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS}}, std::pair{true, size_t{12}},
        std::pair{false, size_t{ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS}}}) {
    SCOPED_TRACE(with_slot_mapping ? "with slot_mapping" : "without slot_mapping");
    SCOPED_TRACE(::testing::Message() << num_inputs << " inputs");
    Call call(with_slot_mapping);
    call.in.resize(num_inputs);
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
      ExpectLayout(abi, out);
      EXPECT_EQ(out[kOutPPrecision], abi.minor >= 5 ? ATTNRT_P_PRECISION_EXACT : -1);
      EXPECT_EQ(out[kOutValueHeadSize], abi.minor >= 8 ? kHeadSize : -1);
      EXPECT_EQ(out[kOutKQuantType], ATTNRT_GQA_QUANT_NONE);
      EXPECT_EQ(out[kOutVQuantType], ATTNRT_GQA_QUANT_NONE);
      EXPECT_EQ(out[kOutKvCacheBitWidth], 0);
      EXPECT_EQ(out[kOutCacheDtypeCode], ATTNRT_DTYPE_CODE_FLOAT);
      EXPECT_EQ(out[kOutCacheDtypeBits], 32);
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
  ExpectPlanUnsupported(op.get(), call, "p_precision INPUT needs ABI 1.5");
  for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(call.output.f32()[i], -7.0f) << i;
}

// ABI 1.7's PER_BLOCK_32 caches are not offered to the ABI 1.4 kernel: its attributes have the
// field, but an int8/int4 reading of the blocks would be wrong. Nothing is written.
// A quantized cache (`quant`, `bits`; pools of `cache_dtype` with rows of `row_length`, head size
// `head_size`; float32 k_scale/v_scale when `scales`) that the fixture's plugin was built too old
// for: explain gives the runtime's reason, planning fails UNSUPPORTED naming `feature` and the
// version it needs, and nothing is written.
void ExpectCacheRefused(const OldAbi& abi, attnrt_dtype cache_dtype, int64_t row_length,
                        int64_t head_size, int32_t quant, int32_t bits, bool scales,
                        const std::string& feature, int needs_minor) {
  SCOPED_TRACE(feature);
  RuntimePtr runtime = OldAbiRuntime(abi);
  ASSERT_TRUE(runtime);
  Tensor key_cache(cache_dtype, {kNumBlocksValue, kKvHeads, kBlockSizeValue, row_length});
  Tensor value_cache(cache_dtype, {kNumBlocksValue, kKvHeads, kBlockSizeValue, row_length});
  Tensor query = F32({kTokens, kHeads * head_size});
  Tensor key = F32({kTokens, kKvHeads * head_size});
  Tensor value = F32({kTokens, kKvHeads * head_size});
  Tensor query_start_loc = I32({0, 3, 4}, {3});
  Tensor seq_lens = I32({5, 9}, {2});
  Tensor block_table = I32({0, 1, -1, 2, 3, 4}, {2, kSlots});
  Tensor k_scale = F32({1});
  Tensor v_scale = F32({1});
  Tensor output = F32({kTokens, kHeads * head_size});
  for (Tensor* t : {&key_cache, &value_cache}) std::memset(t->data(), 0, t->bytes());
  for (Tensor* t : {&query, &key, &value, &k_scale, &v_scale}) t->Fill(0.5f);
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
  if (scales) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE] = k_scale.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE] = v_scale.get();
  }
  const attnrt_tensor* out = output.get();

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = kHeads;
  a.gqa.kv_num_heads = kKvHeads;
  a.gqa.k_quant_type = quant;
  a.gqa.v_quant_type = quant;
  a.gqa.kv_cache_bit_width = bits;
  a.block_size = kBlockSizeValue;
  a.kv_layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  attnrt_op* raw_op = nullptr;
  attnrt_status s = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA_VARLEN, &a, &raw_op);
  ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
  OpPtr op(raw_op);
  const std::vector<Candidate> candidates = Explain(op.get(), in.data(), in.size(), &out, 1);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].kernel + ": " + candidates[0].reason, Refusal(abi, feature, needs_minor));
  attnrt_plan* raw = nullptr;
  s = attnrt_op_plan(op.get(), in.data(), in.size(), &out, 1, &raw);
  PlanPtr plan(raw);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find(feature + " needs ABI 1." + std::to_string(needs_minor)),
            std::string::npos)
      << message;
  for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(output.f32()[i], -7.0f) << i;
}

TEST(PagedVarlenAbi14, BlockQuantizedCacheIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  constexpr int64_t kBlockHeadSize = 32;
  for (int32_t bits : {8, 4}) {
    const int64_t row_bytes =
        bits == 8 ? ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES : ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES;
    ExpectCacheRefused(
        kAbi14, ATTNRT_DTYPE_UINT8, row_bytes, kBlockHeadSize, ATTNRT_GQA_QUANT_PER_BLOCK_32, bits,
        false, std::string("a PER_BLOCK_32 (") + (bits == 8 ? "Q8_0" : "Q4_0") + ") KV cache", 7);
  }
}

// The plugins built before ABI 1.8.
class PagedVarlenBeforeAbi18 : public ::testing::TestWithParam<OldAbi> {};

// ABI 1.8's value head size is not offered to either: they would read value rows, and write
// output rows, head_size wide. Nothing is written.
TEST_P(PagedVarlenBeforeAbi18, ValueHeadSizeIsRefusedWithTheReason) {
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

// ---- Cache types (ABI 1.9): value_cache may have a type of its own ------------------------------

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBf16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;

// One pool's type: its quant type and bit width (the attributes') and its dtype.
struct PoolType {
  const char* name;
  int32_t quant;
  int32_t bits;
  attnrt_dtype dtype;
};
const PoolType kPoolF32{"float32", ATTNRT_GQA_QUANT_NONE, 0, kF32};
const PoolType kPoolF16{"float16", ATTNRT_GQA_QUANT_NONE, 0, kF16};
const PoolType kPoolBf16{"bfloat16", ATTNRT_GQA_QUANT_NONE, 0, kBf16};
const PoolType kPoolQ8{"Q8_0", ATTNRT_GQA_QUANT_PER_BLOCK_32, 8, kU8};
const PoolType kPoolQ4{"Q4_0", ATTNRT_GQA_QUANT_PER_BLOCK_32, 4, kU8};

// A pool's last dimension for rows of `head` elements: the elements, or the bytes of head / 32
// blocks.
int64_t RowLength(const PoolType& type, int64_t head) {
  if (type.quant == ATTNRT_GQA_QUANT_NONE) return head;
  return head / 32 *
         (type.bits == 8 ? ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES : ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES);
}

// The pools' types and head sizes of a call. value_type_given: v_cache_own_type 1,
// v_cache_bit_width (and v_quant_type) name value's type; else v_cache_own_type keeps its default 0
// and value must be key's type (as before ABI 1.9).
struct CacheCase {
  PoolType key;
  PoolType value;
  bool value_type_given;
  int64_t head_size;
  int64_t v_head_size;
};

std::string Name(const CacheCase& c) {
  return std::string("key_cache ") + c.key.name + ", value_cache " + c.value.name +
         (c.value_type_given
              ? " (v_cache_own_type 1, v_cache_bit_width " + std::to_string(c.value.bits) + ")"
              : " (v_cache_own_type 0)") +
         ", H " + std::to_string(c.head_size) + ", Hv " + std::to_string(c.v_head_size);
}

// The query type T: key_cache's when it is not quantized, else float32.
attnrt_dtype QueryType(const CacheCase& c) {
  return c.key.quant == ATTNRT_GQA_QUANT_NONE ? c.key.dtype : kF32;
}

OpPtr CacheOp(attnrt_runtime* runtime, const CacheCase& c,
              int32_t p_precision = ATTNRT_P_PRECISION_EXACT) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  EXPECT_EQ(a.v_cache_own_type, 0);
  a.gqa.num_heads = kHeads;
  a.gqa.kv_num_heads = kKvHeads;
  a.gqa.k_quant_type = c.key.quant;
  a.gqa.kv_cache_bit_width = c.key.bits;
  if (c.value_type_given) {
    a.gqa.v_quant_type = c.value.quant;
    a.v_cache_own_type = 1;
    a.v_cache_bit_width = c.value.bits;
  } else {
    a.gqa.v_quant_type = c.key.quant;
  }
  a.block_size = kBlockSizeValue;
  a.kv_layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  a.p_precision = p_precision;
  attnrt_op* op = nullptr;
  const attnrt_status s = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA_VARLEN, &a, &op);
  EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
  return OpPtr(op);
}

// Call's sequences (with slot_mapping) over BNSH pools of the case's types; every input zero (a
// zero of every type, scales included), the output -7.0f (float32) or bytes 0xA5.
struct CacheCall {
  Tensor key_cache, value_cache, query, key, value, output, initial_output;
  Tensor query_start_loc = I32({0, 3, 4}, {3});
  Tensor seq_lens = I32({5, 9}, {2});
  Tensor block_table = I32({0, 1, -1, 2, 3, 4}, {2, kSlots});
  Tensor slot_mapping = I64({2, 3, 4, 4 * 4 + 0, -1, -1}, {kTokens});
  std::vector<const attnrt_tensor*> in;
  const attnrt_tensor* out = nullptr;

  explicit CacheCall(const CacheCase& c)
      : key_cache(c.key.dtype,
                  {kNumBlocksValue, kKvHeads, kBlockSizeValue, RowLength(c.key, c.head_size)}),
        value_cache(c.value.dtype, {kNumBlocksValue, kKvHeads, kBlockSizeValue,
                                    RowLength(c.value, c.v_head_size)}),
        query(QueryType(c), {kTokens, kHeads * c.head_size}),
        key(QueryType(c), {kTokens, kKvHeads * c.head_size}),
        value(QueryType(c), {kTokens, kKvHeads * c.v_head_size}),
        output(QueryType(c), {kTokens, kHeads * c.v_head_size}) {
    for (Tensor* t : {&key_cache, &value_cache, &query, &key, &value}) {
      std::memset(t->data(), 0, t->bytes());
    }
    if (QueryType(c).bits == 32) {
      output.Fill(-7.0f);
    } else {
      std::memset(output.data(), 0xA5, output.bytes());
    }
    initial_output = output.Clone();
    in.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = query.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = key.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = value.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = key_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = value_cache.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = query_start_loc.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = seq_lens.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = block_table.get();
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = slot_mapping.get();
    out = output.get();
  }
  bool OutputUntouched() const {
    return std::memcmp(output.f32(), initial_output.f32(), output.bytes()) == 0;
  }
};

// The fixture's kernel is offered the case, plans and runs it, and reads every field right.
void ExpectOffered(const OldAbi& abi, const CacheCase& c,
                   int32_t p_precision = ATTNRT_P_PRECISION_EXACT) {
  SCOPED_TRACE(Name(c) + (p_precision == ATTNRT_P_PRECISION_INPUT ? ", p_precision INPUT" : ""));
  ASSERT_EQ(QueryType(c).bits, 32) << "the fixture runs float32 only";
  const std::string kernel = VarlenKernel(abi);
  RuntimePtr runtime = OldAbiRuntime(abi);
  ASSERT_TRUE(runtime);
  OpPtr op = CacheOp(runtime.get(), c, p_precision);
  ASSERT_TRUE(op);
  CacheCall call(c);
  const std::vector<Candidate> candidates =
      Explain(op.get(), call.in.data(), call.in.size(), &call.out, 1);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].kernel, kernel);
  EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_SELECTED) << candidates[0].reason;

  attnrt_plan* raw = nullptr;
  attnrt_status s = attnrt_op_plan(op.get(), call.in.data(), call.in.size(), &call.out, 1, &raw);
  ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
  PlanPtr plan(raw);
  EXPECT_EQ(PlanKernel(plan.get()), kernel);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
  const size_t workspace = kTokens * 64 + 1;
  EXPECT_EQ(info.workspace_size, workspace);

  s = attnrt_plan_run(plan.get(), call.in.data(), call.in.size(), &call.out, 1, nullptr, 0,
                      nullptr);
  ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
  const float* out = call.output.f32();
  EXPECT_EQ(out[kOutNumTokens], kTokens);
  EXPECT_EQ(out[kOutHasSlotMapping], 1.0f);
  EXPECT_EQ(out[kOutMaxBlocksPerSeq], kSlots);
  EXPECT_EQ(out[kOutBlockSize], kBlockSizeValue);
  EXPECT_EQ(out[kOutNumBlocks], kNumBlocksValue);
  EXPECT_EQ(out[kOutKvLayout], ATTNRT_PAGED_KV_LAYOUT_BNSH);
  EXPECT_EQ(out[kOutBatchSize], 2);
  EXPECT_EQ(out[kOutNumHeads], kHeads);
  EXPECT_EQ(out[kOutKvNumHeads], kKvHeads);
  EXPECT_EQ(out[kOutHeadSize], c.head_size);
  EXPECT_EQ(out[kOutValueHeadSize], abi.minor >= 8 ? c.v_head_size : -1);
  EXPECT_EQ(out[kOutKeyCacheStride0], kKvHeads * kBlockSizeValue * RowLength(c.key, c.head_size));
  EXPECT_EQ(out[kOutValueCacheStride0],
            kKvHeads * kBlockSizeValue * RowLength(c.value, c.v_head_size));
  EXPECT_EQ(out[kOutMaxQueryLen], 3);
  EXPECT_EQ(out[kOutLastQueryStart], 4);
  EXPECT_EQ(out[kOutWorkspaceSize], static_cast<float>(workspace));
  EXPECT_EQ(out[kOutSameProblemAsPlan], 1.0f);
  ExpectLayout(abi, out);
  EXPECT_EQ(out[kOutPPrecision], abi.minor >= 5 ? p_precision : -1);
  // One type for both pools: v_quant_type is k_quant_type's, whether given or not.
  EXPECT_EQ(out[kOutKQuantType], c.key.quant);
  EXPECT_EQ(out[kOutVQuantType], c.key.quant);
  EXPECT_EQ(out[kOutKvCacheBitWidth], c.key.bits);
  EXPECT_EQ(out[kOutCacheDtypeCode], c.key.dtype.code);
  EXPECT_EQ(out[kOutCacheDtypeBits], c.key.dtype.bits);
  EXPECT_EQ(out[kOutCount], -7.0f) << "the fixture writes " << kOutCount << " elements only";
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- key_start_loc (ABI 1.10): new K/V rows of their own count ---------------------------------

// A kernel built before ABI 1.10 reads the new K/V rows by query_start_loc and adds no ALiBi: it
// is not offered a call with key_start_loc or alibi_slopes (explain says why, planning fails
// UNSUPPORTED naming it).
TEST_P(PagedVarlenOldAbi, KeyStartLocAndAlibiAreRefusedWithTheReason) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  const std::string kernel = VarlenKernel(abi);
  RuntimePtr runtime = OldAbiRuntime(abi, kernel.c_str());
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT);
  ASSERT_TRUE(op);
  // Sequence 0 writes 2 key rows (tokens 3, 4), sequence 1 four (tokens 5..8); ALiBi slopes.
  Tensor key_start_loc = I32({0, 2, kTokens}, {3});
  Tensor alibi_slopes = F32({kHeads});
  alibi_slopes.Fill(0.5f);
  for (const char* feature : {"key_start_loc", "alibi_slopes"}) {
    SCOPED_TRACE(feature);
    Call call(false);
    const bool keys = std::string(feature) == "key_start_loc";
    call.in[keys ? ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC
                 : ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES] =
        keys ? key_start_loc.get() : alibi_slopes.get();
    const std::vector<std::string> explained = ExplainVarlen(op.get(), call);
    ASSERT_EQ(explained.size(), 1u);
    EXPECT_EQ(explained[0], Refusal(abi, feature, 10));
    ExpectPlanUnsupported(op.get(), call, Refusal(abi, feature, 10));
    EXPECT_EQ(call.output.f32()[0], -7.0f);
  }
}

// ---- Rotary embedding and alibi_form SYMMETRIC (ABI 1.12) -------------------------------------

// A kernel built before ABI 1.12 rotates nothing in a varlen call and adds ALiBi as slope * (j -
// p): it is not offered a call with do_rotary = 1 or alibi_form SYMMETRIC (explain says why,
// planning fails UNSUPPORTED naming it, nothing is written).
TEST_P(PagedVarlenOldAbi, RotaryAndSymmetricAlibiAreRefusedWithTheReason) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  RuntimePtr runtime = OldAbiRuntime(abi, VarlenKernel(abi).c_str());
  ASSERT_TRUE(runtime);
  Tensor cos_cache = F32({16, kHeadSize / 2});
  Tensor sin_cache = F32({16, kHeadSize / 2});
  cos_cache.Fill(1.0f);
  sin_cache.Fill(0.0f);
  Tensor alibi_slopes = F32({kHeads});
  alibi_slopes.Fill(0.5f);
  for (const char* feature : {"rotary embedding", "alibi_form SYMMETRIC"}) {
    SCOPED_TRACE(feature);
    const bool rotary = std::string(feature) == "rotary embedding";
    OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT, rotary ? 1 : 0,
                        rotary ? ATTNRT_ALIBI_FORM_SIGNED : ATTNRT_ALIBI_FORM_SYMMETRIC);
    ASSERT_TRUE(op);
    Call call(false);
    if (rotary) {
      call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE] = cos_cache.get();
      call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SIN_CACHE] = sin_cache.get();
    } else {
      call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES] = alibi_slopes.get();
    }
    const std::vector<std::string> explained = ExplainVarlen(op.get(), call);
    ASSERT_EQ(explained.size(), 1u);
    EXPECT_EQ(explained[0], Refusal(abi, feature, 12));
    ExpectPlanUnsupported(op.get(), call, Refusal(abi, feature, 12));
    EXPECT_EQ(call.output.f32()[0], -7.0f);
  }
}

// ---- Causal rows that outnumber their context (ABI 1.11): known at run only -------------------

// A call that writes no rows may have a causal sequence with fewer keys than query rows; a kernel
// built before ABI 1.11 assumed T_b >= q_len_b, so the run is refused (UNSUPPORTED, naming the
// sequence and the version) and nothing is written. With T_b >= q_len_b the same plan runs.
TEST_P(PagedVarlenOldAbi, CausalRowsOutnumberingTheContextAreRefusedAtRun) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  RuntimePtr runtime = OldAbiRuntime(abi, VarlenKernel(abi).c_str());
  ASSERT_TRUE(runtime);
  OpPtr op = VarlenOp(runtime.get(), ATTNRT_P_PRECISION_EXACT);
  ASSERT_TRUE(op);
  Call call(false);
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = nullptr;
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = nullptr;
  attnrt_plan* raw = nullptr;
  attnrt_status s =
      attnrt_op_plan(op.get(), call.in.data(), call.in.size(), call.outputs(), 1, &raw);
  PlanPtr plan(raw);
  ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
  Tensor short_lens = I32({2, 9}, {2});  // sequence 0: 3 query rows over 2 keys
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = short_lens.get();
  s = attnrt_plan_run(plan.get(), call.in.data(), call.in.size(), call.outputs(), 1, nullptr, 0,
                      nullptr);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find(VarlenKernel(abi) + ": plugin '" + abi.plugin + "' was built for ABI 1." +
                         std::to_string(abi.minor) +
                         ", and causal rows that outnumber their context (seq_lens[0] = 2 < 3 "
                         "query rows) need ABI 1.11"),
            std::string::npos)
      << message;
  for (int i = 0; i < kOutCount; ++i) EXPECT_EQ(call.output.f32()[i], -7.0f) << i;
  call.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = call.seq_lens.get();
  s = attnrt_plan_run(plan.get(), call.in.data(), call.in.size(), call.outputs(), 1, nullptr, 0,
                      nullptr);
  EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
}

// ---- float8_e5m2 caches (ABI 1.11): a dtype code older plugins do not know --------------------

// A kernel built before ABI 1.11 is not offered a float8_e5m2 cache (explain says why, planning
// fails UNSUPPORTED naming it, nothing is written).
TEST_P(PagedVarlenOldAbi, Float8E5M2CacheIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  ExpectCacheRefused(GetParam(), ATTNRT_DTYPE_FLOAT8_E5M2, kHeadSize, kHeadSize,
                     ATTNRT_GQA_QUANT_PER_TENSOR, 8, true, "a float8_e5m2 KV cache", 11);
}

// The fixture's kernel, pinned, is not offered the case: explain gives the runtime's reason (a
// feature that needs ABI 1.9, named by `feature`: "value_cache" for a value_cache type other than
// key_cache's), planning fails UNSUPPORTED saying so, and nothing is written.
void ExpectRefusedNeedingAbi19(const OldAbi& abi, const CacheCase& c, const std::string& feature) {
  SCOPED_TRACE(Name(c));
  const std::string kernel = VarlenKernel(abi);
  RuntimePtr runtime = OldAbiRuntime(abi, kernel.c_str());
  ASSERT_TRUE(runtime);
  OpPtr op = CacheOp(runtime.get(), c);
  ASSERT_TRUE(op);
  CacheCall call(c);
  const std::vector<Candidate> candidates =
      Explain(op.get(), call.in.data(), call.in.size(), &call.out, 1);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].kernel, kernel);
  EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_DECLINED);
  const std::string& reason = candidates[0].reason;
  const std::string built_for = std::string("plugin '") + abi.plugin + "' was built for ABI 1." +
                                std::to_string(abi.minor) + ", and ";
  EXPECT_TRUE(StartsWith(reason, built_for)) << reason;
  EXPECT_TRUE(EndsWith(reason, " needs ABI 1.9")) << reason;
  EXPECT_NE(reason.find(feature), std::string::npos) << reason;

  attnrt_plan* raw = nullptr;
  const attnrt_status s =
      attnrt_op_plan(op.get(), call.in.data(), call.in.size(), &call.out, 1, &raw);
  PlanPtr plan(raw);
  EXPECT_EQ(s, ATTNRT_ERROR_UNSUPPORTED) << LastError(s);
  const std::string message = attnrt_last_error_message();
  EXPECT_NE(message.find(kernel + ": " + built_for), std::string::npos) << message;
  EXPECT_NE(message.find(feature), std::string::npos) << message;
  EXPECT_NE(message.find(" needs ABI 1.9"), std::string::npos) << message;
  EXPECT_TRUE(call.OutputUntouched());
}

class PagedVarlenCacheTypes : public ::testing::TestWithParam<OldAbi> {};

// Pools of one type are offered as before ABI 1.9, v_cache_own_type left at its default or naming
// key_cache's type: float32, and PER_BLOCK_32 from ABI 1.7.
TEST_P(PagedVarlenCacheTypes, OneTypeForBothPoolsIsOffered) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  std::vector<PoolType> types = {kPoolF32};
  if (abi.minor >= 7) types.insert(types.end(), {kPoolQ8, kPoolQ4});
  for (const PoolType& type : types) {
    for (bool given : {false, true}) ExpectOffered(abi, {type, type, given, 32, 32});
  }
}

// A value_cache type other than key_cache's is offered to none of them: they would read value
// rows as key_cache's type. Among them llama.cpp's -ctk f16 -ctv q4_0, and pairs the fixture would
// accept (float32 queries).
TEST_P(PagedVarlenCacheTypes, IndependentValueCacheTypeIsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  const CacheCase cases[] = {
      {kPoolF16, kPoolQ4, true, 32, 32},   {kPoolF32, kPoolQ4, true, 32, 32},
      {kPoolF32, kPoolQ8, true, 32, 32},   {kPoolF32, kPoolF16, true, 32, 32},
      {kPoolF32, kPoolBf16, true, 32, 32}, {kPoolQ8, kPoolF32, true, 32, 32},
      {kPoolQ8, kPoolF16, true, 32, 32},   {kPoolQ8, kPoolQ4, true, 32, 32},
      {kPoolQ4, kPoolQ8, true, 32, 32},    {kPoolQ8, kPoolF16, true, 32, 64},
  };
  for (const CacheCase& c : cases) ExpectRefusedNeedingAbi19(abi, c, "value_cache");
}

// ABI 1.9 lets a float cache have any head size; a kernel built before it may assume multiples of
// 8 (the rule then), so none of them is offered a head size or value head size that is not one,
// whether v_cache_own_type is 0 or names key_cache's type. Multiples of 8 are offered as before.
TEST_P(PagedVarlenCacheTypes, HeadSizeNotAMultipleOf8IsRefusedWithTheReason) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  for (const CacheCase& c :
       {CacheCase{kPoolF32, kPoolF32, false, 12, 12}, CacheCase{kPoolF32, kPoolF32, true, 12, 12},
        CacheCase{kPoolF32, kPoolF32, false, 20, 20}, CacheCase{kPoolF32, kPoolF32, false, 1, 1}}) {
    ExpectRefusedNeedingAbi19(abi, c, "multiple of 8");
  }
  if (abi.minor >= 8) {  // one side only: a value head size of its own is ABI 1.8's
    for (const CacheCase& c : {CacheCase{kPoolF32, kPoolF32, false, 16, 12},
                               CacheCase{kPoolF32, kPoolF32, false, 12, 16}}) {
      ExpectRefusedNeedingAbi19(abi, c, "multiple of 8");
    }
  }
  for (const int64_t head : {16, 24}) {
    ExpectOffered(abi, {kPoolF32, kPoolF32, false, head, head});
    ExpectOffered(abi, {kPoolF32, kPoolF32, true, head, head});
  }
}

// ABI 1.8's value head size is offered to the plugin built for it, with v_cache_own_type at its
// default (narrower and wider V rows, float32 and PER_BLOCK_32 pools) or naming key_cache's type.
TEST(PagedVarlenAbi18, ValueHeadSizeIsOffered) {
  CleanAttnrtEnv env;
  const CacheCase cases[] = {
      {kPoolF32, kPoolF32, false, 8, 16}, {kPoolF32, kPoolF32, false, 16, 8},
      {kPoolQ8, kPoolQ8, false, 32, 64},  {kPoolQ4, kPoolQ4, false, 64, 32},
      {kPoolF32, kPoolF32, true, 16, 8},  {kPoolQ8, kPoolQ8, true, 32, 64},
  };
  for (const CacheCase& c : cases) ExpectOffered(kAbi18, c);
}

// The plugins built since ABI 1.5.
class PagedVarlenSinceAbi15 : public ::testing::TestWithParam<OldAbi> {};

// p_precision INPUT is offered to them and read at its offset, whatever moved after it.
TEST_P(PagedVarlenSinceAbi15, InputPPrecisionIsOffered) {
  CleanAttnrtEnv env;
  const OldAbi& abi = GetParam();
  ExpectOffered(abi, {kPoolF32, kPoolF32, false, 32, 32}, ATTNRT_P_PRECISION_INPUT);
  ExpectOffered(abi, {kPoolQ8, kPoolQ8, false, 32, 32}, ATTNRT_P_PRECISION_INPUT);
  if (abi.minor >= 8) {
    ExpectOffered(abi, {kPoolF32, kPoolF32, false, 16, 8}, ATTNRT_P_PRECISION_INPUT);
  }
}

std::string PluginName(const ::testing::TestParamInfo<OldAbi>& param_info) {
  return param_info.param.plugin;
}

INSTANTIATE_TEST_SUITE_P(Layouts, PagedVarlenOldAbi, ::testing::Values(kAbi14, kAbi17, kAbi18),
                         PluginName);
INSTANTIATE_TEST_SUITE_P(Layouts, PagedVarlenBeforeAbi18, ::testing::Values(kAbi14, kAbi17),
                         PluginName);
INSTANTIATE_TEST_SUITE_P(Layouts, PagedVarlenSinceAbi15, ::testing::Values(kAbi17, kAbi18),
                         PluginName);
INSTANTIATE_TEST_SUITE_P(Layouts, PagedVarlenCacheTypes, ::testing::Values(kAbi14, kAbi17, kAbi18),
                         PluginName);

}  // namespace
