// Rejections of paged calls with independent key and value cache types (ABI 1.9;
// attnrt/ops/paged_gqa.h, "Value cache type (v_cache_own_type, v_cache_bit_width)"):
// INVALID_ARGUMENT with a message naming the attribute or input, the expected and the actual value,
// and nothing written (pools and output as before). Attribute errors come from attnrt_op_create
// (attnrt.h: the attributes are validated and copied there), tensor errors from attnrt_op_plan or
// attnrt_plan_run. Each error starts from a well-formed call (a decode of 2 sequences in the padded
// op, a decode and a 3-token chunk in the varlen op; T float32, H = Hv = 64, blocks of 4) and
// changes one thing. The messages are checked for key words only (any one of the alternatives of a
// part separated by '|').
//
// Also the two compatibility rules of the header: with the default v_cache_own_type 0 both pools
// keep key_cache's type as in ABI 1.8, and v_quant_type is ignored unless it differs from a
// quantized k_quant_type; and a caller built against ABI 1.8, whose attribute struct has neither
// field, gets the default whatever its struct's padding holds.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace mixed_kv {
namespace {

constexpr int64_t kB = 2, kN = 4, kNkv = 2, kH = 64, kHv = 64, kBlock = 4, kBlocks = 6, kT = 9;
constexpr int32_t kOps[] = {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN};

// One call's tensors and attributes. Inputs 3 and 4 are key_cache and value_cache in both ops.
struct Attempt {
  int32_t op_kind = ATTNRT_OP_PAGED_GQA;
  std::vector<Tensor> in;
  Tensor output;
  attnrt_paged_gqa_attributes attributes{};

  Tensor& KeyCache() { return in[3]; }
  Tensor& ValueCache() { return in[4]; }
  Tensor& KScale() {
    return in[op_kind == ATTNRT_OP_PAGED_GQA ? size_t{ATTNRT_PAGED_GQA_INPUT_K_SCALE}
                                             : size_t{ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE}];
  }
  Tensor& VScale() {
    return in[op_kind == ATTNRT_OP_PAGED_GQA ? size_t{ATTNRT_PAGED_GQA_INPUT_V_SCALE}
                                             : size_t{ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE}];
  }
};

// A pool tensor of `dtype` with rows of `last` elements, every byte finite content: rows of N(0,1)
// values encoded as `as` (the pool's type when it is one of the cache types, else random bytes).
Tensor MakePool(attnrt_dtype dtype, int64_t last, CacheType as, bool encodable,
                std::mt19937_64& rng) {
  Tensor t(dtype, {kBlocks, kBlock, kNkv, last});
  auto* p = static_cast<uint8_t*>(t.data());
  const int64_t rows = kBlocks * kBlock * kNkv;
  const int64_t row_bytes = static_cast<int64_t>(t.bytes()) / rows;
  for (int64_t r = 0; r < rows; ++r) {
    if (encodable) {
      const int64_t n = IsBlock(as) ? row_bytes / BlockBytes(BlockOf(as)) * kBlockElements : last;
      const std::vector<float> x = block_quant::RoundedNormal(FloatFormat::kFloat32, n, rng);
      EncodeRow(as, x.data(), n, p + r * row_bytes);
    } else {
      for (int64_t i = 0; i < row_bytes; ++i) p[r * row_bytes + i] = static_cast<uint8_t>(rng());
    }
  }
  return t;
}

Tensor TypedPool(CacheType c, int64_t width, std::mt19937_64& rng) {
  return MakePool(DtypeOf(c), LastDim(c, width), c, true, rng);
}

// The well-formed call: T float32, pools of types k and v, attributes with independent types.
Attempt Make(int32_t op_kind, CacheType k, CacheType v, std::mt19937_64& rng) {
  Attempt a;
  a.op_kind = op_kind;
  const Types types{"", FloatFormat::kFloat32, k, v};
  a.attributes = MixedAttributes(types, kN, kNkv, kBlock, ATTNRT_PAGED_KV_LAYOUT_BSNH);
  if (op_kind == ATTNRT_OP_PAGED_GQA) {
    a.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
    a.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = F32({kB, 1, kN * kH});
    a.in[ATTNRT_PAGED_GQA_INPUT_KEY] = F32({kB, 1, kNkv * kH});
    a.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = F32({kB, 1, kNkv * kHv});
    for (int i : {0, 1, 2}) a.in[static_cast<size_t>(i)].FillNormal(rng);
    a.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({8, 5}, {kB});
    a.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(kT)}, {1});
    a.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
    a.output = F32({kB, 1, kN * kHv});
  } else {
    const int64_t tokens = 4;
    a.in.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, Tensor());
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = F32({tokens, kN * kH});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = F32({tokens, kNkv * kH});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = F32({tokens, kNkv * kHv});
    for (int i : {0, 1, 2}) a.in[static_cast<size_t>(i)].FillNormal(rng);
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32({0, 1, 4}, {3});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32({9, 6}, {kB});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
    a.output = F32({tokens, kN * kHv});
  }
  a.KeyCache() = TypedPool(k, kH, rng);
  a.ValueCache() = TypedPool(v, kHv, rng);
  a.output.Fill(0.25f);
  return a;
}

const char* OpName(int32_t op_kind) { return attnrt_op_kind_name(op_kind); }

enum class Stage { kCreate, kPlan, kRun, kNone };

const char* StageName(Stage s) {
  return s == Stage::kCreate ? "attnrt_op_create"
         : s == Stage::kPlan ? "attnrt_op_plan"
         : s == Stage::kRun  ? "attnrt_plan_run"
                             : "none (the call ran)";
}

struct Result {
  attnrt_status status = ATTNRT_OK;
  Stage stage = Stage::kNone;
  std::string message;
};

class PagedMixedKvTypesErrors : public testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  // Creates, plans and runs; a failing plan or run must leave the pools and the output as they
  // were.
  Result Try(Attempt& a, const void* attributes = nullptr) {
    Result r;
    attnrt_op* raw = nullptr;
    r.status = attnrt_op_create(runtime_.get(), a.op_kind,
                                attributes != nullptr ? attributes : &a.attributes, &raw);
    if (r.status != ATTNRT_OK) {
      r.stage = Stage::kCreate;
      r.message = attnrt_last_error_message();
      return r;
    }
    OpPtr op(raw);
    std::vector<const attnrt_tensor*> ins;
    for (Tensor& t : a.in) ins.push_back(t.empty() ? nullptr : t.get());
    const attnrt_tensor* outs[] = {a.output.get()};
    std::vector<std::vector<uint8_t>> before;
    for (Tensor* t : {&a.KeyCache(), &a.ValueCache(), &a.output}) {
      const auto* p = static_cast<const uint8_t*>(t->data());
      before.emplace_back(p, p + t->bytes());
    }
    attnrt_plan* plan = nullptr;
    r.status = attnrt_op_plan(op.get(), ins.data(), ins.size(), outs, 1, &plan);
    PlanPtr owner(plan);
    r.stage = Stage::kPlan;
    if (r.status == ATTNRT_OK) {
      r.status = attnrt_plan_run(plan, ins.data(), ins.size(), outs, 1, nullptr, 0, nullptr);
      r.stage = r.status == ATTNRT_OK ? Stage::kNone : Stage::kRun;
    }
    if (r.status == ATTNRT_OK) return r;
    r.message = attnrt_last_error_message();
    const char* names[] = {"key_cache", "value_cache", "output"};
    Tensor* tensors[] = {&a.KeyCache(), &a.ValueCache(), &a.output};
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(std::memcmp(before[k].data(), tensors[k]->data(), before[k].size()), 0)
          << "a failing " << StageName(r.stage) << " wrote into " << names[k];
    }
    return r;
  }

  void ExpectRuns(Attempt a, const std::string& what) {
    SCOPED_TRACE(std::string(OpName(a.op_kind)) + ": " + what);
    const Result r = Try(a);
    EXPECT_EQ(r.status, ATTNRT_OK)
        << "the well-formed call fails at " << StageName(r.stage) << ": " << r.message;
  }

  // The call must fail with INVALID_ARGUMENT, at op creation when `at_create`, with a message
  // holding every part.
  void ExpectRejected(Attempt a, const std::string& what, bool at_create,
                      std::initializer_list<std::string> parts, const void* attributes = nullptr) {
    SCOPED_TRACE(std::string(OpName(a.op_kind)) + ": " + what);
    const Result r = Try(a, attributes);
    std::printf("[message] %s, %s, at %s: %s\n", OpName(a.op_kind), what.c_str(),
                StageName(r.stage), r.message.c_str());
    EXPECT_EQ(r.status, ATTNRT_ERROR_INVALID_ARGUMENT)
        << "got " << attnrt_status_name(r.status) << " at " << StageName(r.stage) << ": "
        << r.message;
    if (at_create) {
      EXPECT_EQ(r.stage, Stage::kCreate)
          << "an attribute error, rejected at " << StageName(r.stage) << ": " << r.message;
    }
    for (const std::string& part : parts) {
      bool found = false;
      size_t from = 0;
      while (!found) {
        const size_t bar = part.find('|', from);
        found = r.message.find(part.substr(from, bar - from)) != std::string::npos;
        if (bar == std::string::npos) break;
        from = bar + 1;
      }
      EXPECT_TRUE(found) << "message does not name " << part << ": " << r.message;
    }
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

using C = CacheType;

TEST_F(PagedMixedKvTypesErrors, WellFormedMixedCallsRun) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    ExpectRuns(Make(op, C::kQ8_0, C::kF16, rng_), "k q8_0, v f16");
    ExpectRuns(Make(op, C::kF32, C::kQ4_0, rng_), "k f32, v q4_0");
    ExpectRuns(Make(op, C::kF32, C::kBF16, rng_), "k f32, v bf16");
    ExpectRuns(Make(op, C::kQ4_0, C::kQ8_0, rng_), "k q4_0, v q8_0");
  }
}

TEST_F(PagedMixedKvTypesErrors, VCacheBitWidthOutOfRange) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    for (int32_t width : {1, 2, 16, 32, -2, 7}) {
      Attempt a = Make(op, C::kF32, C::kQ8_0, rng_);
      a.attributes.v_cache_bit_width = width;
      ExpectRejected(a, "v_cache_bit_width " + std::to_string(width), true,
                     {"v_cache_bit_width", std::to_string(width)});
    }
  }
}

TEST_F(PagedMixedKvTypesErrors, VCacheOwnTypeOutOfRange) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    for (int32_t own : {2, -1, 255}) {
      Attempt a = Make(op, C::kF32, C::kQ8_0, rng_);
      a.attributes.v_cache_own_type = own;
      ExpectRejected(a, "v_cache_own_type " + std::to_string(own), true,
                     {"v_cache_own_type", std::to_string(own)});
    }
  }
}

TEST_F(PagedMixedKvTypesErrors, VCacheBitWidthDisagreesWithVQuantType) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    for (int32_t width : {8, 4}) {  // a bit width with v_quant_type NONE (a float16 value_cache)
      Attempt a = Make(op, C::kF32, C::kF16, rng_);
      a.attributes.v_cache_bit_width = width;
      ExpectRejected(a, "v_cache_bit_width " + std::to_string(width) + " with v_quant_type NONE",
                     true, {"v_cache_bit_width|v_quant_type"});
    }
    Attempt a = Make(op, C::kF32, C::kQ8_0, rng_);  // PER_BLOCK_32 with a bit width of 0
    a.attributes.v_cache_bit_width = 0;
    ExpectRejected(a, "v_cache_bit_width 0 with v_quant_type PER_BLOCK_32", true,
                   {"v_cache_bit_width|v_quant_type"});
  }
}

TEST_F(PagedMixedKvTypesErrors, PerTensorAndPerChannelKeepOneType) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    {  // an int8 PER_TENSOR key cache with a float16 value cache
      Attempt a = Make(op, C::kF32, C::kF16, rng_);
      a.attributes.gqa.k_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
      a.attributes.gqa.kv_cache_bit_width = 8;
      a.KeyCache() = MakePool(block_quant::kI8, kH, C::kF32, false, rng_);
      a.KScale() = F32({1});
      a.KScale().Fill(0.03f);
      ExpectRejected(a, "k_quant_type PER_TENSOR, v f16", true, {"k_quant_type"});
    }
    {  // a float32 key cache with an int8 PER_CHANNEL value cache
      Attempt a = Make(op, C::kF32, C::kF16, rng_);
      a.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.attributes.v_cache_bit_width = 8;
      a.ValueCache() = MakePool(block_quant::kI8, kHv, C::kF32, false, rng_);
      a.VScale() = F32({kNkv * kHv});
      a.VScale().Fill(0.03f);
      ExpectRejected(a, "k f32, v_quant_type PER_CHANNEL", true, {"v_quant_type"});
    }
    {  // PER_CHANNEL on both sides, with an explicit v_cache_bit_width
      Attempt a = Make(op, C::kF32, C::kF16, rng_);
      a.attributes.gqa.k_quant_type = a.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.attributes.gqa.kv_cache_bit_width = 8;
      a.attributes.v_cache_bit_width = 8;
      a.KeyCache() = MakePool(block_quant::kI8, kH, C::kF32, false, rng_);
      a.ValueCache() = MakePool(block_quant::kI8, kHv, C::kF32, false, rng_);
      a.KScale() = F32({kNkv * kH});
      a.VScale() = F32({kNkv * kHv});
      a.KScale().Fill(0.03f);
      a.VScale().Fill(0.03f);
      ExpectRejected(a, "PER_CHANNEL both, v_cache_bit_width 8", true,
                     {"k_quant_type|v_quant_type|v_cache_bit_width"});
    }
  }
}

TEST_F(PagedMixedKvTypesErrors, KeyBitWidthDisagreesWithKQuantType) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    Attempt a = Make(op, C::kF32, C::kQ4_0, rng_);  // k NONE needs kv_cache_bit_width 0
    a.attributes.gqa.kv_cache_bit_width = 8;
    ExpectRejected(a, "k NONE with kv_cache_bit_width 8, v q4_0", true,
                   {"kv_cache_bit_width|k_quant_type"});
    Attempt b = Make(op, C::kQ8_0, C::kF16, rng_);  // PER_BLOCK_32 needs 8 or 4
    b.attributes.gqa.kv_cache_bit_width = 0;
    ExpectRejected(b, "k PER_BLOCK_32 with kv_cache_bit_width 0, v f16", true,
                   {"kv_cache_bit_width|k_quant_type"});
  }
}

// A value checked at run (a block id out of range in a needed slot): the run fails before it
// writes either pool of its two types, or the output.
TEST_F(PagedMixedKvTypesErrors, RunTimeErrorWritesNeitherPool) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    Attempt a = Make(op, C::kQ4_0, C::kF16, rng_);
    const size_t table = op == ATTNRT_OP_PAGED_GQA
                             ? size_t{ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE}
                             : size_t{ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE};
    a.in[table] = I32({4, 0, 2, 1, 99, -1}, {kB, 3});  // slot 1 of sequence 1 is needed
    ExpectRejected(a, "block id 99 of 6 blocks", false, {"block_table", "99"});
  }
}

TEST_F(PagedMixedKvTypesErrors, ScalesWithIndependentTypes) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    Attempt a = Make(op, C::kF32, C::kQ4_0, rng_);
    a.KScale() = F32({1});
    a.KScale().Fill(0.03f);
    ExpectRejected(a, "k_scale with k f32, v q4_0", false, {"k_scale"});
    Attempt b = Make(op, C::kQ8_0, C::kF16, rng_);
    b.VScale() = F32({1});
    b.VScale().Fill(0.03f);
    ExpectRejected(b, "v_scale with k q8_0, v f16", false, {"v_scale"});
  }
}

TEST_F(PagedMixedKvTypesErrors, IntegerValueCacheWithVQuantNone) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    for (const attnrt_dtype dtype : {block_quant::kI8, block_quant::kU8}) {
      Attempt a = Make(op, C::kQ8_0, C::kF16, rng_);
      a.ValueCache() = MakePool(dtype, kHv, C::kF32, false, rng_);
      ExpectRejected(a, std::string("value_cache ") + attnrt_dtype_name(dtype) + ", v NONE", false,
                     {"value_cache", attnrt_dtype_name(dtype)});
    }
  }
}

TEST_F(PagedMixedKvTypesErrors, FloatValueCacheWithPerBlock32) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    for (const C v : {C::kF16, C::kF32}) {
      Attempt a = Make(op, C::kF32, C::kQ8_0, rng_);
      a.ValueCache() = TypedPool(v, kHv, rng_);
      ExpectRejected(a, std::string("value_cache ") + TypeName(v) + ", v_quant_type PER_BLOCK_32",
                     false, {"value_cache", attnrt_dtype_name(DtypeOf(v))});
    }
  }
}

TEST_F(PagedMixedKvTypesErrors, ValueCacheRowOfAnotherType) {
  SCOPED_TRACE(SeedTrace());
  const int64_t q8_row = RowBytes(C::kQ8_0, kHv), q4_row = RowBytes(C::kQ4_0, kHv);
  for (int32_t op : kOps) {
    {  // Q4_0 value cache whose rows have the bytes of a Q8_0 row of Hv: not whole Q4_0 blocks
      Attempt a = Make(op, C::kF32, C::kQ4_0, rng_);
      a.ValueCache() = MakePool(block_quant::kU8, q8_row, C::kF32, false, rng_);
      ExpectRejected(a, "q4_0 value_cache of " + std::to_string(q8_row) + " bytes", false,
                     {"value_cache", std::to_string(q8_row)});
    }
    {  // Q8_0 value cache whose rows have the bytes of a Q4_0 row of Hv
      Attempt a = Make(op, C::kQ8_0, C::kQ8_0, rng_);
      a.ValueCache() = MakePool(block_quant::kU8, q4_row, C::kF32, false, rng_);
      ExpectRejected(a, "q8_0 value_cache of " + std::to_string(q4_row) + " bytes", false,
                     {"value_cache", std::to_string(q4_row)});
    }
    {  // a float16 value cache whose last dimension counts the row's bytes, not its elements:
       // Hv would be 128 while value has Nkv * 64 columns
      Attempt a = Make(op, C::kF32, C::kF16, rng_);
      a.ValueCache() = MakePool(block_quant::kF16, 2 * kHv, C::kF16, true, rng_);
      ExpectRejected(a, "f16 value_cache of " + std::to_string(2 * kHv) + " elements", false,
                     {"value", std::to_string(2 * kHv) + "|" + std::to_string(2 * kHv * kNkv) +
                                   "|" + std::to_string(2 * kHv * kN)});
    }
  }
}

// With independent types an unquantized key cache may be any float type (a float16 one under a
// float32 query runs: the matrix of paged_gqa_mixed_kv_types_test checks its values); not an
// integer one.
TEST_F(PagedMixedKvTypesErrors, NoneKeyCacheIsAFloatType) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    Attempt a = Make(op, C::kF32, C::kF16, rng_);
    a.KeyCache() = TypedPool(C::kF16, kH, rng_);
    ExpectRuns(a, "key_cache float16 with T float32, k NONE");
    Attempt b = Make(op, C::kF32, C::kF16, rng_);
    b.KeyCache() = MakePool(block_quant::kI8, kH, C::kF32, false, rng_);
    ExpectRejected(b, "key_cache int8 with k NONE", false, {"key_cache", "int8"});
  }
}

// ABI 1.8 behaviour: with the v_cache_own_type 0 both pools have key_cache's type.
TEST_F(PagedMixedKvTypesErrors, DefaultBitWidthKeepsOneType) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    {
      Attempt a = Make(op, C::kF32, C::kF32, rng_);
      a.attributes.v_cache_own_type = 0;
      ExpectRuns(a, "v_cache_own_type 0, both f32");
      a.ValueCache() = TypedPool(C::kF16, kHv, rng_);
      ExpectRejected(a, "v_cache_own_type 0, k f32, value_cache f16", false,
                     {"value_cache", "float16"});
    }
    {
      Attempt a = Make(op, C::kQ8_0, C::kQ8_0, rng_);
      a.attributes.v_cache_own_type = 0;
      ExpectRuns(a, "v_cache_own_type 0, both q8_0");
      a.ValueCache() = TypedPool(C::kF16, kHv, rng_);
      ExpectRejected(a, "v_cache_own_type 0, k q8_0, value_cache f16", false,
                     {"value_cache", "float16"});
    }
  }
}

// "v_quant_type is ignored unless it differs from a quantized k_quant_type": with a float key
// cache a v_quant_type of PER_BLOCK_32 changes nothing (the output is the one of NONE, bit for
// bit); with a PER_BLOCK_32 key cache a v_quant_type of NONE is an error.
TEST_F(PagedMixedKvTypesErrors, DefaultIgnoresVQuantTypeOnlyForAFloatKey) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t op : kOps) {
    SCOPED_TRACE(OpName(op));
    Attempt a = Make(op, C::kF32, C::kF32, rng_);
    a.attributes.v_cache_own_type = 0;
    Attempt b = a;  // the same tensors
    b.output = a.output.Clone();
    Tensor pools[2] = {a.KeyCache().Clone(), a.ValueCache().Clone()};
    const Result none = Try(a);
    ASSERT_EQ(none.status, ATTNRT_OK) << none.message;
    std::memcpy(a.KeyCache().data(), pools[0].data(), pools[0].bytes());  // b shares the pools
    std::memcpy(a.ValueCache().data(), pools[1].data(), pools[1].bytes());
    b.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    const Result ignored = Try(b);
    EXPECT_EQ(ignored.status, ATTNRT_OK)
        << "v_quant_type PER_BLOCK_32 with k_quant_type NONE and the v_cache_own_type 0: "
        << ignored.message;
    if (ignored.status == ATTNRT_OK) {
      EXPECT_EQ(std::memcmp(a.output.data(), b.output.data(), a.output.bytes()), 0)
          << "v_quant_type changed the output of a float cache";
    }
    Attempt c = Make(op, C::kQ8_0, C::kQ8_0, rng_);
    c.attributes.v_cache_own_type = 0;
    c.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_NONE;
    ExpectRejected(c, "v_cache_own_type 0, k PER_BLOCK_32, v_quant_type NONE", true,
                   {"v_quant_type"});
  }
}

// attnrt_paged_gqa_attributes as ABI 1.8 declared it: no v_cache_own_type, no v_cache_bit_width.
struct Abi18Attributes {
  size_t struct_size;
  attnrt_gqa_attributes gqa;
  int32_t block_size;
  int32_t kv_layout;
  int32_t p_precision;
};

// "A caller whose struct_size ends before v_cache_bit_width (built against ABI 1.2-1.8) gets 0."
// A caller built against ABI 1.8 with two Q8_0 pools, its struct's tail padding and the bytes
// after it holding garbage (0xA5): it must get key_cache's type for both pools and run. The ABI
// 1.9 struct must be larger than the ABI 1.8 one, else struct_size could not tell them apart.
TEST_F(PagedMixedKvTypesErrors, Abi18CallerGetsTheDefault) {
  SCOPED_TRACE(SeedTrace());
  static_assert(offsetof(attnrt_paged_gqa_attributes, v_cache_bit_width) >= sizeof(Abi18Attributes),
                "an ABI 1.8 struct_size must end before v_cache_bit_width");
  for (int32_t op : kOps) {
    SCOPED_TRACE(OpName(op));
    Attempt a = Make(op, C::kQ8_0, C::kQ8_0, rng_);
    alignas(attnrt_paged_gqa_attributes) unsigned char
        storage[sizeof(attnrt_paged_gqa_attributes) + sizeof(Abi18Attributes)];
    std::memset(storage, 0, sizeof(storage));
    std::memset(storage, 0xA5, sizeof(storage));
    Abi18Attributes old;
    std::memset(&old, 0xA5, sizeof(old));
    old.struct_size = sizeof(Abi18Attributes);
    old.gqa = a.attributes.gqa;  // k_quant_type = v_quant_type = PER_BLOCK_32, bit width 8
    old.block_size = a.attributes.block_size;
    old.kv_layout = a.attributes.kv_layout;
    old.p_precision = ATTNRT_P_PRECISION_EXACT;
    std::memcpy(storage, &old, sizeof(old));
    const Result r = Try(a, storage);
    EXPECT_EQ(r.status, ATTNRT_OK) << "an ABI 1.8 caller (struct_size " << sizeof(Abi18Attributes)
                                   << ", garbage padding) with Q8_0 pools fails at "
                                   << StageName(r.stage) << ": " << r.message;
  }
}

}  // namespace
}  // namespace mixed_kv
}  // namespace attnrt_test
