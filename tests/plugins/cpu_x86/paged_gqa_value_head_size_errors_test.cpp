// Rejections of paged calls whose inputs disagree with the value head size Hv (ABI 1.8;
// attnrt/ops/paged_gqa.h, "Value head size"): INVALID_ARGUMENT with a message naming the input and
// the values, and nothing written (pools and output as before). Each error starts from a
// well-formed call with Hv != H that is checked to plan and run, and changes one thing:
//   value with Nkv*H columns, output with N*H columns (paged and varlen), value_cache differing
//   from key_cache in a dimension other than the last, packed QKV with Hv != H, a per-channel
//   v_scale of Nkv*H values, a Q8_0 / Q4_0 value_cache row that is not whole blocks, and a float
//   value_cache whose Hv is not a multiple of 8.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
// A decode of 2 sequences (T_b 9 and 6) over blocks of 4: H 96, Hv 64.
constexpr int64_t kB = 2, kN = 4, kNkv = 2, kH = 96, kHv = 64, kBlock = 4, kBlocks = 6, kT = 9;

enum class Pool { kFloat, kInt8PerChannel, kQ8_0, kQ4_0 };

// One call's tensors: inputs by position, the output, and the bytes of the pools and output
// before the attempt.
struct Attempt {
  std::vector<Tensor> in;
  Tensor output;
  attnrt_paged_gqa_attributes attributes{};
  int32_t op_kind = ATTNRT_OP_PAGED_GQA;
};

int64_t BlockRow(Pool pool, int64_t n) {
  return pool == Pool::kQ8_0 ? n / 32 * 34 : pool == Pool::kQ4_0 ? n / 32 * 18 : n;
}

// Fills a pool with finite content: float32 N(0,1), int8 codes, or blocks with d = 1/64.
void FillPool(Tensor& t, Pool pool, std::mt19937_64& rng) {
  if (pool == Pool::kFloat) {
    t.FillNormal(rng);
    return;
  }
  auto* p = static_cast<uint8_t*>(t.data());
  const size_t block = pool == Pool::kQ8_0 ? 34 : 18;
  for (size_t i = 0; i < t.bytes(); ++i) {
    const size_t in_block = i % block;
    p[i] = pool == Pool::kInt8PerChannel ? static_cast<uint8_t>(rng())
           : in_block == 0               ? 0x00
           : in_block == 1               ? 0x24
                                         : static_cast<uint8_t>(rng());
  }
}

// The padded paged op; value_width: value_cache's last dimension (the pool's row for Hv when < 0).
Attempt PagedDecode(Pool pool, std::mt19937_64& rng, int64_t Hv = kHv, int64_t value_width = -1) {
  Attempt a;
  a.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
  a.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = F32({kB, 1, kN * kH});
  a.in[ATTNRT_PAGED_GQA_INPUT_KEY] = F32({kB, 1, kNkv * kH});
  a.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = F32({kB, 1, kNkv * Hv});
  for (auto i :
       {ATTNRT_PAGED_GQA_INPUT_QUERY, ATTNRT_PAGED_GQA_INPUT_KEY, ATTNRT_PAGED_GQA_INPUT_VALUE}) {
    a.in[i].FillNormal(rng);
  }
  const attnrt_dtype dtype = pool == Pool::kFloat            ? kF32
                             : pool == Pool::kInt8PerChannel ? kI8
                                                             : kU8;
  a.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] =
      Tensor(dtype, {kBlocks, kBlock, kNkv, BlockRow(pool, kH)});
  a.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
      Tensor(dtype, {kBlocks, kBlock, kNkv, value_width < 0 ? BlockRow(pool, Hv) : value_width});
  FillPool(a.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE], pool, rng);
  FillPool(a.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE], pool, rng);
  a.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({8, 5}, {kB});
  a.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(kT)}, {1});
  a.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
  if (pool == Pool::kInt8PerChannel) {
    a.in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = F32({kNkv * kH});
    a.in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = F32({kNkv * Hv});
    a.in[ATTNRT_PAGED_GQA_INPUT_K_SCALE].Fill(0.03f);
    a.in[ATTNRT_PAGED_GQA_INPUT_V_SCALE].Fill(0.03f);
  }
  a.output = F32({kB, 1, kN * Hv});
  a.output.Fill(0.25f);
  attnrt_paged_gqa_attributes_init(&a.attributes);
  a.attributes.gqa = GqaAttributes(kN, kNkv);
  if (pool == Pool::kInt8PerChannel) {
    a.attributes.gqa.k_quant_type = a.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    a.attributes.gqa.kv_cache_bit_width = 8;
  } else if (pool != Pool::kFloat) {
    a.attributes.gqa.k_quant_type = a.attributes.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    a.attributes.gqa.kv_cache_bit_width = pool == Pool::kQ8_0 ? 8 : 4;
  }
  a.attributes.block_size = static_cast<int32_t>(kBlock);
  return a;
}

// The varlen op: a decode (T_b 9) and a chunk of 3 tokens (T_b 6), float32 pools.
Attempt VarlenStep(std::mt19937_64& rng) {
  Attempt a;
  a.op_kind = ATTNRT_OP_PAGED_GQA_VARLEN;
  a.in.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, Tensor());
  const int64_t tokens = 4;
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = F32({tokens, kN * kH});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = F32({tokens, kNkv * kH});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = F32({tokens, kNkv * kHv});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = F32({kBlocks, kBlock, kNkv, kH});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = F32({kBlocks, kBlock, kNkv, kHv});
  for (auto i : {ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY,
                 ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE,
                 ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE}) {
    a.in[i].FillNormal(rng);
  }
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32({0, 1, 4}, {3});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32({9, 6}, {kB});
  a.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32({4, 0, 2, 1, 5, -1}, {kB, 3});
  a.output = F32({tokens, kN * kHv});
  a.output.Fill(0.25f);
  attnrt_paged_gqa_attributes_init(&a.attributes);
  a.attributes.gqa = GqaAttributes(kN, kNkv);
  a.attributes.block_size = static_cast<int32_t>(kBlock);
  return a;
}

class PagedValueHeadSizeErrors : public testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  // Plans and runs; returns the status and sets *message. A run that fails must leave the pools
  // and the output as they were.
  attnrt_status Try(Attempt& a, std::string* message) {
    attnrt_op* raw = nullptr;
    attnrt_status st = attnrt_op_create(runtime_.get(), a.op_kind, &a.attributes, &raw);
    *message = st == ATTNRT_OK ? "" : attnrt_last_error_message();
    if (st != ATTNRT_OK) return st;
    OpPtr op(raw);
    std::vector<const attnrt_tensor*> ins;
    for (Tensor& t : a.in) ins.push_back(t.empty() ? nullptr : t.get());
    const attnrt_tensor* outs[] = {a.output.get()};
    const size_t caches[] = {3, 4};  // key_cache and value_cache in both ops
    std::vector<std::vector<uint8_t>> before;
    for (size_t i : caches) {
      const auto* p = static_cast<const uint8_t*>(a.in[i].data());
      before.emplace_back(p, p + a.in[i].bytes());
    }
    const auto* o = static_cast<const uint8_t*>(a.output.data());
    before.emplace_back(o, o + a.output.bytes());
    attnrt_plan* plan = nullptr;
    st = attnrt_op_plan(op.get(), ins.data(), ins.size(), outs, 1, &plan);
    PlanPtr owner(plan);
    if (st == ATTNRT_OK) {
      st = attnrt_plan_run(plan, ins.data(), ins.size(), outs, 1, nullptr, 0, nullptr);
      if (st != ATTNRT_OK) {
        *message = attnrt_last_error_message();
        for (size_t k = 0; k < 2; ++k) {
          EXPECT_EQ(std::memcmp(before[k].data(), a.in[caches[k]].data(), before[k].size()), 0)
              << "a failing run wrote into " << (k == 0 ? "key_cache" : "value_cache");
        }
        EXPECT_EQ(std::memcmp(before[2].data(), a.output.data(), before[2].size()), 0)
            << "a failing run wrote into the output";
      }
    } else {
      *message = attnrt_last_error_message();
    }
    return st;
  }

  // The call must run.
  void ExpectRuns(Attempt a) {
    std::string message;
    const attnrt_status st = Try(a, &message);
    EXPECT_EQ(st, ATTNRT_OK) << "the well-formed call: " << message;
  }

  // The call must fail with INVALID_ARGUMENT and a message holding every part (any one of the
  // alternatives of a part separated by '|').
  void ExpectRejected(Attempt a, std::initializer_list<std::string> parts) {
    std::string message;
    const attnrt_status st = Try(a, &message);
    std::printf("[message] %s\n", message.c_str());
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    for (const std::string& part : parts) {
      bool found = false;
      size_t from = 0;
      while (!found) {
        const size_t bar = part.find('|', from);
        found = message.find(part.substr(from, bar - from)) != std::string::npos;
        if (bar == std::string::npos) break;
        from = bar + 1;
      }
      EXPECT_TRUE(found) << "message does not name " << part << ": " << message;
    }
  }

  CleanAttnrtEnv env_;
  RuntimePtr runtime_;
  std::mt19937_64 rng_{TestSeed()};
};

const std::string kNkvH = std::to_string(kNkv * kH), kNkvHv = std::to_string(kNkv * kHv);
const std::string kNH = std::to_string(kN * kH), kNHv = std::to_string(kN * kHv);

TEST_F(PagedValueHeadSizeErrors, ValueWithKeyHeadSizeColumns) {
  SCOPED_TRACE(SeedTrace());
  ExpectRuns(PagedDecode(Pool::kFloat, rng_));
  Attempt a = PagedDecode(Pool::kFloat, rng_);
  a.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = F32({kB, 1, kNkv * kH});
  ExpectRejected(a, {"value", kNkvH, kNkvHv});
  Attempt v = VarlenStep(rng_);
  ExpectRuns(VarlenStep(rng_));
  v.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = F32({4, kNkv * kH});
  ExpectRejected(v, {"value", kNkvH, kNkvHv});
}

TEST_F(PagedValueHeadSizeErrors, OutputWithKeyHeadSizeColumns) {
  SCOPED_TRACE(SeedTrace());
  Attempt a = PagedDecode(Pool::kFloat, rng_);
  a.output = F32({kB, 1, kN * kH});
  ExpectRejected(a, {"output", kNH, kNHv});
  Attempt v = VarlenStep(rng_);
  v.output = F32({4, kN * kH});
  ExpectRejected(v, {"output", kNH, kNHv});
}

TEST_F(PagedValueHeadSizeErrors, ValueCacheOtherDimensionThanTheLast) {
  SCOPED_TRACE(SeedTrace());
  const std::vector<std::vector<int64_t>> shapes = {{kBlocks + 1, kBlock, kNkv, kHv},
                                                    {kBlocks, kBlock * 2, kNkv, kHv},
                                                    {kBlocks, kBlock, kNkv + 1, kHv}};
  for (const auto& shape : shapes) {
    SCOPED_TRACE("value_cache [" + std::to_string(shape[0]) + "," + std::to_string(shape[1]) + "," +
                 std::to_string(shape[2]) + "," + std::to_string(shape[3]) + "]");
    Attempt a = PagedDecode(Pool::kFloat, rng_);
    a.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = F32(shape);
    a.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE].FillNormal(rng_);
    ExpectRejected(a, {"value_cache"});
  }
}

TEST_F(PagedValueHeadSizeErrors, PackedQkvNeedsEqualHeadSizes) {
  SCOPED_TRACE(SeedTrace());
  auto packed = [&](int64_t Hv) {
    Attempt a = PagedDecode(Pool::kFloat, rng_, Hv);
    a.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = F32({kB, 1, (kN + 2 * kNkv) * kH});
    a.in[ATTNRT_PAGED_GQA_INPUT_QUERY].FillNormal(rng_);
    a.in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor();
    a.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor();
    a.output = F32({kB, 1, kN * kH});
    return a;
  };
  ExpectRuns(packed(kH));  // the control: packed QKV with Hv == H
  ExpectRejected(packed(kHv), {"value_cache|query", std::to_string(kHv)});
}

TEST_F(PagedValueHeadSizeErrors, PerChannelVScaleOfKeyHeadSize) {
  SCOPED_TRACE(SeedTrace());
  ExpectRuns(PagedDecode(Pool::kInt8PerChannel, rng_));
  Attempt a = PagedDecode(Pool::kInt8PerChannel, rng_);
  a.in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = F32({kNkv * kH});
  a.in[ATTNRT_PAGED_GQA_INPUT_V_SCALE].Fill(0.03f);
  ExpectRejected(a, {"v_scale", kNkvH, kNkvHv});
}

TEST_F(PagedValueHeadSizeErrors, BlockValueCacheNotWholeBlocks) {
  SCOPED_TRACE(SeedTrace());
  for (const Pool pool : {Pool::kQ8_0, Pool::kQ4_0}) {
    const int64_t block = pool == Pool::kQ8_0 ? 34 : 18;
    SCOPED_TRACE(pool == Pool::kQ8_0 ? "Q8_0" : "Q4_0");
    ExpectRuns(PagedDecode(pool, rng_));
    // 48 elements' worth of bytes (1.5 blocks), and 2 blocks plus one byte.
    for (const int64_t width : {48 * block / 32, 2 * block + 1}) {
      SCOPED_TRACE("value_cache row of " + std::to_string(width) + " bytes");
      ExpectRejected(PagedDecode(pool, rng_, kHv, width), {"value_cache", std::to_string(width)});
    }
  }
}

// A float cache takes any value head size (ABI 1.9; paged_gqa_head_size_test checks the values).
TEST_F(PagedValueHeadSizeErrors, FloatValueHeadSizeNotAMultipleOf8Runs) {
  SCOPED_TRACE(SeedTrace());
  ExpectRuns(PagedDecode(Pool::kFloat, rng_, 40));  // 40: a multiple of 8, not of 32
  ExpectRuns(PagedDecode(Pool::kFloat, rng_, 12));
}

}  // namespace
}  // namespace attnrt_test
