// Non-finite inputs (NaN, ±inf) on every GQA kernel the CPU plugin registers (cpu_x86, or cpu_arm
// under emulation), each pinned, and on the runtime's own choice: the rules of
// docs/gqa-semantics.md (non-finite values) against the float64 reference of tests/common, which
// applies them. Each case also states, from first principles, which output rows must be NaN, zero
// or finite, so the reference itself is checked against the rule.
//
// Row classes: 'n' every element NaN; '0' every element 0; 'f' every element finite; 'x' some
// elements ±inf or NaN (a non-finite value reaching the weighted sum of V).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  std::string name;
  int64_t S = 1;        // 1: a decode step after P past rows; > 1: a first prompt
  int64_t P = 8;        // past rows (decode only)
  bool bias = false;    // attention_bias (1, N, S, T), N(0,1)
  bool sink = false;    // head_sink (N), N(0,1)
  int32_t window = -1;  // local_window_size
  int32_t threads = 0;  // 0: the runtime's default
  std::string rows;     // expected class of each (s, n) row, s-major; B = 1
  std::function<void(GqaTensors&)> poison;  // puts the non-finite values in
};

// Shapes: B = 1, N = 4, Nkv = 2 (heads 0 and 1 read kv head 0), H = 64.
constexpr int64_t kN = 4;
constexpr int64_t kNkv = 2;
constexpr int64_t kH = 64;

float* QueryAt(GqaTensors& t, int64_t s, int64_t n) {
  return t[ATTNRT_GQA_INPUT_QUERY].f32() + (s * kN + n) * kH;
}
float* PastAt(GqaTensors& t, attnrt_gqa_input which, const Case& c, int64_t kvh, int64_t row) {
  return t[which].f32() + (kvh * c.P + row) * kH;
}
float* NewAt(GqaTensors& t, attnrt_gqa_input which, int64_t s, int64_t kvh) {
  return t[which].f32() + (s * kNkv + kvh) * kH;
}
int64_t TotalOf(const Case& c) { return c.S > 1 ? c.S : c.P + 1; }
float* BiasRow(GqaTensors& t, const Case& c, int64_t n, int64_t s) {
  return t[ATTNRT_GQA_INPUT_ATTENTION_BIAS].f32() + (n * c.S + s) * TotalOf(c);
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  auto add = [&v](Case c) { v.push_back(std::move(c)); };
  const float ninf = -kInf;
  // Query and keys: a NaN, or an inf meeting both signs in q·k, makes the row NaN.
  add({"query_nan", 1, 8, false, false, -1, 0, "nfff",
       [](GqaTensors& t) { QueryAt(t, 0, 0)[0] = kNaN; }});
  add({"query_inf", 1, 8, false, false, -1, 0, "fnff", [](GqaTensors& t) {
         QueryAt(t, 0, 1)[5] = kInf;
         NewAt(t, ATTNRT_GQA_INPUT_KEY, 0, 0)[5] = 1.0f;  // that key's score is +inf
       }});
  add({"past_key_row_inf", 1, 8, false, false, -1, 0, "nnff", [](GqaTensors& t) {
         Case c;
         std::fill_n(PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 0, 3), kH, kInf);
       }});
  add({"past_key_nan", 1, 8, false, false, -1, 0, "ffnn", [](GqaTensors& t) {
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 1, 6)[9] = kNaN;
       }});
  add({"new_key_nan", 1, 8, false, false, -1, 0, "nnff",
       [](GqaTensors& t) { NewAt(t, ATTNRT_GQA_INPUT_KEY, 0, 0)[1] = kNaN; }});
  // A key whose score is +inf (q·k of one inf and zeros): NaN row.
  add({"score_pos_inf", 1, 8, false, false, -1, 0, "nfff", [](GqaTensors& t) {
         Case c;
         float* k = PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 0, 2);
         std::fill_n(k, kH, 0.0f);
         k[0] = kInf;
         QueryAt(t, 0, 0)[0] = 1.0f;
         QueryAt(t, 0, 1)[0] = -1.0f;  // head 1: score -inf, weight 0, finite row
       }});
  // Every score -inf through K: zero row.
  add({"scores_all_neg_inf", 1, 8, false, false, -1, 0, "0nff", [](GqaTensors& t) {
         Case c;
         for (int64_t j = 0; j < c.P; ++j) {
           float* k = PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 0, j);
           std::fill_n(k, kH, 0.0f);
           k[0] = kInf;
         }
         float* k = NewAt(t, ATTNRT_GQA_INPUT_KEY, 0, 0);
         std::fill_n(k, kH, 0.0f);
         k[0] = kInf;
         QueryAt(t, 0, 0)[0] = -1.0f;
         QueryAt(t, 0, 1)[0] = 1.0f;  // head 1: every score +inf
         std::fill_n(QueryAt(t, 0, 1) + 1, kH - 1, 0.0f);
       }});
  // Values: IEEE through the weighted sum.
  add({"past_value_inf", 1, 8, false, false, -1, 0, "xxff", [](GqaTensors& t) {
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 0, 3)[5] = kInf;
       }});
  add({"past_value_nan", 1, 8, false, false, -1, 0, "ffxx", [](GqaTensors& t) {
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 1, 0)[63] = kNaN;
       }});
  add({"past_value_row_neg_inf", 1, 8, false, false, -1, 0, "xxff", [](GqaTensors& t) {
         Case c;
         std::fill_n(PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 0, 7), kH, -kInf);
       }});
  // Bias.
  add({"bias_row_neg_inf", 1, 8, true, false, -1, 0, "0fff",
       [ninf](GqaTensors& t) { std::fill_n(BiasRow(t, Case{}, 0, 0), 9, ninf); }});
  add({"bias_all_neg_inf", 1, 8, true, false, -1, 0, "0000",
       [ninf](GqaTensors& t) { t[ATTNRT_GQA_INPUT_ATTENTION_BIAS].Fill(ninf); }});
  add({"bias_pos_inf", 1, 8, true, false, -1, 0, "fnff",
       [](GqaTensors& t) { BiasRow(t, Case{}, 1, 0)[4] = kInf; }});
  add({"bias_nan", 1, 8, true, false, -1, 0, "ffnf",
       [](GqaTensors& t) { BiasRow(t, Case{}, 2, 0)[8] = kNaN; }});
  add({"bias_some_neg_inf", 1, 8, true, false, -1, 0, "ffff",
       [ninf](GqaTensors& t) { std::fill_n(BiasRow(t, Case{}, 3, 0), 5, ninf); }});
  // A key of weight 0 (bias -inf) whose value is inf: 0 * inf = NaN in that element.
  add({"bias_neg_inf_value_inf", 1, 8, true, false, -1, 0, "xxff", [ninf](GqaTensors& t) {
         BiasRow(t, Case{}, 0, 0)[3] = ninf;
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 0, 3)[5] = kInf;
       }});
  // A fully masked row reads no value: zero even with an inf value.
  add({"bias_row_neg_inf_value_inf", 1, 8, true, false, -1, 0, "0xff", [ninf](GqaTensors& t) {
         std::fill_n(BiasRow(t, Case{}, 0, 0), 9, ninf);
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 0, 3)[5] = kInf;
       }});
  // Head sink.
  add({"bias_row_neg_inf_sink", 1, 8, true, true, -1, 0, "0fff",
       [ninf](GqaTensors& t) { std::fill_n(BiasRow(t, Case{}, 0, 0), 9, ninf); }});
  add({"sink_pos_inf", 1, 8, false, true, -1, 0, "nfff",
       [](GqaTensors& t) { t[ATTNRT_GQA_INPUT_HEAD_SINK].f32()[0] = kInf; }});
  add({"sink_neg_inf", 1, 8, false, true, -1, 0, "ffff",
       [ninf](GqaTensors& t) { t[ATTNRT_GQA_INPUT_HEAD_SINK].f32()[1] = ninf; }});
  add({"sink_nan", 1, 8, false, true, -1, 0, "fffn",
       [](GqaTensors& t) { t[ATTNRT_GQA_INPUT_HEAD_SINK].f32()[3] = kNaN; }});
  add({"sink_nan_empty_window", 1, 8, false, true, 0, 0, "n000",
       [](GqaTensors& t) { t[ATTNRT_GQA_INPUT_HEAD_SINK].f32()[0] = kNaN; }});
  // Keys outside the window never take part, whatever they hold.
  add({"outside_window", 1, 8, false, false, 3, 0, "ffff", [](GqaTensors& t) {
         Case c;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 0, 1)[0] = kNaN;
         PastAt(t, ATTNRT_GQA_INPUT_PAST_VALUE, c, 1, 2)[0] = kInf;
       }});
  // A prompt: NaN in one query row, a fully masked row, and keys of later tokens (causal).
  add({"prompt_query_nan", 5, 0, false, false, -1, 0,
       "ffff"
       "ffff"
       "fnff"
       "ffff"
       "ffff",
       [](GqaTensors& t) { QueryAt(t, 2, 1)[7] = kNaN; }});
  add({"prompt_bias_row_neg_inf", 5, 0, true, false, -1, 0,
       "ffff"
       "ffff"
       "ffff"
       "0fff"
       "ffff",
       [ninf](GqaTensors& t) {
         Case c;
         c.S = 5;
         std::fill_n(BiasRow(t, c, 0, 3), 5, ninf);
       }});
  // A later token's inf value never reaches the rows before it.
  add({"prompt_later_value_inf", 5, 0, false, false, -1, 0,
       "ffff"
       "ffff"
       "ffff"
       "ffff"
       "xxff",
       [](GqaTensors& t) { NewAt(t, ATTNRT_GQA_INPUT_VALUE, 4, 0)[5] = kInf; }});
  add({"prompt_key_nan", 5, 0, false, false, -1, 0,
       "ffff"
       "ffff"
       "ffff"
       "ffnn"
       "ffnn",
       [](GqaTensors& t) { NewAt(t, ATTNRT_GQA_INPUT_KEY, 3, 1)[0] = kNaN; }});
  // Long decodes: several key blocks, and split-KV with 8 threads.
  for (int32_t threads : {1, 8}) {
    const std::string suffix = "_threads" + std::to_string(threads);
    add({"long_query_nan" + suffix, 1, 1500, false, false, -1, threads, "ffnf",
         [](GqaTensors& t) { QueryAt(t, 0, 2)[3] = kNaN; }});
    add({"long_key_nan" + suffix, 1, 1500, false, false, -1, threads, "nnff", [](GqaTensors& t) {
           Case c;
           c.P = 1500;
           PastAt(t, ATTNRT_GQA_INPUT_PAST_KEY, c, 0, 1100)[3] = kNaN;
         }});
    add({"long_bias_neg_inf_prefix" + suffix, 1, 1500, true, false, -1, threads, "f0ff",
         [ninf](GqaTensors& t) {
           Case c;
           c.P = 1500;
           std::fill_n(BiasRow(t, c, 0, 0), 1200, ninf);
           std::fill_n(BiasRow(t, c, 1, 0), 1501, ninf);
         }});
    add({"long_bias_pos_inf" + suffix, 1, 1500, true, false, -1, threads, "fffn",
         [](GqaTensors& t) {
           Case c;
           c.P = 1500;
           BiasRow(t, c, 3, 0)[700] = kInf;
         }});
  }
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// The CPU plugin's kernels of one op kind.
std::vector<std::string> CpuGqaKernels(int32_t op_kind = ATTNRT_OP_GQA) {
  std::vector<std::string> names;
  attnrt_runtime* raw = nullptr;
  if (attnrt_runtime_create(nullptr, &raw) != ATTNRT_OK) return names;
  RuntimePtr runtime(raw);
  for (const PluginInfo& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != ATTNRT_TEST_CPU_PLUGIN) continue;
    for (const KernelInfo& k : plugin.kernels) {
      if (k.op_kind == op_kind) names.push_back(k.name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool IsCpuFeatureReason(const std::string& reason) {
  for (const char* word : {"avx", "cpu", "isa", "fma", "f16c", "xcr0", "feature", "instruction"}) {
    if (ContainsI(reason, word)) return true;
  }
  return false;
}

char RowClass(const double* x, int64_t n) {
  bool all_nan = true, all_zero = true, all_finite = true;
  for (int64_t i = 0; i < n; ++i) {
    all_nan = all_nan && std::isnan(x[i]);
    all_zero = all_zero && x[i] == 0.0;
    all_finite = all_finite && std::isfinite(x[i]);
  }
  return all_nan ? 'n' : all_zero ? '0' : all_finite ? 'f' : 'x';
}

// One case's inputs (non-finite values in), contiguous outputs poisoned, and the reference.
struct Built {
  GqaTensors t;
  GqaRefOutputs ref;
};

void BuildCase(const Case& c, Built* built) {
  std::mt19937_64 rng(TestSeed());
  const int64_t T = TotalOf(c);
  const bool decode = c.S == 1;
  GqaTensors& t = built->t;
  t[ATTNRT_GQA_INPUT_QUERY] = F32({1, c.S, kN * kH});
  t[ATTNRT_GQA_INPUT_KEY] = F32({1, c.S, kNkv * kH});
  t[ATTNRT_GQA_INPUT_VALUE] = F32({1, c.S, kNkv * kH});
  for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    t[i].FillNormal(rng);
  }
  if (decode) {
    for (auto i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
      t[i] = F32({1, kNkv, c.P, kH});
      t[i].FillNormal(rng);
    }
  }
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32({static_cast<int32_t>(T - 1)}, {1});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});
  if (c.bias) {
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({1, kN, c.S, T});
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS].FillNormal(rng);
  }
  if (c.sink) {
    t[ATTNRT_GQA_INPUT_HEAD_SINK] = F32({kN});
    t[ATTNRT_GQA_INPUT_HEAD_SINK].FillNormal(rng);
  }
  c.poison(t);
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = F32({1, c.S, kN * kH});
  t[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(kNaN);
  t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = F32({1, kNkv, T, kH});
  t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = F32({1, kNkv, T, kH});

  GqaRefProblem p;
  p.sequence_length = c.S;
  p.kv_sequence_length = c.S;
  p.num_heads = kN;
  p.kv_num_heads = kNkv;
  p.head_size = kH;
  p.has_past = decode;
  p.past_length = decode ? c.P : 0;
  p.has_present = true;
  p.present_length = T;
  p.total_sequence_length = static_cast<int32_t>(T);
  p.seqlens_k = {static_cast<int32_t>(T - 1)};
  p.local_window_size = c.window;
  p.bias_batch = c.bias ? 1 : 0;
  p.bias_heads = c.bias ? kN : 0;
  p.has_head_sink = c.sink;
  GqaRefInputs in;
  auto ptr = [&t](attnrt_gqa_input i) -> const float* {
    return t[i].empty() ? nullptr : t[i].f32();
  };
  in.query = ptr(ATTNRT_GQA_INPUT_QUERY);
  in.key = ptr(ATTNRT_GQA_INPUT_KEY);
  in.value = ptr(ATTNRT_GQA_INPUT_VALUE);
  in.past_key = ptr(ATTNRT_GQA_INPUT_PAST_KEY);
  in.past_value = ptr(ATTNRT_GQA_INPUT_PAST_VALUE);
  in.attention_bias = ptr(ATTNRT_GQA_INPUT_ATTENTION_BIAS);
  in.head_sink = ptr(ATTNRT_GQA_INPUT_HEAD_SINK);
  built->ref = ComputeGqaReference(p, in);

  // The reference against the rule, row by row (this does not depend on the kernel).
  ASSERT_EQ(c.rows.size(), static_cast<size_t>(c.S * kN));
  for (int64_t row = 0; row < c.S * kN; ++row) {
    ASSERT_EQ(RowClass(built->ref.output.data() + row * kH, kH), c.rows[static_cast<size_t>(row)])
        << "reference row (s " << row / kN << ", head " << row % kN << ")";
  }
}

// NaN where the reference has NaN, the same infinity, or within 1e-5.
void ExpectOutput(const Case& c, const float* got, const GqaRefOutputs& ref) {
  int64_t bad = 0;
  for (int64_t i = 0; i < c.S * kN * kH; ++i) {
    const double w = ref.output[static_cast<size_t>(i)];
    const double g = got[i];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::fabs(g - w) <= 1e-5;
    if (!ok && bad++ < 4) {
      ADD_FAILURE() << "output (s " << i / (kN * kH) << ", head " << i / kH % kN << ", d " << i % kH
                    << "): got " << g << ", want " << w;
    }
  }
  EXPECT_EQ(bad, 0);
}

// A runtime with `pinned` as the only kernel that may run ("" = any) and the case's threads.
RuntimePtr PinnedRuntime(const std::string& pinned, const Case& c) {
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();
  options.disable = "";
  options.num_threads = c.threads;
  return CreateRuntime(options);
}

using Param = std::tuple<std::string, Case>;
class GqaNonFinite : public testing::TestWithParam<Param> {};

TEST_P(GqaNonFinite, FollowsTheRule) {
  const std::string& pinned = std::get<0>(GetParam());
  const Case& c = std::get<1>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", case " + c.name);
  CleanAttnrtEnv env;
  Built built;
  ASSERT_NO_FATAL_FAILURE(BuildCase(c, &built));
  GqaTensors& t = built.t;
  const int64_t T = TotalOf(c);

  RuntimePtr runtime = PinnedRuntime(pinned, c);
  ASSERT_TRUE(runtime);
  attnrt_gqa_attributes a = GqaAttributes(kN, kNkv);
  a.local_window_size = c.window;
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &a, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  if (!pinned.empty()) {
    const std::vector<Candidate> candidates = Explain(op.get(), t);
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& x) { return x.kernel == pinned; });
    ASSERT_NE(it, candidates.end()) << "explain does not list " << pinned;
    if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE ||
        (it->status == ATTNRT_CANDIDATE_DECLINED && IsCpuFeatureReason(it->reason))) {
      GTEST_SKIP() << pinned << " cannot run on this CPU: " << it->reason;
    }
    if (it->status == ATTNRT_CANDIDATE_DECLINED && pinned.find(".naive.") == std::string::npos) {
      GTEST_SKIP() << pinned << " declines this case: " << it->reason;
    }
  }
  PlanPtr plan = Plan(op.get(), t);
  ASSERT_TRUE(plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  SCOPED_TRACE("ran " + kernel);
  st = RunPlan(plan.get(), t);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  ExpectOutput(c, t[ATTNRT_GQA_OUTPUT_OUTPUT].f32(), built.ref);
  // Present rows are the inputs, non-finite values included, bit for bit.
  for (auto [o, past, fresh] :
       {std::tuple{ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_KEY},
        std::tuple{ATTNRT_GQA_OUTPUT_PRESENT_VALUE, ATTNRT_GQA_INPUT_PAST_VALUE,
                   ATTNRT_GQA_INPUT_VALUE}}) {
    const float* present = t[o].f32();
    for (int64_t kvh = 0; kvh < kNkv; ++kvh) {
      for (int64_t j = 0; j < T; ++j) {
        const float* src = j < T - c.S ? t[past].f32() + (kvh * c.P + j) * kH
                                       : t[fresh].f32() + ((j - (T - c.S)) * kNkv + kvh) * kH;
        EXPECT_EQ(std::memcmp(present + (kvh * T + j) * kH, src, kH * sizeof(float)), 0)
            << "present row " << j << " of kv head " << kvh;
      }
    }
  }
}

// ---- paged GQA: the same cases through the block pools ------------------------------------------
// Blocks of 16 tokens in reverse physical order, a spare block, BSNH pools whose rows no sequence
// uses are poisoned with NaN; the past rows copied in, the new ones appended by the op.
class PagedGqaNonFinite : public testing::TestWithParam<Param> {};

TEST_P(PagedGqaNonFinite, FollowsTheRule) {
  const std::string& pinned = std::get<0>(GetParam());
  const Case& c = std::get<1>(GetParam());
  if (pinned.empty() && CpuGqaKernels(ATTNRT_OP_PAGED_GQA).empty()) {
    GTEST_SKIP() << ATTNRT_TEST_CPU_PLUGIN << " registers no paged GQA kernel";
  }
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", case " + c.name);
  CleanAttnrtEnv env;
  Built built;
  ASSERT_NO_FATAL_FAILURE(BuildCase(c, &built));
  GqaTensors& t = built.t;
  const int64_t T = TotalOf(c);
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (T + kBlock - 1) / kBlock;
  const int64_t num_blocks = blocks + 1;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t k = 0; k < blocks; ++k)
    table[static_cast<size_t>(k)] = static_cast<int32_t>(blocks - k);

  std::vector<Tensor> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
  in[ATTNRT_PAGED_GQA_INPUT_QUERY] = t[ATTNRT_GQA_INPUT_QUERY];
  in[ATTNRT_PAGED_GQA_INPUT_KEY] = t[ATTNRT_GQA_INPUT_KEY];
  in[ATTNRT_PAGED_GQA_INPUT_VALUE] = t[ATTNRT_GQA_INPUT_VALUE];
  in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = t[ATTNRT_GQA_INPUT_SEQLENS_K];
  in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH];
  in[ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS] = t[ATTNRT_GQA_INPUT_ATTENTION_BIAS];
  in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = t[ATTNRT_GQA_INPUT_HEAD_SINK];
  in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(table, {1, blocks});
  for (auto [pool, past] :
       {std::pair{ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_GQA_INPUT_PAST_KEY},
        std::pair{ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, ATTNRT_GQA_INPUT_PAST_VALUE}}) {
    in[pool] = F32({num_blocks, kBlock, kNkv, kH});
    in[pool].Fill(kNaN);
    for (int64_t j = 0; j < T - c.S; ++j) {
      const int64_t row = table[static_cast<size_t>(j / kBlock)] * kBlock + j % kBlock;
      for (int64_t kvh = 0; kvh < kNkv; ++kvh) {
        std::memcpy(in[pool].f32() + (row * kNkv + kvh) * kH, t[past].f32() + (kvh * c.P + j) * kH,
                    kH * sizeof(float));
      }
    }
  }
  Tensor out = F32({1, c.S, kN * kH});
  out.Fill(kNaN);
  std::vector<const attnrt_tensor*> in_ptrs, out_ptrs = {out.get()};
  for (auto& x : in) in_ptrs.push_back(x.empty() ? nullptr : x.get());

  RuntimePtr runtime = PinnedRuntime(pinned, c);
  ASSERT_TRUE(runtime);
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kN, kNkv);
  a.gqa.local_window_size = c.window;
  a.block_size = kBlock;
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  attnrt_plan* raw_plan = nullptr;
  st = attnrt_op_plan(op.get(), in_ptrs.data(), in_ptrs.size(), out_ptrs.data(), 1, &raw_plan);
  if (st == ATTNRT_ERROR_UNSUPPORTED && !pinned.empty()) {
    const std::string reason = attnrt_last_error_message();
    if (IsCpuFeatureReason(reason) || pinned.find(".naive.") == std::string::npos) {
      GTEST_SKIP() << pinned << " declines this case: " << reason;
    }
  }
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  PlanPtr plan(raw_plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  SCOPED_TRACE("ran " + kernel);
  st = attnrt_plan_run(plan.get(), in_ptrs.data(), in_ptrs.size(), out_ptrs.data(), 1, nullptr, 0,
                       nullptr);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  ExpectOutput(c, out.f32(), built.ref);
}

// "" (the runtime's own choice) and every kernel of the op kind.
std::vector<std::string> KernelParams(int32_t op_kind) {
  std::vector<std::string> params = {""};
  for (auto& k : CpuGqaKernels(op_kind)) params.push_back(k);
  return params;
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaNonFinite,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_GQA)),
                                          testing::ValuesIn(Cases())),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaNonFinite,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_PAGED_GQA)),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaNonFinite);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedGqaNonFinite);

TEST(GqaNonFiniteSetup, CpuPluginRegistersItsGqaKernels) {
  const std::vector<std::string> kernels = CpuGqaKernels();
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"),
            kernels.end());
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), ATTNRT_TEST_CPU_PLUGIN ".gqa.flash.scalar"),
            kernels.end());
}

}  // namespace
}  // namespace attnrt_test
