// cpu_x86.gqa.flash.amx (bfloat16 prompts, scores on AMX-BF16 tiles) against the float64 reference
// of tests/common, pinned: prompt shapes that take every path of its tile code (several key chunks
// and a partial one, query rows padded to whole tiles, pairs padded for head sizes that are not a
// multiple of 32, row groups of large heads), the non-finite rules of docs/gqa-semantics.md on that
// path, and the bfloat16 subnormals the tile product would read as zero, which must count as their
// value (docs/gqa-semantics.md, bfloat16 queries), in the scores and in P·V. Skipped where the CPU
// or OS has no AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr char kKernel[] = "cpu_x86.gqa.flash.amx";
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;

// A first prompt of S tokens (B = 1, no past, present outputs), every tensor bfloat16.
struct Shape {
  int64_t S = 40, N = 8, Nkv = 2, H = 64;
  float scale = 0.0f;  // 0: 1/sqrt(H)
};

// Query (S, N, H), key and value (S, Nkv, H) as float values exact in bfloat16.
struct Values {
  std::vector<float> q, k, v;
  float& Q(const Shape& s, int64_t t, int64_t n, int64_t d) { return q[(t * s.N + n) * s.H + d]; }
  float& K(const Shape& s, int64_t t, int64_t kvh, int64_t d) {
    return k[(t * s.Nkv + kvh) * s.H + d];
  }
  float& V(const Shape& s, int64_t t, int64_t kvh, int64_t d) {
    return v[(t * s.Nkv + kvh) * s.H + d];
  }
};

Values RandomValues(const Shape& s, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Values x;
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (float& e : v) e = RoundToFormat(FloatFormat::kBFloat16, normal(rng));
  };
  fill(x.q, s.S * s.N * s.H);
  fill(x.k, s.S * s.Nkv * s.H);
  fill(x.v, s.S * s.Nkv * s.H);
  return x;
}

Tensor BFloat16Tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  Tensor t(kBF16, std::move(shape));
  auto* bits = static_cast<uint16_t*>(t.data());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = BFloat16Bits(values[i]);
  return t;
}

// A bfloat16 subnormal: m * 2^-133, 0 < m < 128.
float Subnormal(int m) { return BFloat16Value(static_cast<uint16_t>(m)); }

// The output's bfloat16 rounding and float32 slack; relative only for values far below 1e-5, which
// a flushed subnormal would otherwise hide.
double Bound(double w) {
  return std::ldexp(std::fabs(w), -8) + (std::fabs(w) < 1e-30 ? 0.0 : 1e-5);
}

// Runs the pinned kernel on x and checks every output element against the float64 reference: NaN
// where it is NaN, within the bfloat16 rounding of the output (plus float32 slack) elsewhere.
void ExpectMatchesReference(const Shape& s, const Values& x) {
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = kKernel;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_gqa_attributes attributes =
      GqaAttributes(static_cast<int32_t>(s.N), static_cast<int32_t>(s.Nkv));
  attributes.scale = s.scale;
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);

  GqaTensors t;
  t[ATTNRT_GQA_INPUT_QUERY] = BFloat16Tensor(x.q, {1, s.S, s.N * s.H});
  t[ATTNRT_GQA_INPUT_KEY] = BFloat16Tensor(x.k, {1, s.S, s.Nkv * s.H});
  t[ATTNRT_GQA_INPUT_VALUE] = BFloat16Tensor(x.v, {1, s.S, s.Nkv * s.H});
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32({static_cast<int32_t>(s.S - 1)}, {1});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.S)}, {1});
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = BFloat16Tensor(
      std::vector<float>(static_cast<size_t>(s.S * s.N * s.H), kNaN), {1, s.S, s.N * s.H});
  t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = Tensor(kBF16, {1, s.Nkv, s.S, s.H});
  t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = Tensor(kBF16, {1, s.Nkv, s.S, s.H});

  for (const Candidate& c : Explain(op.get(), t)) {
    if (c.kernel != kKernel || c.status == ATTNRT_CANDIDATE_SELECTED) continue;
    GTEST_SKIP() << kKernel << " does not run here: " << c.reason;
  }
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  ASSERT_EQ(PlanKernel(plan.get()), kKernel);
  st = RunPlan(plan.get(), t);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  GqaRefProblem p;
  p.sequence_length = s.S;
  p.kv_sequence_length = s.S;
  p.num_heads = s.N;
  p.kv_num_heads = s.Nkv;
  p.head_size = s.H;
  p.has_present = true;
  p.present_length = s.S;
  p.total_sequence_length = static_cast<int32_t>(s.S);
  p.seqlens_k = {static_cast<int32_t>(s.S - 1)};
  p.scale = s.scale;
  p.flash_padded_window = true;
  GqaRefInputs in;
  in.query = x.q.data();
  in.key = x.k.data();
  in.value = x.v.data();
  const GqaRefOutputs ref = ComputeGqaReference(p, in);

  const auto* got = static_cast<const uint16_t*>(t[ATTNRT_GQA_OUTPUT_OUTPUT].data());
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < ref.output.size(); ++i) {
    const double g = BFloat16Value(got[i]);
    const double w = ref.output[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : !std::isnan(g) && std::fabs(g - w) <= Bound(w);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << bad << " output elements off; first (token, head, d) = ("
                    << first / (s.N * s.H) << ", " << first / s.H % s.N << ", " << first % s.H
                    << "): got " << BFloat16Value(got[first]) << ", want "
                    << ref.output[static_cast<size_t>(first)];
}

struct Case {
  std::string name;
  Shape shape;
  std::function<void(const Shape&, Values&)> poison;  // null: random values only
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> v;
  // Tiles of 64 rows (16 tokens x 4 heads), keys in chunks of 32 with a partial last one.
  v.push_back({"prompt_group_4", {}, nullptr});
  // 8 heads per kv head; 150 keys: several chunks, the causal diagonal in many of them.
  v.push_back({"prompt_group_8_long", {150, 16, 2, 64}, nullptr});
  // Pairs padded to whole tiles (H / 2 = 20 of 32), rows padded (S * G = 36 of 48).
  v.push_back({"head_size_40", {18, 4, 2, 40}, nullptr});
  v.push_back({"head_size_256", {33, 4, 2, 256}, nullptr});
  // 288 columns: the query pairs of a 64-row tile span two row groups.
  v.push_back({"head_size_288_row_groups", {40, 8, 2, 288}, nullptr});
  // A subnormal key element times a large query element is a normal product (about 2 here): read
  // as zero, the row would weigh its keys equally.
  v.push_back(
      {"subnormal_key_times_large_query", {40, 8, 2, 64, 1.0f}, [](const Shape& s, Values& x) {
         for (int64_t d = 0; d < s.H; ++d) x.Q(s, 20, 0, d) = 0.0f;
         x.Q(s, 20, 0, 3) = 0x1p127f;
         for (int64_t t = 0; t < s.S; ++t) x.K(s, t, 0, 3) = 0.0f;
         x.K(s, 5, 0, 3) = Subnormal(127);
       }});
  // The same with the subnormal in the query (its tile takes the float32 kernel).
  v.push_back(
      {"subnormal_query_times_large_key", {40, 8, 2, 64, 1.0f}, [](const Shape& s, Values& x) {
         // Element 9 of kv head 0's queries 0 but one (a normal one times 2^127 would overflow
         // float32, which the float64 reference does not).
         for (int64_t t = 0; t < s.S; ++t) {
           for (int64_t n = 0; n < 4; ++n) x.Q(s, t, n, 9) = 0.0f;
         }
         for (int64_t d = 0; d < s.H; ++d) x.Q(s, 25, 1, d) = 0.0f;
         x.Q(s, 25, 1, 9) = Subnormal(100);
         for (int64_t t = 0; t < s.S; ++t) x.K(s, t, 0, 9) = 0.0f;
         x.K(s, 7, 0, 9) = 0x1p127f;
       }});
  // Subnormal values: every output of kv head 0's heads is that value, not 0.
  v.push_back({"subnormal_values", {40, 8, 2, 64}, [](const Shape& s, Values& x) {
                 for (int64_t t = 0; t < s.S; ++t) {
                   for (int64_t d = 0; d < s.H; ++d) x.V(s, t, 0, d) = Subnormal(50);
                 }
               }});
  // -inf times every key's positive element: every score -inf, a zero row (rule 4); with the
  // subnormal read as zero, -inf * 0 would make one NaN score and a NaN row.
  v.push_back(
      {"minus_inf_query_times_subnormal_key", {40, 8, 2, 64}, [](const Shape& s, Values& x) {
         x.Q(s, 30, 1, 7) = -kInf;
         for (int64_t t = 0; t < s.S; ++t) x.K(s, t, 0, 7) = 1.0f;
         x.K(s, 3, 0, 7) = Subnormal(1);
       }});
  // The rules on the tile path: a NaN query element (NaN row), +inf times a positive key element
  // (NaN row), an infinite value row of a visible key (the elements it reaches), a NaN key element
  // (NaN rows for every row that sees that key, and none before it).
  v.push_back({"non_finite", {40, 8, 2, 64}, [](const Shape& s, Values& x) {
                 x.Q(s, 10, 2, 0) = kNaN;
                 x.Q(s, 12, 5, 4) = kInf;
                 for (int64_t t = 0; t < s.S; ++t) x.K(s, t, 1, 4) = 0.5f;
                 x.V(s, 6, 0, 11) = kInf;
                 x.K(s, 33, 1, 20) = kNaN;
               }});
  return v;
}

class GqaAmx : public testing::TestWithParam<Case> {};

TEST_P(GqaAmx, MatchesReference) {
  const Case& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  Values x = RandomValues(c.shape, rng);
  if (c.poison) c.poison(c.shape, x);
  ExpectMatchesReference(c.shape, x);
}

INSTANTIATE_TEST_SUITE_P(CpuX86, GqaAmx, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
}  // namespace attnrt_test
