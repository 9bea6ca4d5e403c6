// Paged GroupQueryAttention over packed variable-length batches (attnrt/ops/paged_gqa_varlen.h)
// with PER_BLOCK_32 pools (ggml Q8_0 / Q4_0, ABI 1.7), on every paged varlen kernel the CPU plugin
// registers and the runtime's own choice, float32, float16 and bfloat16 queries: one call mixing
// decodes, a first prefill and a prefill chunk over BSNH and BNSH pools (head sizes 64 and 128),
// with and without slot_mapping, and two rows of engine padding after query_start_loc[B].
//
// Method as paged_gqa_block_quant_test.cpp: past tokens are random blocks where the table puts
// them, every other pool row has a NaN float16 d in each block; the new rows are quantized by the
// test's own Q8_0/Q4_0 quantizer and must land in the pools byte for byte (no other pool byte
// changes); each sequence's output rows are compared with the float64 reference on the dequantized
// values (float32 1e-5; float16/bfloat16 0.5 ulp of T + 1e-5 relative) and the padding rows must
// stay NaN (neither read nor written). Seeds as in the other tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace {

using namespace block_quant;  // NOLINT(google-build-using-namespace)

constexpr int64_t kN = 8, kNkv = 2, kPadding = 2;

struct Case {
  std::string name;
  int64_t H = 64;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  int64_t block_size = 16;
  bool slot_mapping = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// (q_len, T_b) per sequence: a decode, a first prefill, a chunk after a past, a decode at a block
// boundary, a one-token first prefill.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {
    {1, 40}, {7, 7}, {5, 60}, {1, 17}, {1, 1}};

using Param = std::tuple<std::string, Dtypes, Case>;

class PagedGqaVarlenBlockQuant : public testing::TestWithParam<Param> {};

TEST_P(PagedGqaVarlenBlockQuant, MatchesReference) {
  const std::string& pinned = std::get<0>(GetParam());
  const Dtypes& d = std::get<1>(GetParam());
  const Case& c = std::get<2>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", dtypes " +
               d.name + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  const FloatFormat Tq = d.query;
  const attnrt_dtype dq = QueryDtype(Tq);
  const int64_t H = c.H, Hc = BlockRowBytes(d.cache, H), bs = c.block_size;
  const int64_t B = static_cast<int64_t>(kSequences.size());
  std::vector<int32_t> start = {0}, seq_lens;
  int64_t max_len = 0, needed_total = 0;
  for (const auto& [q_len, len] : kSequences) {
    start.push_back(static_cast<int32_t>(start.back() + q_len));
    seq_lens.push_back(static_cast<int32_t>(len));
    max_len = std::max(max_len, len);
    needed_total += (len + bs - 1) / bs;
  }
  const int64_t tokens = start.back() + kPadding;
  const int64_t slots = (max_len + bs - 1) / bs + 1;
  const int64_t num_blocks = needed_total + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(B * slots), -1);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < (seq_lens[static_cast<size_t>(b)] + bs - 1) / bs; ++i) {
      table[static_cast<size_t>(b * slots + i)] = ids[next++];
    }
  }
  const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const std::vector<int64_t> pool_shape = bnsh ? std::vector<int64_t>{num_blocks, kNkv, bs, Hc}
                                               : std::vector<int64_t>{num_blocks, bs, kNkv, Hc};
  Tensor pools[2] = {Tensor(kU8, pool_shape), Tensor(kU8, pool_shape)};
  auto row_at = [&](Tensor& pool, int64_t b, int64_t h, int64_t j) {
    const int64_t x = table[static_cast<size_t>(b * slots + j / bs)];
    const int64_t r = j % bs;
    const int64_t row = bnsh ? (x * kNkv + h) * bs + r : (x * bs + r) * kNkv + h;
    return static_cast<uint8_t*>(pool.data()) + row * Hc;
  };
  for (Tensor& pool : pools) {
    for (int64_t r = 0; r < pool.numel() / Hc; ++r) {
      PoisonBlockRow(d.cache, H, rng, static_cast<uint8_t*>(pool.data()) + r * Hc);
    }
  }

  // Query/key/value rows of T (padding rows too); past tokens; the expected pools.
  std::vector<float> query = RoundedNormal(Tq, tokens * kN * H, rng);
  std::vector<float> key = RoundedNormal(Tq, tokens * kNkv * H, rng);
  std::vector<float> value = RoundedNormal(Tq, tokens * kNkv * H, rng);
  std::vector<std::vector<float>> past[2];  // per sequence (1, Nkv, P_b, H), dequantized
  std::vector<float> k_new(key.size()), v_new(value.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = seq_lens[static_cast<size_t>(b)];
    const int64_t P = len - q_len;
    for (int which = 0; which < 2; ++which) {
      past[which].emplace_back(static_cast<size_t>(kNkv * P * H));
      for (int64_t h = 0; h < kNkv; ++h) {
        for (int64_t j = 0; j < P; ++j) {
          uint8_t* row = row_at(pools[which], b, h, j);
          RandomBlockRow(d.cache, H, rng, row);
          DequantizeBlockRow(d.cache, row, H, past[which].back().data() + (h * P + j) * H);
        }
      }
    }
  }
  std::vector<uint8_t> expected[2];
  for (int which = 0; which < 2; ++which) {
    expected[which].assign(static_cast<const uint8_t*>(pools[which].data()),
                           static_cast<const uint8_t*>(pools[which].data()) + pools[which].bytes());
  }
  std::vector<int64_t> slot_mapping(static_cast<size_t>(tokens), -1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = seq_lens[static_cast<size_t>(b)];
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t token = start[static_cast<size_t>(b)] + i, j = len - q_len + i;
      slot_mapping[static_cast<size_t>(token)] =
          int64_t{table[static_cast<size_t>(b * slots + j / bs)]} * bs + j % bs;
      for (int64_t h = 0; h < kNkv; ++h) {
        const int64_t r = token * kNkv + h;
        for (int which = 0; which < 2; ++which) {
          uint8_t* dst = expected[which].data() + (row_at(pools[which], b, h, j) -
                                                   static_cast<uint8_t*>(pools[which].data()));
          QuantizeBlockRow(d.cache, (which == 0 ? key : value).data() + r * H, H, dst);
          DequantizeBlockRow(d.cache, dst, H, (which == 0 ? k_new : v_new).data() + r * H);
        }
      }
    }
  }

  std::vector<Tensor> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Tensor(dq, {tokens, kN * H});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = Tensor(dq, {tokens, kNkv * H});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = Tensor(dq, {tokens, kNkv * H});
  Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY], Tq, query);
  Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY], Tq, key);
  Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE], Tq, value);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = pools[0];
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = pools[1];
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(table, {B, slots});
  if (c.slot_mapping) in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = I64(slot_mapping, {tokens});
  Tensor output = Filled(Tq, {tokens, kN * H}, kNaN);
  std::vector<const attnrt_tensor*> ins;
  for (Tensor& t : in) ins.push_back(t.empty() ? nullptr : t.get());
  const attnrt_tensor* outs[] = {output.get()};

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kN, kNkv);
  a.gqa.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.gqa.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.gqa.kv_cache_bit_width = BitWidth(d.cache);
  a.block_size = static_cast<int32_t>(bs);
  a.kv_layout = c.layout;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();
  options.disable = "";
  options.num_threads = 4;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA_VARLEN, &a, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  if (!pinned.empty()) {
    std::string skip;
    const bool runs =
        PinnedKernelRuns(Explain(op.get(), ins.data(), ins.size(), outs, 1), pinned, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(runs);
  }
  attnrt_plan* raw_plan = nullptr;
  st = attnrt_op_plan(op.get(), ins.data(), ins.size(), outs, 1, &raw_plan);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  PlanPtr plan(raw_plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  SCOPED_TRACE("ran " + kernel);
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());
  st = attnrt_plan_run(plan.get(), ins.data(), ins.size(), outs, 1, nullptr, 0, nullptr);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  // The reference, one sequence at a time, into the packed rows; padding rows stay NaN.
  std::vector<double> want(static_cast<size_t>(tokens * kN * H),
                           std::numeric_limits<double>::quiet_NaN());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = seq_lens[static_cast<size_t>(b)];
    GqaRefProblem p;
    p.sequence_length = q_len;
    p.kv_sequence_length = q_len;
    p.num_heads = kN;
    p.kv_num_heads = kNkv;
    p.head_size = H;
    p.has_past = true;
    p.past_length = len - q_len;
    p.total_sequence_length = static_cast<int32_t>(len);
    p.seqlens_k = {static_cast<int32_t>(len - 1)};
    const int64_t first = start[static_cast<size_t>(b)];
    GqaRefInputs ri;
    ri.query = query.data() + first * kN * H;
    ri.key = k_new.data() + first * kNkv * H;
    ri.value = v_new.data() + first * kNkv * H;
    ri.past_key = past[0][static_cast<size_t>(b)].data();
    ri.past_value = past[1][static_cast<size_t>(b)].data();
    const GqaRefOutputs ref = ComputeGqaReference(p, ri);
    std::copy(ref.output.begin(), ref.output.end(), want.begin() + first * kN * H);
  }
  const int64_t valid = start.back() * kN * H;
  ExpectClose("output", output, Tq, want, [&](int64_t i) { return i < valid; });
  int64_t padding_written = 0;
  for (int64_t i = valid; i < output.numel(); ++i)
    padding_written += std::isnan(Load(output, Tq, i)) ? 0 : 1;
  EXPECT_EQ(padding_written, 0) << "elements of the padding rows written";
  for (int which = 0; which < 2; ++which) {
    const auto* got = static_cast<const uint8_t*>(pools[which].data());
    ExpectRowBytes(
        which == 0 ? "key_cache" : "value_cache", d.cache, pools[which].numel() / Hc, Hc,
        [&](int64_t r) { return got + r * Hc; },
        [&](int64_t r) { return expected[which].data() + r * Hc; },
        [&](int64_t r) {
          return "pool row " + std::to_string(r) + " (block " + std::to_string(r / (bs * kNkv)) +
                 ")";
        });
  }
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name +
                     "__" + std::get<2>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    CpuPlugin, PagedGqaVarlenBlockQuant,
    testing::Combine(
        testing::ValuesIn(KernelParams(ATTNRT_OP_PAGED_GQA_VARLEN)), testing::ValuesIn(AllDtypes()),
        testing::Values(Case{"bsnh_bs16_h64", 64, ATTNRT_PAGED_KV_LAYOUT_BSNH, 16, false},
                        Case{"bnsh_bs16_h128_slot_mapping", 128, ATTNRT_PAGED_KV_LAYOUT_BNSH, 16,
                             true})),
    ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedGqaVarlenBlockQuant);

}  // namespace
}  // namespace attnrt_test
