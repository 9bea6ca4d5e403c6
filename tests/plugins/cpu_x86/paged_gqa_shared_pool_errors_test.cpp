// A paged call that writes rows may not read key_cache and value_cache from shared elements
// (attnrt/ops/paged_gqa.h, the paragraph on strided pools; ABI 1.8 lets only a call that writes no
// rows share them): over the views of paged_gqa_shared_pool_test.cpp (value_cache =
// key_cache[..., :Hv] of one pool, or key_cache's own descriptor when Hv == H), a paged decode with
// new key/value rows (L = 1) and a varlen step with key and value given must fail with
// INVALID_ARGUMENT whose message names value_cache and key_cache, on the runtime's own choice and
// on every kernel that accepts the call, with the pool and the output byte for byte as before. The
// same call with a value_cache of its own (same shape) runs, so the rejection is the sharing's.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "paged_gqa_shared_pool_support.h"
#include "paged_gqa_value_head_size_support.h"

namespace attnrt_test {
namespace value_head_size {
namespace shared_pool {
namespace {

struct WriteCase {
  std::string name;
  bool varlen = false;
  HeadSizes hs;
  Cache cache = Cache::kFloat;
  FloatFormat t = FloatFormat::kFloat32;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
};

void PrintTo(const WriteCase& c, std::ostream* os) { *os << c.name; }

std::vector<WriteCase> WriteCases() {
  std::vector<WriteCase> v;
  for (bool varlen : {false, true}) {
    for (const HeadSizes& hs : SharedHeadSizes()) {
      for (int ci = 0; ci < 2; ++ci) {
        if (kReduced && ci == 1) continue;
        for (int li = 0; li < 2; ++li) {
          WriteCase c;
          c.varlen = varlen;
          c.hs = hs;
          c.cache = ci == 0 ? Cache::kFloat : Cache::kInt8PerTensor;
          c.t = ci == 0 ? FloatFormat::kFloat32 : FloatFormat::kBFloat16;
          c.layout = li == 0 ? ATTNRT_PAGED_KV_LAYOUT_BSNH : ATTNRT_PAGED_KV_LAYOUT_BNSH;
          c.name = std::string(varlen ? "varlen" : "paged") + "_h" + std::to_string(hs.H) + "_hv" +
                   std::to_string(hs.Hv) + "_" + FloatFormatName(c.t) + "_" + CacheName(c.cache) +
                   (li == 0 ? "_bsnh" : "_bnsh");
          v.push_back(c);
        }
      }
    }
  }
  return v;
}

// Plans and runs the call on `runtime`; returns the first status that is not OK (OK when both
// are) and the last error message then.
attnrt_status Attempt(attnrt_runtime* runtime, int32_t op_kind, const void* attributes,
                      const std::vector<const attnrt_tensor*>& inputs,
                      const std::vector<const attnrt_tensor*>& outputs, std::string* message) {
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime, op_kind, attributes, &raw_op);
  if (st != ATTNRT_OK) {
    *message = "op_create: " + LastError(st);
    return st;
  }
  OpPtr op(raw_op);
  attnrt_plan* raw_plan = nullptr;
  st = attnrt_op_plan(op.get(), inputs.data(), inputs.size(), outputs.data(), outputs.size(),
                      &raw_plan);
  if (st != ATTNRT_OK) {
    *message = attnrt_last_error_message();
    return st;
  }
  PlanPtr plan(raw_plan);
  st = attnrt_plan_run(plan.get(), inputs.data(), inputs.size(), outputs.data(), outputs.size(),
                       nullptr, 0, nullptr);
  *message = st == ATTNRT_OK ? "" : attnrt_last_error_message();
  return st;
}

class PagedGqaSharedPoolWrites : public testing::TestWithParam<WriteCase> {};

TEST_P(PagedGqaSharedPoolWrites, RejectedNamingBothPoolsAndNothingWritten) {
  const WriteCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.t;
  const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t N = 4, Nkv = bnsh ? 2 : 1, H = c.hs.H, Hv = c.hs.Hv, block_size = 4;
  // Paged: a decode of 2 sequences (T_b 9 and 6). Varlen: a decode (T_b 9) and a 3-token chunk
  // (T_b 6). Every row of both sequences is in the pool, the new tokens' too.
  const std::vector<int64_t> lengths = {9, 6};
  const int64_t B = 2, tokens = c.varlen ? 4 : 1;
  SharedPool s;
  MakeSharedPool(s, c.cache, t, c.layout, Nkv, block_size, c.hs, lengths, 9, !bnsh, rng);
  ASSERT_FALSE(HasFatalFailure());

  const attnrt_dtype dq = QueryDtype(t);
  const int32_t op_kind = c.varlen ? ATTNRT_OP_PAGED_GQA_VARLEN : ATTNRT_OP_PAGED_GQA;
  std::vector<Tensor> in(static_cast<size_t>(c.varlen ? int{ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS}
                                                      : int{ATTNRT_PAGED_GQA_NUM_INPUTS}));
  const std::vector<int64_t> q_shape =
      c.varlen ? std::vector<int64_t>{tokens, N * H} : std::vector<int64_t>{B, 1, N * H};
  const std::vector<int64_t> k_shape =
      c.varlen ? std::vector<int64_t>{tokens, Nkv * H} : std::vector<int64_t>{B, 1, Nkv * H};
  const std::vector<int64_t> v_shape =
      c.varlen ? std::vector<int64_t>{tokens, Nkv * Hv} : std::vector<int64_t>{B, 1, Nkv * Hv};
  in[0] = Tensor(dq, q_shape);  // query, key, value: positions 0, 1, 2 in both ops
  in[1] = Tensor(dq, k_shape);
  in[2] = Tensor(dq, v_shape);
  for (int i = 0; i < 3; ++i) {
    block_quant::Store(in[i], t, block_quant::RoundedNormal(t, in[i].numel(), rng));
  }
  int k_scale = ATTNRT_PAGED_GQA_INPUT_K_SCALE, v_scale = ATTNRT_PAGED_GQA_INPUT_V_SCALE;
  if (c.varlen) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32({0, 1, 4}, {B + 1});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32({9, 6}, {B});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(s.p.table, {B, s.p.slots});
    k_scale = ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE;
    v_scale = ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE;
  } else {
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32({8, 5}, {B});
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({9}, {1});
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.p.table, {B, s.p.slots});
  }
  if (!s.v_scale.empty()) {
    in[k_scale] = F32({1});
    in[k_scale].f32()[0] = s.p.scales[0][0];
    in[v_scale] = F32({1});
    in[v_scale].f32()[0] = s.v_scale[0];
  }
  Tensor output = block_quant::Filled(
      t, c.varlen ? std::vector<int64_t>{tokens, N * Hv} : std::vector<int64_t>{B, 1, N * Hv},
      0.25f);
  const std::vector<uint8_t> output_before(
      static_cast<const uint8_t*>(output.data()),
      static_cast<const uint8_t*>(output.data()) + output.bytes());
  // A value_cache of its own: value_cache's shape, compact, finite rows.
  Tensor own(s.key_cache.get()->dtype, s.value_shape);
  {
    const int64_t rows = own.numel() / s.value_shape.back(), row_bytes = RowBytes(c.cache, t, Hv);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> x = block_quant::RoundedNormal(t, Hv, rng);
      EncodeRow(c.cache, t, x.data(), Hv, s.v_scale, 0,
                static_cast<uint8_t*>(own.data()) + r * row_bytes);
    }
  }

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  SetQuantization(c.cache, a.gqa);
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = c.layout;

  std::vector<const attnrt_tensor*> inputs, outputs = {output.get()};
  for (Tensor& x : in) inputs.push_back(x.empty() ? nullptr : x.get());
  inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = s.KeyCache();  // position 3 in both ops
  inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = own.get();   // position 4 in both ops

  // The control: with a value_cache of its own the call runs.
  attnrt_runtime* unpinned = RuntimeFor("");
  ASSERT_NE(unpinned, nullptr);
  std::string message;
  ASSERT_EQ(Attempt(unpinned, op_kind, &a, inputs, outputs, &message), ATTNRT_OK)
      << "the call with a value_cache of its own: " << message;
  std::vector<std::string> kernels = {""};
  {
    attnrt_op* raw = nullptr;
    ASSERT_EQ(attnrt_op_create(unpinned, op_kind, &a, &raw), ATTNRT_OK);
    OpPtr op(raw);
    for (const Candidate& k :
         Explain(op.get(), inputs.data(), inputs.size(), outputs.data(), outputs.size())) {
      if (k.status == ATTNRT_CANDIDATE_SELECTED || k.status == ATTNRT_CANDIDATE_ELIGIBLE) {
        kernels.push_back(k.kernel);
      }
    }
  }
  ASSERT_GE(kernels.size(), 2u) << "no kernel accepts the call with a value_cache of its own";

  // The views that share elements: rejected everywhere, nothing written.
  inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = s.ValueCache();
  for (const std::string& kernel : kernels) {
    SCOPED_TRACE(kernel.empty() ? std::string("the runtime's own choice") : "pinned " + kernel);
    attnrt_runtime* runtime = RuntimeFor(kernel);
    ASSERT_NE(runtime, nullptr);
    s.Restore();
    std::memcpy(output.data(), output_before.data(), output_before.size());
    const attnrt_status st = Attempt(runtime, op_kind, &a, inputs, outputs, &message);
    std::printf("[observed] %s on %s: %s: %s\n", c.name.c_str(),
                kernel.empty() ? "auto" : kernel.c_str(), attnrt_status_name(st), message.c_str());
    EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
    EXPECT_NE(message.find("value_cache"), std::string::npos) << message;
    EXPECT_NE(message.find("key_cache"), std::string::npos) << message;
    ExpectSameBytes("key_cache (value_cache's memory too)", s.Bytes(), s.p.before[0],
                    [&](int64_t byte) { return s.Describe(byte); });
    ExpectSameBytes("output", static_cast<const uint8_t*>(output.data()), output_before,
                    [](int64_t byte) { return "byte " + std::to_string(byte); });
  }
}

std::string WriteName(const testing::TestParamInfo<WriteCase>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaSharedPoolWrites, testing::ValuesIn(WriteCases()),
                         WriteName);

}  // namespace
}  // namespace shared_pool
}  // namespace value_head_size
}  // namespace attnrt_test
