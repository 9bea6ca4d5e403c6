// What ABI 1.9's "any head size for an unquantized cache" leaves rejected (INVALID_ARGUMENT, a
// message naming the offending value and the rule, nothing written), each next to a control that
// runs:
//   - GroupQueryAttention over a contiguous cache (ATTNRT_OP_GQA, ONNX Runtime's operator) keeps
//     "head_size must be a multiple of 8": 65, 12, 1 rejected; 16 runs;
//   - the paged ops with a quantized cache keep their rules: int8 PER_TENSOR, int8 PER_CHANNEL and
//     int4 PER_CHANNEL with head_size 12 rejected (16 runs); PER_BLOCK_32 (Q8_0, Q4_0) with
//     head_size 48 rejected (64 runs); a Q8_0 value cache of its own type (v_cache_own_type 1)
//     behind a float16 key cache of head size 65 with Hv 48 rejected (Hv 64 runs); and, the
//     converse, a float value cache behind a Q8_0/Q4_0 key cache runs with any Hv (1 to 67);
//   - head_size 0, a query dimension not divisible by num_heads, and a float key_cache whose last
//     dimension is not the head size the query gives, in both paged ops;
//   - rotary embedding (the padded op) keeps "head_size a multiple of 16": 65 and 36 rejected, 64
//     runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace head_size {
namespace {

constexpr int64_t kB = 2, kN = 4, kNkv = 2, kBlock = 4, kBlocks = 6, kT = 9, kTokens = 4;
constexpr int32_t kOps[] = {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN};
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;

// A pool's type: its dtype, its last dimension for rows of n elements, and the attributes.
enum class Cache {
  kFloat32,
  kFloat16,
  kInt8PerTensor,
  kInt8PerChannel,
  kInt4PerChannel,
  kQ8_0,
  kQ4_0
};

const char* CacheName(Cache c) {
  switch (c) {
    case Cache::kFloat32:
      return "f32";
    case Cache::kFloat16:
      return "f16";
    case Cache::kInt8PerTensor:
      return "int8 PER_TENSOR";
    case Cache::kInt8PerChannel:
      return "int8 PER_CHANNEL";
    case Cache::kInt4PerChannel:
      return "int4 PER_CHANNEL";
    case Cache::kQ8_0:
      return "Q8_0";
    case Cache::kQ4_0:
      break;
  }
  return "Q4_0";
}

attnrt_dtype DtypeOf(Cache c) {
  switch (c) {
    case Cache::kFloat32:
      return kF32;
    case Cache::kFloat16:
      return kF16;
    case Cache::kInt8PerTensor:
    case Cache::kInt8PerChannel:
      return kI8;
    default:
      return kU8;
  }
}

// Elements of the pool's last dimension for rows of n values (int4: two per byte; blocks: n / 32
// whole blocks and the bytes of a partial one, rounded up, so that 48 gives 51 and 27 bytes).
int64_t LastDim(Cache c, int64_t n) {
  if (c == Cache::kInt4PerChannel) return (n + 1) / 2;
  if (c == Cache::kQ8_0) return (n * 34 + 31) / 32;
  if (c == Cache::kQ4_0) return (n * 18 + 31) / 32;
  return n;
}

struct Spec {
  int32_t op = ATTNRT_OP_PAGED_GQA;
  Cache k = Cache::kFloat32, v = Cache::kFloat32;
  bool own = false;  // v_cache_own_type 1
  int64_t H = 16, Hv = 16;
  int64_t query_dim = -1;      // query's last dimension; -1: N * H
  int64_t key_cache_dim = -1;  // key_cache's last dimension; -1: as H gives it
};

// One call's tensors and attributes: the padded op decodes 2 sequences (T_b 9 and 6), the varlen
// op a decode and a 3-token chunk; query float32 (float16 with a float16 key cache); every input
// zero but the query (a zero of every cache type), scales 0.03, the output 0.25.
struct Attempt {
  Spec spec;
  std::vector<Tensor> in;
  Tensor output;
  attnrt_paged_gqa_attributes attributes{};
};

void SetQuant(Cache c, int32_t* quant, int32_t* bits) {
  *quant = c == Cache::kInt8PerTensor ? ATTNRT_GQA_QUANT_PER_TENSOR
           : c == Cache::kInt8PerChannel || c == Cache::kInt4PerChannel
               ? ATTNRT_GQA_QUANT_PER_CHANNEL
           : c == Cache::kQ8_0 || c == Cache::kQ4_0 ? ATTNRT_GQA_QUANT_PER_BLOCK_32
                                                    : ATTNRT_GQA_QUANT_NONE;
  *bits = c == Cache::kInt4PerChannel || c == Cache::kQ4_0 ? 4 : *quant == 0 ? 0 : 8;
}

Attempt Make(const Spec& s, std::mt19937_64& rng) {
  Attempt a;
  a.spec = s;
  const attnrt_dtype t = s.k == Cache::kFloat16 ? kF16 : kF32;
  const int64_t qd = s.query_dim >= 0 ? s.query_dim : kN * s.H;
  const bool paged = s.op == ATTNRT_OP_PAGED_GQA;
  const std::vector<int64_t> rows =
      paged ? std::vector<int64_t>{kB, 1} : std::vector<int64_t>{kTokens};
  auto shape = [&](int64_t last) {
    std::vector<int64_t> v = rows;
    v.push_back(last);
    return v;
  };
  a.in.assign(
      paged ? size_t{ATTNRT_PAGED_GQA_NUM_INPUTS} : size_t{ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS},
      Tensor());
  a.in[0] = Tensor(t, shape(qd));
  if (t.bits == 32) a.in[0].FillNormal(rng);
  a.in[1] = Tensor(t, shape(kNkv * s.H));
  a.in[2] = Tensor(t, shape(kNkv * s.Hv));
  a.in[3] = Tensor(DtypeOf(s.k), {kBlocks, kBlock, kNkv,
                                  s.key_cache_dim >= 0 ? s.key_cache_dim : LastDim(s.k, s.H)});
  a.in[4] =
      Tensor(DtypeOf(s.own ? s.v : s.k), {kBlocks, kBlock, kNkv, LastDim(s.own ? s.v : s.k, s.Hv)});
  if (paged) {
    a.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({8, 5}, {kB});
    a.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(kT)}, {1});
    a.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
  } else {
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32({0, 1, 4}, {3});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32({9, 6}, {kB});
    a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
  }
  int32_t quant = 0, bits = 0;
  SetQuant(s.k, &quant, &bits);
  if (quant == ATTNRT_GQA_QUANT_PER_TENSOR || quant == ATTNRT_GQA_QUANT_PER_CHANNEL) {
    const int64_t n = quant == ATTNRT_GQA_QUANT_PER_TENSOR ? 1 : kNkv * s.H;
    const size_t ks = paged ? size_t{ATTNRT_PAGED_GQA_INPUT_K_SCALE}
                            : size_t{ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE};
    for (size_t i : {ks, ks + 1}) {
      a.in[i] = F32({n});
      a.in[i].Fill(0.03f);
    }
  }
  a.output = Tensor(t, shape(kN * s.Hv));
  std::memset(a.output.data(), 0x3E, a.output.bytes());
  attnrt_paged_gqa_attributes_init(&a.attributes);
  a.attributes.gqa = GqaAttributes(kN, kNkv);
  a.attributes.gqa.k_quant_type = quant;
  a.attributes.gqa.v_quant_type = quant;
  a.attributes.gqa.kv_cache_bit_width = bits;
  if (s.own) {
    SetQuant(s.v, &a.attributes.gqa.v_quant_type, &a.attributes.v_cache_bit_width);
    a.attributes.v_cache_own_type = 1;
  }
  a.attributes.block_size = kBlock;
  return a;
}

struct Result {
  attnrt_status status = ATTNRT_OK;
  std::string stage = "none (the call ran)";
  std::string message;
};

class PagedHeadSizeErrors : public testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  // Creates, plans and runs; a failing plan or run must leave the pools and the output as they
  // were.
  Result Try(Attempt& a) {
    Result r;
    attnrt_op* raw = nullptr;
    r.status = attnrt_op_create(runtime_.get(), a.spec.op, &a.attributes, &raw);
    if (r.status != ATTNRT_OK) {
      r.stage = "attnrt_op_create";
      r.message = attnrt_last_error_message();
      return r;
    }
    OpPtr op(raw);
    std::vector<const attnrt_tensor*> ins;
    for (Tensor& t : a.in) ins.push_back(t.empty() ? nullptr : t.get());
    const attnrt_tensor* outs[] = {a.output.get()};
    std::vector<Tensor> before = {a.in[3].Clone(), a.in[4].Clone(), a.output.Clone()};
    attnrt_plan* plan = nullptr;
    r.status = attnrt_op_plan(op.get(), ins.data(), ins.size(), outs, 1, &plan);
    PlanPtr owner(plan);
    r.stage = "attnrt_op_plan";
    if (r.status == ATTNRT_OK) {
      r.status = attnrt_plan_run(plan, ins.data(), ins.size(), outs, 1, nullptr, 0, nullptr);
      r.stage = r.status == ATTNRT_OK ? "none (the call ran)" : "attnrt_plan_run";
    }
    if (r.status == ATTNRT_OK) return r;
    r.message = attnrt_last_error_message();
    Tensor* after[] = {&a.in[3], &a.in[4], &a.output};
    const char* names[] = {"key_cache", "value_cache", "output"};
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(std::memcmp(before[k].data(), after[k]->data(), before[k].bytes()), 0)
          << "a failing " << r.stage << " wrote into " << names[k];
    }
    return r;
  }

  std::string What(const Spec& s) {
    return std::string(attnrt_op_kind_name(s.op)) + ", key_cache " + CacheName(s.k) +
           (s.own ? std::string(", value_cache ") + CacheName(s.v) + " (v_cache_own_type 1)" : "") +
           ", H " + std::to_string(s.H) + ", Hv " + std::to_string(s.Hv) +
           (s.query_dim >= 0 ? ", query dimension " + std::to_string(s.query_dim) : "") +
           (s.key_cache_dim >= 0 ? ", key_cache last dimension " + std::to_string(s.key_cache_dim)
                                 : "");
  }

  void ExpectRuns(const Spec& s) {
    SCOPED_TRACE(What(s));
    Attempt a = Make(s, rng_);
    const Result r = Try(a);
    EXPECT_EQ(r.status, ATTNRT_OK) << "the control fails at " << r.stage << ": " << r.message;
  }

  // INVALID_ARGUMENT with every part in the message (a part may list alternatives split by '|').
  void ExpectRejected(const Spec& s, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(What(s));
    Attempt a = Make(s, rng_);
    const Result r = Try(a);
    std::printf("[message] %s, at %s: %s\n", What(s).c_str(), r.stage.c_str(), r.message.c_str());
    EXPECT_EQ(r.status, ATTNRT_ERROR_INVALID_ARGUMENT)
        << "got " << attnrt_status_name(r.status) << " at " << r.stage << ": " << r.message;
    for (const std::string& part : parts) {
      bool found = false;
      for (size_t from = 0;;) {
        const size_t bar = part.find('|', from);
        found = found || r.message.find(part.substr(from, bar - from)) != std::string::npos;
        if (bar == std::string::npos) break;
        from = bar + 1;
      }
      EXPECT_TRUE(found) << "the message does not name " << part << ": " << r.message;
    }
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

// ATTNRT_OP_GQA is ONNX Runtime's operator and keeps its rule.
TEST_F(PagedHeadSizeErrors, ContiguousGqaKeepsMultipleOf8) {
  SCOPED_TRACE(SeedTrace());
  for (const int64_t H : {16, 65, 12, 1}) {
    SCOPED_TRACE("ATTNRT_OP_GQA, head_size " + std::to_string(H));
    SimpleGqa g;
    g.head_size = H;
    g.present = true;
    GqaTensors t = MakeGqaTensors(g, rng_);
    const attnrt_gqa_attributes attributes = GqaAttributes(2, 1);
    attnrt_op* raw = nullptr;
    attnrt_status st = attnrt_op_create(runtime_.get(), ATTNRT_OP_GQA, &attributes, &raw);
    ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
    OpPtr op(raw);
    const Tensor output = t[ATTNRT_GQA_OUTPUT_OUTPUT].Clone();
    attnrt_plan* plan = nullptr;
    st = attnrt_op_plan(op.get(), t.Inputs(), ATTNRT_GQA_NUM_INPUTS, t.Outputs(),
                        ATTNRT_GQA_NUM_OUTPUTS, &plan);
    PlanPtr owner(plan);
    if (H == 16) {
      ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
      EXPECT_EQ(RunPlan(plan, t), ATTNRT_OK) << LastError(ATTNRT_OK);
      continue;
    }
    const std::string message = attnrt_last_error_message();
    std::printf("[message] ATTNRT_OP_GQA, head_size %lld: %s\n", static_cast<long long>(H),
                message.c_str());
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_NE(message.find("head_size"), std::string::npos) << message;
    EXPECT_NE(message.find("multiple of 8"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(H)), std::string::npos) << message;
    EXPECT_EQ(std::memcmp(output.f32(), t[ATTNRT_GQA_OUTPUT_OUTPUT].f32(), output.bytes()), 0)
        << "a failing plan wrote the output";
  }
}

TEST_F(PagedHeadSizeErrors, IntegerCachesKeepMultipleOf8) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    for (const Cache c : {Cache::kInt8PerTensor, Cache::kInt8PerChannel, Cache::kInt4PerChannel}) {
      ExpectRuns({op, c, c, false, 16, 16});
      ExpectRejected({op, c, c, false, 12, 12}, {"head_size", "12", "8"});
    }
  }
}

TEST_F(PagedHeadSizeErrors, BlockCachesKeepMultipleOf32) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    for (const Cache c : {Cache::kQ8_0, Cache::kQ4_0}) {
      ExpectRuns({op, c, c, false, 64, 64});
      ExpectRejected({op, c, c, false, 48, 48}, {"head_size|key_cache", "48|51|27", "32"});
    }
  }
}

// A value cache of its own type follows that type's rule, whatever the key cache's head size.
TEST_F(PagedHeadSizeErrors, BlockValueCacheBehindAnOddFloatKeyCacheKeepsMultipleOf32) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    ExpectRuns({op, Cache::kFloat16, Cache::kQ8_0, true, 65, 64});
    ExpectRejected({op, Cache::kFloat16, Cache::kQ8_0, true, 65, 48},
                   {"value_cache|v_head_size", "48|51", "32"});
  }
}

// The converse, which must run: a float value cache of its own type behind a PER_BLOCK_32 key
// cache takes any value head size (its own type's rule), narrower than a block included.
// This test found such value caches of Hv below 32 (16, 5, 1) rejected at plan ("value_cache:
// expected dtype uint8 (the dtype of key_cache)") although v_cache_own_type was 1.
TEST_F(PagedHeadSizeErrors, FloatValueCacheBehindABlockKeyCacheTakesAnyHeadSize) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    for (const int64_t Hv : {40, 32, 67, 16, 5, 1}) {
      ExpectRuns({op, Cache::kQ8_0, Cache::kFloat32, true, 64, Hv});
      ExpectRuns({op, Cache::kQ4_0, Cache::kFloat16, true, 32, Hv});
    }
  }
}

TEST_F(PagedHeadSizeErrors, HeadSizeZeroOrQueryNotDivisibleByNumHeads) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    ExpectRuns({op, Cache::kFloat32, Cache::kFloat32, false, 65, 65});
    Spec zero{op, Cache::kFloat32, Cache::kFloat32, false, 0, 0};
    ExpectRejected(zero, {"query", "num_heads"});
    // 4 * 65 + 1 columns: not a multiple of num_heads = 4.
    Spec ragged{op, Cache::kFloat32, Cache::kFloat32, false, 65, 65, kN * 65 + 1};
    ExpectRejected(ragged, {"query", "num_heads", std::to_string(kN * 65 + 1)});
  }
}

// Any head size, but the same one in the query and key_cache: 65 against 64 and 66.
TEST_F(PagedHeadSizeErrors, KeyCacheOfAnotherHeadSize) {
  SCOPED_TRACE(SeedTrace());
  for (const int32_t op : kOps) {
    for (const int64_t width : {64, 66}) {
      Spec s{op, Cache::kFloat32, Cache::kFloat32, false, 65, 65, -1, width};
      ExpectRejected(s, {"key_cache", std::to_string(width), "65"});
    }
  }
}

// Rotary embedding (the padded op only) keeps GroupQueryAttention's rule for the cos/sin caches:
// head_size a multiple of 16.
TEST_F(PagedHeadSizeErrors, RotaryKeepsMultipleOf16) {
  SCOPED_TRACE(SeedTrace());
  for (const int64_t H : {64, 65, 36}) {
    Spec s{ATTNRT_OP_PAGED_GQA, Cache::kFloat32, Cache::kFloat32, false, H, H};
    SCOPED_TRACE("do_rotary 1, cos_cache (16, 8), " + What(s));
    Attempt a = Make(s, rng_);
    a.attributes.gqa.do_rotary = 1;
    for (const int i : {ATTNRT_PAGED_GQA_INPUT_COS_CACHE, ATTNRT_PAGED_GQA_INPUT_SIN_CACHE}) {
      a.in[static_cast<size_t>(i)] = F32({16, 8});
      a.in[static_cast<size_t>(i)].Fill(i == ATTNRT_PAGED_GQA_INPUT_COS_CACHE ? 1.0f : 0.0f);
    }
    const Result r = Try(a);
    std::printf("[message] rotary, H %lld, at %s: %s\n", static_cast<long long>(H), r.stage.c_str(),
                r.message.c_str());
    if (H == 64) {
      EXPECT_EQ(r.status, ATTNRT_OK) << "the control fails at " << r.stage << ": " << r.message;
      continue;
    }
    EXPECT_EQ(r.status, ATTNRT_ERROR_INVALID_ARGUMENT) << r.message;
    EXPECT_NE(r.message.find("head_size"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("16"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(std::to_string(H)), std::string::npos) << r.message;
  }
}

}  // namespace
}  // namespace head_size
}  // namespace attnrt_test
