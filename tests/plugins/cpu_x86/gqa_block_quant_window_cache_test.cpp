// The window-sized ring cache (sliding_window_cache = 1, docs/gqa-semantics.md) over
// PER_BLOCK_32 caches (ggml Q8_0 / Q4_0, attnrt/ops/gqa.h, ABI 1.7) on every GQA kernel of the CPU
// plugin and the runtime's own choice: decode steps of four sequences whose lengths put the step
// inside the capacity, at it (the first compaction), beyond it without and with a compaction, and
// steps of 4 tokens (chunked prefill) that compact, some through ONNX Runtime's staging cache,
// with present in its own memory and in the past's. The cache of capacity C = P keeps the last
// end(length) tokens at rows [0, end) (ONNX Runtime's WindowedCacheEnd: once full, whole blocks of
// C - W + 1 rows are reclaimed), so after a step each resident past token's row must be its row
// before the step, moved byte for byte, and each new token's row the test's own quantization of
// its rotated key (RoPE at its absolute position, rounded to the query type); present rows
// [end, C) are zero when present has its own memory. The output is compared with the float64
// reference over the dequantized tokens, whose local window of W keys lies in the resident rows.
// Tolerances and seeds as in gqa_block_quant_test.cpp. Also here: the checks of the test's own
// Q8_0/Q4_0 quantizer and dequantizer on values worked out by hand (BlockQuantReferenceSelfCheck).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace {

using namespace block_quant;  // NOLINT(google-build-using-namespace)

constexpr int64_t kCapacity = 8;  // C = P
constexpr int32_t kWindow = 5;    // W: reclaimed blocks of C - W + 1 = 4 rows
constexpr int64_t kN = 4, kNkv = 2;

// Rows resident after `length` tokens (ONNX Runtime's WindowedCacheEnd).
int64_t WindowEnd(int64_t length) {
  if (length <= kCapacity) return length;
  const int64_t gap = kCapacity - kWindow + 1;
  return length - gap * ((length - kCapacity + gap - 1) / gap);
}

struct Case {
  std::string name;
  int64_t H = 64;
  bool shared_buffer = false;
  int64_t S = 1;                 // new tokens per sequence (S > 1: one sequence)
  std::vector<int32_t> lengths;  // T_b, after the step
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

using Param = std::tuple<std::string, Dtypes, Case>;

class GqaBlockQuantWindowCache : public testing::TestWithParam<Param> {};

TEST_P(GqaBlockQuantWindowCache, StepMatchesReference) {
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
  const int64_t H = c.H, Hc = BlockRowBytes(d.cache, H), half = H / 2;
  const std::vector<int32_t>& lengths = c.lengths;
  const int64_t B = static_cast<int64_t>(lengths.size()), S = c.S;
  const int64_t T = *std::max_element(lengths.begin(), lengths.end());
  const int64_t M = T + 4;

  GqaTensors t;
  std::vector<float> query = RoundedNormal(Tq, B * S * kN * H, rng);
  std::vector<float> key = RoundedNormal(Tq, B * S * kNkv * H, rng);
  std::vector<float> value = RoundedNormal(Tq, B * S * kNkv * H, rng);
  t[ATTNRT_GQA_INPUT_QUERY] = Tensor(dq, {B, S, kN * H});
  t[ATTNRT_GQA_INPUT_KEY] = Tensor(dq, {B, S, kNkv * H});
  t[ATTNRT_GQA_INPUT_VALUE] = Tensor(dq, {B, S, kNkv * H});
  Store(t[ATTNRT_GQA_INPUT_QUERY], Tq, query);
  Store(t[ATTNRT_GQA_INPUT_KEY], Tq, key);
  Store(t[ATTNRT_GQA_INPUT_VALUE], Tq, value);
  std::vector<int32_t> seqlens;
  for (int32_t length : lengths) seqlens.push_back(length - 1);
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {B});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});
  std::vector<float> cos_cache, sin_cache;
  std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
  for (int64_t i = 0; i < M * half; ++i) {
    const double a = angle(rng);
    cos_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::cos(a))));
    sin_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::sin(a))));
  }
  t[ATTNRT_GQA_INPUT_COS_CACHE] = Tensor(dq, {M, half});
  t[ATTNRT_GQA_INPUT_SIN_CACHE] = Tensor(dq, {M, half});
  Store(t[ATTNRT_GQA_INPUT_COS_CACHE], Tq, cos_cache);
  Store(t[ATTNRT_GQA_INPUT_SIN_CACHE], Tq, sin_cache);

  // Past: rows [0, end(T_b - S)) resident (random blocks), the rest poisoned.
  std::vector<uint8_t> past_bytes[2];
  for (auto& bytes : past_bytes) {
    bytes.resize(static_cast<size_t>(B * kNkv * kCapacity * Hc));
    for (int64_t r = 0; r < B * kNkv * kCapacity; ++r) {
      const int64_t b = r / (kNkv * kCapacity);
      if (r % kCapacity < WindowEnd(lengths[static_cast<size_t>(b)] - S)) {
        RandomBlockRow(d.cache, H, rng, bytes.data() + r * Hc);
      } else {
        PoisonBlockRow(d.cache, H, rng, bytes.data() + r * Hc);
      }
    }
  }
  for (int which = 0; which < 2; ++which) {
    const auto input = which == 0 ? ATTNRT_GQA_INPUT_PAST_KEY : ATTNRT_GQA_INPUT_PAST_VALUE;
    t[input] = Tensor(kU8, {B, kNkv, kCapacity, Hc});
    std::memcpy(t[input].data(), past_bytes[which].data(), past_bytes[which].size());
    const auto output =
        which == 0 ? ATTNRT_GQA_OUTPUT_PRESENT_KEY : ATTNRT_GQA_OUTPUT_PRESENT_VALUE;
    if (c.shared_buffer) {
      t[output] = t[input];
    } else {
      t[output] = Tensor(kU8, {B, kNkv, kCapacity, Hc});
      std::memset(t[output].data(), kBytePoison, t[output].bytes());
    }
  }
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = Filled(Tq, {B, S, kN * H}, kNaN);

  // The new rows (RoPE at their absolute positions T_b - S + s, rounded to T, quantized), the
  // expected present, and the reference's logical past: token j of batch b at row j, NaN where
  // not resident.
  const int64_t ref_past = T - S;
  std::vector<float> q = query, k_new(key.size()), v_new(value.size());
  std::vector<float> past_ref[2];
  for (auto& p : past_ref) p.assign(static_cast<size_t>(B * kNkv * ref_past * H), kNaN);
  std::vector<uint8_t> expected[2];
  for (auto& e : expected) e.assign(static_cast<size_t>(B * kNkv * kCapacity * Hc), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = lengths[static_cast<size_t>(b)], old_length = length - S;
    const int64_t end_before = WindowEnd(old_length), end_after = WindowEnd(length);
    const int64_t first_before = old_length - end_before;  // token at row 0 before the step
    const int64_t first_after = length - end_after;
    ASSERT_LE(first_before, first_after) << "a case whose step would resurrect an evicted token";
    for (int64_t s = 0; s < S; ++s) {
      const float* cr = cos_cache.data() + (old_length + s) * half;
      const float* sr = sin_cache.data() + (old_length + s) * half;
      for (int64_t n = 0; n < kN; ++n) {
        RotateAndRound(Tq, q.data() + ((b * S + s) * kN + n) * H, H, cr, sr, half, false);
      }
      for (int64_t h = 0; h < kNkv; ++h) {
        RotateAndRound(Tq, key.data() + ((b * S + s) * kNkv + h) * H, H, cr, sr, half, false);
      }
    }
    for (int64_t h = 0; h < kNkv; ++h) {
      const int64_t head = b * kNkv + h;
      for (int which = 0; which < 2; ++which) {
        const std::vector<uint8_t>& before = past_bytes[which];
        for (int64_t j = first_before; j < old_length; ++j) {
          const uint8_t* row = before.data() + (head * kCapacity + j - first_before) * Hc;
          DequantizeBlockRow(d.cache, row, H, past_ref[which].data() + (head * ref_past + j) * H);
          if (j >= first_after) {
            std::memcpy(expected[which].data() + (head * kCapacity + j - first_after) * Hc, row,
                        static_cast<size_t>(Hc));
          }
        }
        for (int64_t s = 0; s < S; ++s) {
          const int64_t r = (b * S + s) * kNkv + h;  // row of key/value
          uint8_t* dst =
              expected[which].data() + (head * kCapacity + old_length + s - first_after) * Hc;
          ASSERT_GE(old_length + s, first_after) << "a new token not resident after the step";
          QuantizeBlockRow(d.cache, (which == 0 ? key : value).data() + r * H, H, dst);
          DequantizeBlockRow(d.cache, dst, H, (which == 0 ? k_new : v_new).data() + r * H);
        }
      }
    }
  }

  attnrt_gqa_attributes a = GqaAttributes(kN, kNkv);
  a.local_window_size = kWindow;
  a.sliding_window_cache = 1;
  a.do_rotary = 1;
  a.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.kv_cache_bit_width = BitWidth(d.cache);

  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();
  options.disable = "";
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &a, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  if (!pinned.empty()) {
    std::string skip;
    const bool runs = PinnedKernelRuns(Explain(op.get(), t), pinned, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(runs);
  }
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  SCOPED_TRACE("ran " + kernel);
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());
  st = RunPlan(plan.get(), t);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  GqaRefProblem p;
  p.batch_size = B;
  p.sequence_length = S;
  p.kv_sequence_length = S;
  p.num_heads = kN;
  p.kv_num_heads = kNkv;
  p.head_size = H;
  p.has_past = true;
  p.past_length = ref_past;
  p.total_sequence_length = static_cast<int32_t>(T);
  p.seqlens_k = seqlens;
  p.local_window_size = kWindow;
  p.flash_padded_window = Algorithm(kernel) == "flash";
  GqaRefInputs in;
  in.query = q.data();
  in.key = k_new.data();
  in.value = v_new.data();
  in.past_key = past_ref[0].data();
  in.past_value = past_ref[1].data();
  const GqaRefOutputs ref = ComputeGqaReference(p, in);
  ExpectClose("output", t[ATTNRT_GQA_OUTPUT_OUTPUT], Tq, ref.output, [](int64_t) { return true; });

  for (int which = 0; which < 2; ++which) {
    const auto output =
        which == 0 ? ATTNRT_GQA_OUTPUT_PRESENT_KEY : ATTNRT_GQA_OUTPUT_PRESENT_VALUE;
    const auto* got = static_cast<const uint8_t*>(t[output].data());
    // Rows [0, end) always; rows [end, C) (zero) only when present has its own memory.
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < B * kNkv * kCapacity; ++r) {
      const int64_t end = WindowEnd(lengths[static_cast<size_t>(r / (kNkv * kCapacity))]);
      if (!c.shared_buffer || r % kCapacity < end) rows.push_back(r);
    }
    ExpectRowBytes(
        which == 0 ? "present_key" : "present_value", d.cache, static_cast<int64_t>(rows.size()),
        Hc, [&](int64_t i) { return got + rows[static_cast<size_t>(i)] * Hc; },
        [&](int64_t i) { return expected[which].data() + rows[static_cast<size_t>(i)] * Hc; },
        [&](int64_t i) {
          const int64_t r = rows[static_cast<size_t>(i)];
          const int64_t b = r / (kNkv * kCapacity);
          return "row [b " + std::to_string(b) + " (length " +
                 std::to_string(lengths[static_cast<size_t>(b)]) + "), kv head " +
                 std::to_string(r / kCapacity % kNkv) + ", row " + std::to_string(r % kCapacity) +
                 "]";
        });
  }
}

// Decodes of four sequences whose lengths put the step inside the capacity, at it (the first
// compaction), beyond it without and with a compaction; steps of 4 tokens of one sequence from a
// partly filled cache (the new rows evict rows that the step's first queries still see), from a
// full one, and from a compacted one.
std::vector<Case> Cases() {
  return {Case{"decode_h64", 64, false, 1, {4, 9, 22, 25}},
          Case{"decode_shared_buffer_h128", 128, true, 1, {4, 9, 22, 25}},
          Case{"step4_from_6_h64", 64, false, 4, {10}},
          Case{"step4_from_8_shared_buffer_h96", 96, true, 4, {12}},
          Case{"step4_from_21_h32", 32, false, 4, {25}}};
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

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaBlockQuantWindowCache,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_GQA)),
                                          testing::ValuesIn(AllDtypes()),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaBlockQuantWindowCache);

// ---- the block quantizer itself, on values worked out by hand from ggml's formulas -------------
uint16_t D(const uint8_t* block) { return static_cast<uint16_t>(block[0] | block[1] << 8); }

TEST(BlockQuantReferenceSelfCheck, Q8_0) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f / 64.0f;  // d = 1/64 (0x2400), id = 64
  x[1] = 5.0f / 128.0f;   // 2.5 -> 3 (half away from zero; rint would give 2)
  x[2] = -1.0f / 128.0f;  // -0.5 -> -1
  x[3] = 3.0f / 128.0f;   // 1.5 -> 2
  x[4] = -1.0f / 256.0f;  // -0.25 -> 0
  std::vector<uint8_t> q(34);
  QuantizeBlockRow(BlockFormat::kQ8_0, x.data(), 32, q.data());
  EXPECT_EQ(D(q.data()), 0x2400);
  EXPECT_EQ(q[2], 127);
  EXPECT_EQ(q[3], 3);
  EXPECT_EQ(q[4], 0xFF);
  EXPECT_EQ(q[5], 2);
  EXPECT_EQ(q[6], 0);
  std::vector<float> y(32);
  DequantizeBlockRow(BlockFormat::kQ8_0, q.data(), 32, y.data());
  EXPECT_EQ(y[0], 127.0f / 64.0f);
  EXPECT_EQ(y[2], -1.0f / 64.0f);
  // d = 1/127 is stored rounded to float16 (0x2008), while the codes use 1/d in float32: 127.
  std::fill(x.begin(), x.end(), 0.0f);
  x[7] = -1.0f;
  QuantizeBlockRow(BlockFormat::kQ8_0, x.data(), 32, q.data());
  EXPECT_EQ(D(q.data()), Float16Bits(1.0f / 127.0f));
  EXPECT_EQ(q[2 + 7], static_cast<uint8_t>(-127));
  // All zeros: d = 0, codes 0. A stored code of -128 reads as -128 d.
  std::fill(x.begin(), x.end(), 0.0f);
  QuantizeBlockRow(BlockFormat::kQ8_0, x.data(), 32, q.data());
  EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](uint8_t v) { return v == 0; }));
  q[0] = 0x00;
  q[1] = 0x3C;  // d = 1
  q[2] = 0x80;
  DequantizeBlockRow(BlockFormat::kQ8_0, q.data(), 32, y.data());
  EXPECT_EQ(y[0], -128.0f);
}

TEST(BlockQuantReferenceSelfCheck, Q4_0) {
  std::vector<float> x(32, 0.0f);
  x[0] = -0.5f;           // the largest magnitude, first: d = -0.5 / -8 = 1/16 (0x2C00), id = 16
  x[1] = 0.5f;            // 8 + 8.5 = 16.5 -> 16 -> 15
  x[2] = 5.0f / 32.0f;    // 2.5 + 8.5 = 11 -> 11
  x[16] = -1.0f / 32.0f;  // -0.5 + 8.5 = 8 -> 8 (high nibble of byte 0)
  x[17] = 0.4f;           // 6.4 + 8.5 = 14.9 -> 14 (truncated)
  std::vector<uint8_t> q(18);
  QuantizeBlockRow(BlockFormat::kQ4_0, x.data(), 32, q.data());
  EXPECT_EQ(D(q.data()), 0x2C00);
  EXPECT_EQ(q[2], 0x80);  // element 0: code 0; element 16: code 8
  EXPECT_EQ(q[3], 0xEF);  // element 1: 15; element 17: 14
  EXPECT_EQ(q[4], 0x8B);  // element 2: 11; element 18 (0): 8
  std::vector<float> y(32);
  DequantizeBlockRow(BlockFormat::kQ4_0, q.data(), 32, y.data());
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[1], 7.0f / 16.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[17], 6.0f / 16.0f);
  // The tie goes to the first: +0.5 first gives d = -1/16 and flips every code.
  std::swap(x[0], x[1]);
  QuantizeBlockRow(BlockFormat::kQ4_0, x.data(), 32, q.data());
  EXPECT_EQ(D(q.data()), 0xAC00);
  // All zeros: m = +0, d = -0 (0x8000), every code 8.
  std::fill(x.begin(), x.end(), 0.0f);
  QuantizeBlockRow(BlockFormat::kQ4_0, x.data(), 32, q.data());
  EXPECT_EQ(D(q.data()), 0x8000);
  EXPECT_TRUE(std::all_of(q.begin() + 2, q.end(), [](uint8_t v) { return v == 0x88; }));
}

}  // namespace
}  // namespace attnrt_test
