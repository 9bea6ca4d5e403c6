// Validation of the sparse MLA ops through the ABI: every attribute constraint of CANN's README at
// op creation, shape constraints at plan, values at run (before any output is written), and the
// metadata op's signature check (metadata made for other lengths or altered is rejected).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

const std::string kScalar = "sparse_mla.sparse_mla.flash.scalar";

// ---- attributes
// -------------------------------------------------------------------------------------

struct AttributeCase {
  const char* name;
  std::function<void(attnrt_sparse_mla_attributes&)> change;
  const char* expected_in_message;
};

TEST(SparseMlaValidation, AttributesAreCheckedAtCreation) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  const AttributeCase cases[] = {
      {"quant_mode 0", [](auto& a) { a.quant_mode = 0; }, "quant_mode"},
      {"quant_mode 4", [](auto& a) { a.quant_mode = 4; }, "quant_mode"},
      {"rope_head_dim 32", [](auto& a) { a.rope_head_dim = 32; }, "rope_head_dim"},
      {"softmax_scale NaN", [](auto& a) { a.softmax_scale = std::nanf(""); }, "softmax_scale"},
      {"cmp_ratio 0", [](auto& a) { a.cmp_ratio = 0; }, "cmp_ratio"},
      {"cmp_ratio 129", [](auto& a) { a.cmp_ratio = 129; }, "cmp_ratio"},
      {"ori_mask_mode 2", [](auto& a) { a.ori_mask_mode = 2; }, "ori_mask_mode"},
      {"cmp_mask_mode 4", [](auto& a) { a.cmp_mask_mode = 4; }, "cmp_mask_mode"},
      {"ori_win_left -2", [](auto& a) { a.ori_win_left = -2; }, "ori_win_left"},
      {"window without mode 4",
       [](auto& a) {
         a.ori_mask_mode = 3;
         a.ori_win_right = 0;
       },
       "ori_win_right"},
      {"layout TND/BSND",
       [](auto& a) {
         a.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
         a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
       },
       "layout_q/layout_kv"},
      {"layout_q PA_BBND", [](auto& a) { a.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND; },
       "layout_q"},
      {"quant_mode 2 with BSND",
       [](auto& a) {
         a.quant_mode = 2;
         a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
       },
       "layout_kv"},
      {"topk_value_mode 3", [](auto& a) { a.topk_value_mode = 3; }, "topk_value_mode"},
      {"topk_value_mode 2 without PA", [](auto& a) { a.topk_value_mode = 2; }, "topk_value_mode"},
      {"return_softmax_lse 2", [](auto& a) { a.return_softmax_lse = 2; }, "return_softmax_lse"},
  };
  for (const auto& c : cases) {
    for (int32_t kind : {ATTNRT_OP_SPARSE_MLA, ATTNRT_OP_SPARSE_MLA_METADATA}) {
      attnrt_sparse_mla_attributes a;
      attnrt_sparse_mla_attributes_init(&a);
      a.quant_mode = 1;
      c.change(a);
      attnrt_op* op = nullptr;
      EXPECT_EQ(attnrt_op_create(runtime.get(), kind, &a, &op), ATTNRT_ERROR_INVALID_ARGUMENT)
          << c.name;
      EXPECT_NE(std::string(attnrt_last_error_message()).find(c.expected_in_message),
                std::string::npos)
          << c.name << ": " << attnrt_last_error_message();
      attnrt_op_destroy(op);
    }
  }
  attnrt_sparse_mla_attributes small;
  attnrt_sparse_mla_attributes_init(&small);
  small.quant_mode = 1;
  small.struct_size = 8;
  attnrt_op* op = nullptr;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_SPARSE_MLA, &small, &op),
            ATTNRT_ERROR_ABI_MISMATCH);
}

// ---- shapes (plan) and values (run)
// ------------------------------------------------------------------

SparseMlaSpec PagedCsa() {
  SparseMlaSpec s;
  s.scenario = ATTNRT_SPARSE_MLA_CSA;
  s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  s.seqused_cmp = true;
  return s;
}

// Builds the case, makes its metadata, applies `change`, runs the main op; expects INVALID_ARGUMENT
// naming `expected` and attn_out still poisoned.
void ExpectRejected(const SparseMlaSpec& spec, const std::function<void(SparseMlaCase&)>& change,
                    const std::string& expected) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(spec, rng);
  std::string error;
  ASSERT_EQ(RunSparseMlaMetadata(c, kScalar, &error), ATTNRT_OK) << error;
  change(c);
  EXPECT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_ERROR_INVALID_ARGUMENT) << expected;
  EXPECT_NE(error.find(expected), std::string::npos) << "message: " << error;
  const Tensor& o = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  const auto* bits = static_cast<const uint16_t*>(const_cast<Tensor&>(o).data());
  for (int64_t k = 0; k < o.numel(); ++k) {
    ASSERT_EQ(bits[k], 0x7FFF) << "attn_out element " << k << " was written before the error";
  }
}

int32_t* I32Data(SparseMlaCase& c, int input) { return c.in()[input].i32(); }

TEST(SparseMlaValidation, ShapesAreCheckedAtPlan) {
  using In = attnrt_sparse_mla_input;
  auto replace = [](In input, attnrt_dtype dtype, std::vector<int64_t> shape) {
    return [=](SparseMlaCase& c) { c.in()[input] = Tensor(dtype, shape); };
  };
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_Q, kBf16, {2, 3, 4, 256}), "q:");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_Q, kBf16, {2, 3, 129, 512}), "q_n");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_Q, kF32, {2, 3, 4, 512}), "q:");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_ORI_KV, kU8, {12, 16, 2, 608}),
                 "ori_kv");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_ORI_KV, kU8, {12, 16, 1, 584}),
                 "ori_kv");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_ORI_KV, kU8, {2, 2000, 1, 608}),
                 "block_size");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_CMP_KV, kBf16, {4, 16, 1, 608}),
                 "cmp_kv");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, kI32, {3, 6}),
                 "ori_block_table");
  ExpectRejected(PagedCsa(),
                 replace(ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES, kI32, {2, 3, 2, 16}),
                 "cmp_sparse_indices");
  ExpectRejected(PagedCsa(),
                 replace(ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, kI32, {2, 3, 1, 4}),
                 "ori_sparse_indices");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_SINKS, kF32, {5}), "sinks");
  ExpectRejected(PagedCsa(), replace(ATTNRT_SPARSE_MLA_INPUT_METADATA, kI32, {1024}), "metadata");
  ExpectRejected(
      PagedCsa(), [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_METADATA] = Tensor(); },
      "metadata: required");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] = Tensor(); },
      "seqused_ori_kv");
  ExpectRejected(
      PagedCsa(), [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_CMP_KV] = Tensor(); },
      "cmp_sparse_indices");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE] = Tensor(); },
      "softmax_lse");
  SparseMlaSpec tnd = PagedCsa();
  tnd.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  ExpectRejected(
      tnd, [](SparseMlaCase& c) { c.in()[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q] = Tensor(); },
      "cu_seqlens_q");
  SparseMlaSpec swa;
  ExpectRejected(
      swa,
      [](SparseMlaCase& c) {
        c.in()[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV] = I32({0, 0}, {2});
      },
      "cmp_residual_kv");
}

TEST(SparseMlaValidation, ValuesAreCheckedBeforeAnyOutput) {
  SparseMlaSpec tnd;
  tnd.scenario = ATTNRT_SPARSE_MLA_HCA;
  tnd.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  tnd.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  ExpectRejected(
      tnd, [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q)[0] = 1; },
      "cu_seqlens_q[0]");
  ExpectRejected(
      tnd,
      [](SparseMlaCase& c) {
        int32_t* cu = I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV);
        cu[1] = cu[2] + 1;
      },
      "cu_seqlens_ori_kv");
  ExpectRejected(
      tnd,
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV)[2] = 100000; },
      "cu_seqlens_cmp_kv[2]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV)[1] = 100000; },
      "seqused_ori_kv[1]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV)[0] = -1; },
      "seqused_cmp_kv[0]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE)[0] = 999; },
      "ori_block_table[0, 0]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE)[0] = -1; },
      "cmp_block_table[0, 0]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV)[1] = 4; },
      "cmp_residual_kv[1]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES)[5] = -2; },
      "cmp_sparse_indices");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) {
        c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE] = I32({0, 1}, {2, 1});  // one block each
      },
      "(ori_block_table columns * block_size)");
  SparseMlaSpec used_q = PagedCsa();
  used_q.seqused_q = true;
  ExpectRejected(
      used_q, [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q)[1] = 99; },
      "seqused_q[1]");
  SparseMlaSpec physical = PagedCsa();
  physical.topk_value_mode = 2;
  ExpectRejected(
      physical,
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES)[0] = 1 << 30; },
      "physical token offset");
}

TEST(SparseMlaValidation, MetadataForOtherInputsIsRejected) {
  // Other sequence lengths (a valid value, so only the signature differs).
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV)[0] -= 1; },
      "metadata: made for other");
  // Other shapes: metadata of this case, q with one more row per batch.
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) {
        SparseMlaSpec other = PagedCsa();
        other.q_extra = 3;
        other.seqused_q = true;
        std::mt19937_64 rng(1);
        SparseMlaCase d(other, rng);
        d.in()[ATTNRT_SPARSE_MLA_INPUT_METADATA] = c.in()[ATTNRT_SPARSE_MLA_INPUT_METADATA];
        c.in() = d.in();
        c.out() = d.out();
      },
      "metadata: made for other");
  ExpectRejected(
      PagedCsa(), [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_METADATA)[0] = 0; },
      "metadata[0]");
  ExpectRejected(
      PagedCsa(),
      [](SparseMlaCase& c) {
        int32_t* md = I32Data(c, ATTNRT_SPARSE_MLA_INPUT_METADATA);
        md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 1] += 1;  // worker 0 overlaps worker 1
      },
      "metadata[");
  ExpectRejected(
      PagedCsa(), [](SparseMlaCase& c) { I32Data(c, ATTNRT_SPARSE_MLA_INPUT_METADATA)[7] = 5000; },
      "metadata[7]");
}

TEST(SparseMlaValidation, MetadataOpRejectsAMetadataInputAndChecksItsOutput) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(PagedCsa(), rng);
  const attnrt_sparse_mla_attributes a = c.Attributes();
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_SPARSE_MLA_METADATA, &a, &raw), ATTNRT_OK);
  OpPtr op(raw);
  Tensor out(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
  const attnrt_tensor* outs[1] = {out.get()};
  attnrt_plan* plan = nullptr;
  EXPECT_EQ(attnrt_op_plan(op.get(), c.Inputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, 1, &plan),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("metadata: must be absent"),
            std::string::npos)
      << attnrt_last_error_message();
  Tensor small(kI32, {100});
  const attnrt_tensor* small_outs[1] = {small.get()};
  EXPECT_EQ(attnrt_op_plan(op.get(), c.MetadataInputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, small_outs,
                           1, &plan),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(
      attnrt_op_plan(op.get(), c.MetadataInputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, 1, &plan),
      ATTNRT_OK);
  PlanPtr owned(plan);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(attnrt_plan_get_info(plan, &info), ATTNRT_OK);
  EXPECT_STREQ(info.kernel, "core");
  ASSERT_EQ(attnrt_plan_run(plan, c.MetadataInputs(), ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, 1,
                            nullptr, 0, nullptr),
            ATTNRT_OK);
  const int32_t* md = out.i32();
  EXPECT_EQ(md[0], ATTNRT_SPARSE_MLA_METADATA_MAGIC);
  EXPECT_EQ(md[1], ATTNRT_SPARSE_MLA_METADATA_VERSION);
  EXPECT_GE(md[7], 1);
  // The worker ranges tile [0, items).
  int64_t next = 0;
  for (int32_t w = 0; w < md[7]; ++w) {
    EXPECT_EQ(md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w], next);
    next = md[ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS + 2 * w + 1];
  }
  EXPECT_EQ(next, md[8]);
  EXPECT_STREQ(attnrt_op_kind_name(ATTNRT_OP_SPARSE_MLA), "sparse_mla");
  EXPECT_STREQ(attnrt_op_kind_name(ATTNRT_OP_SPARSE_MLA_METADATA), "sparse_mla_metadata");
  EXPECT_STREQ(attnrt_op_input_name(ATTNRT_OP_SPARSE_MLA, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV),
               "cmp_residual_kv");
  EXPECT_STREQ(attnrt_op_output_name(ATTNRT_OP_SPARSE_MLA, 1), "softmax_lse");
  EXPECT_EQ(attnrt_op_output_name(ATTNRT_OP_SPARSE_MLA, 2), nullptr);
}

// Every word the metadata layout defines is checked: changing any single word (header, reserved
// words, the worker table, the unused words after it) is rejected, naming the word.
TEST(SparseMlaValidation, EveryMetadataWordIsChecked) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(PagedCsa(), rng);
  std::string error;
  ASSERT_EQ(RunSparseMlaMetadata(c, kScalar, &error), ATTNRT_OK) << error;
  int32_t* md = I32Data(c, ATTNRT_SPARSE_MLA_INPUT_METADATA);
  std::vector<int32_t> good(md, md + ATTNRT_SPARSE_MLA_METADATA_SIZE);
  ASSERT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_OK) << error;
  std::vector<int> words;
  for (int k = 0; k < 64; ++k) words.push_back(k);
  for (int k = 64; k < ATTNRT_SPARSE_MLA_METADATA_SIZE; k += 7) words.push_back(k);
  words.push_back(ATTNRT_SPARSE_MLA_METADATA_SIZE - 1);
  for (int k : words) {
    for (int32_t delta : {1, -1, 0x40000000}) {
      std::copy(good.begin(), good.end(), md);
      md[k] = static_cast<int32_t>(static_cast<uint32_t>(md[k]) + static_cast<uint32_t>(delta));
      SCOPED_TRACE(testing::Message() << "word " << k << " set to " << md[k]);
      ASSERT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(error.find("metadata"), std::string::npos) << error;
      if (k >= 4 && k != 7) {
        EXPECT_NE(error.find("metadata[" + std::to_string(k) + "]: expected " +
                             std::to_string(good[k]) + " "),
                  std::string::npos)
            << error;
      }
    }
  }
  std::copy(good.begin(), good.end(), md);
  EXPECT_EQ(RunSparseMlaMain(c, kScalar, &error), ATTNRT_OK) << error;
}

// The metadata op's output must not share memory with any input; the input is left unchanged.
TEST(SparseMlaValidation, MetadataOpOutputMustNotOverlapInputs) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(PagedCsa(), rng);
  const attnrt_sparse_mla_attributes a = c.Attributes();
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_SPARSE_MLA_METADATA, &a, &raw), ATTNRT_OK);
  OpPtr op(raw);
  const attnrt_tensor* const* base = c.MetadataInputs();
  for (int input : {ATTNRT_SPARSE_MLA_INPUT_Q, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV}) {
    SCOPED_TRACE(input);
    std::vector<const attnrt_tensor*> ins(base, base + ATTNRT_SPARSE_MLA_NUM_INPUTS);
    ASSERT_NE(ins[input], nullptr);
    // The input moved into a buffer large enough for the output too.
    const attnrt_tensor& original = *ins[input];
    const size_t bytes = c.in()[input].bytes();
    Tensor buffer(kI32, {static_cast<int64_t>(bytes / 4 + 2 * ATTNRT_SPARSE_MLA_METADATA_SIZE)});
    auto* storage = static_cast<unsigned char*>(buffer.data());
    std::memcpy(storage, static_cast<const unsigned char*>(original.data) + original.byte_offset,
                bytes);
    std::vector<unsigned char> before(storage, storage + bytes);
    attnrt_tensor moved = original;
    moved.data = storage;
    moved.byte_offset = 0;
    ins[input] = &moved;
    Tensor out(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
    attnrt_tensor aliased = *out.get();
    aliased.data = storage;
    aliased.byte_offset = 0;
    const attnrt_tensor* outs[1] = {&aliased};
    attnrt_plan* plan = nullptr;
    ASSERT_EQ(attnrt_op_plan(op.get(), ins.data(), ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, 1, &plan),
              ATTNRT_OK)
        << attnrt_last_error_message();
    PlanPtr owned(plan);
    EXPECT_EQ(attnrt_plan_run(plan, ins.data(), ATTNRT_SPARSE_MLA_NUM_INPUTS, outs, 1, nullptr, 0,
                              nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT);
    const std::string msg = attnrt_last_error_message();
    // The integer inputs are checked where the run copies them, the others by the op's checks;
    // both messages name the output and the input.
    const std::string name = attnrt_op_input_name(ATTNRT_OP_SPARSE_MLA, input);
    EXPECT_TRUE(msg.find("metadata: shares memory with input " + name) != std::string::npos ||
                msg.find("Output 'metadata' overlaps Input '" + name + "'") != std::string::npos)
        << msg;
    EXPECT_EQ(std::vector<unsigned char>(storage, storage + bytes), before);
  }
}

}  // namespace
}  // namespace attnrt_test
