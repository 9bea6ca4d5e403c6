// p_precision of the paged ops (attnrt/ops/paged_gqa.h, ABI 1.5; docs/gqa-semantics.md,
// "Probability precision"):
//  - validation: a value other than 0/1 is INVALID_ARGUMENT naming p_precision, the expected and
//    the actual value; attributes whose struct_size ends before the field (ABI 1.4) get EXACT;
//  - float32: INPUT gives the bits of EXACT;
//  - bfloat16 and float16, every paged and paged varlen kernel pinned in turn, decode and prefill
//    chunks, block sizes 16 and 128, BSNH and BNSH: the output is within a stated tolerance of a
//    float64 reference written from the definition (p = exp(s - m) rounded to T before P·V, l the
//    sum of the unrounded p), and within the documented bound of exact float64 attention; the
//    exact reference must fall outside the INPUT tolerance somewhere (bfloat16), so the check can
//    tell the modes apart.
// Scores are exact in float32 whatever the summation order (query and key elements on a grid of
// 1/2, scale 2), and key 0 of every sequence holds the largest score of every row, so a kernel's
// running maximum is the row maximum from the first key block on (the runtime has one thread: no
// split-KV). Outputs are poisoned with NaN before every call and every element is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/test_support.h"
#include "p_precision_types.h"

namespace attnrt_test {
namespace {

using namespace p_precision;

constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kGroup = kHeads / kKvHeads;
constexpr int64_t kHeadSize = 64;
constexpr float kScale = 2.0f;

// ---- a step: sequences, their full K/V and query rows ---------------------------------------

struct Sequence {
  int64_t q_len;  // new rows this step
  int64_t total;  // T_b
};

// Values on grids exact in every T and whose dot products are exact in float32: query elements in
// {0, 0.5, 1}; key 0 of a sequence all 0.5, the other keys in {0, 0.5} (mostly 0.5), so key 0
// holds every row's largest score and a few keys come close to it; values multiples of 1/64.
struct Data {
  std::vector<Sequence> seqs;
  std::vector<std::vector<double>> k, v;  // per sequence [total][Nkv][H]
  std::vector<std::vector<double>> q;     // per sequence [q_len][N][H]

  Data(std::vector<Sequence> s, std::mt19937_64& rng) : seqs(std::move(s)) {
    std::uniform_int_distribution<int> q_pick(0, 2);
    std::bernoulli_distribution k_on(0.85);
    std::uniform_int_distribution<int> v_pick(-127, 127);
    for (const Sequence& sq : seqs) {
      std::vector<double> kk(static_cast<size_t>(sq.total * kKvHeads * kHeadSize));
      std::vector<double> vv(kk.size());
      for (size_t i = 0; i < kk.size(); ++i) {
        const bool key0 = static_cast<int64_t>(i) < kKvHeads * kHeadSize;
        kk[i] = key0 || k_on(rng) ? 0.5 : 0.0;
        vv[i] = v_pick(rng) / 64.0;
      }
      std::vector<double> qq(static_cast<size_t>(sq.q_len * kHeads * kHeadSize));
      for (double& x : qq) x = q_pick(rng) * 0.5;
      k.push_back(std::move(kk));
      v.push_back(std::move(vv));
      q.push_back(std::move(qq));
    }
  }
};

// Float64 references of one output row (sequence b, query row i, head n): INPUT's definition
// (p rounded to T, l unrounded), exact attention, and the tolerances.
struct RowRef {
  double input[kHeadSize], exact[kHeadSize];
  double input_tol[kHeadSize], bound[kHeadSize];
};

RowRef Reference(const Data& d, const Type& t, int64_t b, int64_t i, int64_t n) {
  const Sequence& sq = d.seqs[b];
  const int64_t kvh = n / kGroup;
  const int64_t keys = sq.total - sq.q_len + i + 1;  // causal
  const double* q = &d.q[b][(i * kHeads + n) * kHeadSize];
  std::vector<double> s(static_cast<size_t>(keys));
  for (int64_t j = 0; j < keys; ++j) {
    double dot = 0;
    for (int64_t e = 0; e < kHeadSize; ++e)
      dot += q[e] * d.k[b][(j * kKvHeads + kvh) * kHeadSize + e];
    s[j] = kScale * dot;
  }
  const double m = *std::max_element(s.begin(), s.end());
  EXPECT_EQ(m, s[0]) << "key 0 must hold the row maximum";
  std::vector<double> p(s.size()), pr(s.size());
  double l = 0;
  for (int64_t j = 0; j < keys; ++j) {
    p[j] = std::exp(s[j] - m);
    pr[j] = RoundTo(t, p[j]);
    l += p[j];
  }
  const double u = std::ldexp(1.0, -t.bits);  // unit roundoff of T
  const double eta = t.min_exp == -14 ? 0x1p-25 : 0.0;
  RowRef r{};
  for (int64_t e = 0; e < kHeadSize; ++e) {
    double in = 0, ex = 0, mag = 0, amb = 0, vmax = 0;
    for (int64_t j = 0; j < keys; ++j) {
      const double vj = d.v[b][(j * kKvHeads + kvh) * kHeadSize + e];
      in += pr[j] * vj;
      ex += p[j] * vj;
      mag += pr[j] * std::fabs(vj);
      vmax = std::max(vmax, std::fabs(vj));
      if (NearMidpoint(t, p[j])) amb += Step(t, p[j]) * std::fabs(vj);
    }
    r.input[e] = in / l;
    r.exact[e] = ex / l;
    // float32 accumulation and normalization (kernel vs the definition), the output's rounding to
    // T, and the p whose rounding a float32 exp may flip.
    const double f32 = 0x1p-16 * mag / l;
    r.input_tol[e] = f32 + amb / l + 0.5 * Step(t, std::fabs(r.input[e]) + f32 + amb / l);
    // docs/gqa-semantics.md: |INPUT - exact| <= 2 u_T max|v| + n (2^-24 + eta_T) max|v|.
    r.bound[e] = (2 * u + static_cast<double>(keys) * (0x1p-24 + eta)) * vmax;
  }
  return r;
}

// ---- pools and calls ------------------------------------------------------------------------

struct Pools {
  int64_t block_size, slots, num_blocks;
  bool bnsh;
  std::vector<int32_t> table;  // [B, slots]
  std::vector<unsigned char> key, value;

  Pools(const Data& d, const Type& t, int64_t bs, bool bnsh_layout, std::mt19937_64& rng)
      : block_size(bs), bnsh(bnsh_layout) {
    const int64_t B = static_cast<int64_t>(d.seqs.size());
    int64_t longest = 0;
    for (const Sequence& s : d.seqs) longest = std::max(longest, s.total);
    slots = (longest + bs - 1) / bs;
    num_blocks = B * slots + 2;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(ids.begin(), ids.begin() + B * slots);
    const size_t elements = static_cast<size_t>(num_blocks * bs * kKvHeads * kHeadSize);
    key.assign(elements * Bytes(t), 0);
    value.assign(elements * Bytes(t), 0);
    // The past rows (before this step's new ones) are in the cache already.
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < d.seqs[b].total - d.seqs[b].q_len; ++j) {
        for (int64_t h = 0; h < kKvHeads; ++h) {
          for (int64_t e = 0; e < kHeadSize; ++e) {
            const size_t at = Row(b, j, h) * kHeadSize + e;
            Store(t, d.k[b][(j * kKvHeads + h) * kHeadSize + e], &key[at * Bytes(t)]);
            Store(t, d.v[b][(j * kKvHeads + h) * kHeadSize + e], &value[at * Bytes(t)]);
          }
        }
      }
    }
  }
  size_t Row(int64_t b, int64_t j, int64_t h) const {
    const int64_t x = table[b * slots + j / block_size];
    const int64_t o = j % block_size;
    return static_cast<size_t>(bnsh ? (x * kKvHeads + h) * block_size + o
                                    : (x * block_size + o) * kKvHeads + h);
  }
  std::vector<int64_t> Shape() const {
    return bnsh ? std::vector<int64_t>{num_blocks, kKvHeads, block_size, kHeadSize}
                : std::vector<int64_t>{num_blocks, block_size, kKvHeads, kHeadSize};
  }
};

attnrt_tensor Desc(void* data, attnrt_dtype dtype, const std::vector<int64_t>& shape) {
  attnrt_tensor t{};
  t.data = data;
  t.device = {ATTNRT_DEVICE_CPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = const_cast<int64_t*>(shape.data());
  return t;
}

attnrt_paged_gqa_attributes Attributes(int64_t block_size, bool bnsh, int32_t p_precision) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kHeads, kKvHeads);
  a.gqa.scale = kScale;
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = bnsh ? ATTNRT_PAGED_KV_LAYOUT_BNSH : ATTNRT_PAGED_KV_LAYOUT_BSNH;
  a.p_precision = p_precision;
  return a;
}

// Runs one step with a fresh copy of the pools; the output rows in query order (sequence by
// sequence), as doubles. `varlen`: the packed op; else the padded paged op (all q_len equal).
// Returns false (with *why) when the pinned kernel does not serve the problem.
// `struct_size`, when not 0, is the attributes' struct_size (an older caller's). With `explained`
// the op is explained instead of run: each candidate's "kernel: reason".
bool RunStep(attnrt_runtime* runtime, bool varlen, const Data& d, const Type& t,
             const Pools& pools0, int32_t p_precision, std::vector<double>* out,
             std::string* kernel, std::string* why, size_t struct_size = 0,
             std::vector<std::string>* explained = nullptr) {
  Pools pools = pools0;
  const int64_t B = static_cast<int64_t>(d.seqs.size());
  int64_t rows = 0;
  for (const Sequence& s : d.seqs) rows += s.q_len;
  const size_t eb = Bytes(t);
  std::vector<unsigned char> query(static_cast<size_t>(rows * kHeads * kHeadSize) * eb);
  std::vector<unsigned char> key(static_cast<size_t>(rows * kKvHeads * kHeadSize) * eb);
  std::vector<unsigned char> value(key.size());
  std::vector<int32_t> qsl{0}, seq_lens, seqlens_k;
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b) {
    const Sequence& s = d.seqs[b];
    for (int64_t i = 0; i < s.q_len; ++i, ++row) {
      for (int64_t x = 0; x < kHeads * kHeadSize; ++x) {
        Store(t, d.q[b][i * kHeads * kHeadSize + x], &query[(row * kHeads * kHeadSize + x) * eb]);
      }
      const int64_t j = s.total - s.q_len + i;
      for (int64_t x = 0; x < kKvHeads * kHeadSize; ++x) {
        Store(t, d.k[b][j * kKvHeads * kHeadSize + x], &key[(row * kKvHeads * kHeadSize + x) * eb]);
        Store(t, d.v[b][j * kKvHeads * kHeadSize + x],
              &value[(row * kKvHeads * kHeadSize + x) * eb]);
      }
    }
    qsl.push_back(static_cast<int32_t>(row));
    seq_lens.push_back(static_cast<int32_t>(s.total));
    seqlens_k.push_back(static_cast<int32_t>(s.total - 1));
  }
  // Poisoned with NaN.
  std::vector<unsigned char> output(static_cast<size_t>(rows * kHeads * kHeadSize) * eb);
  for (size_t x = 0; x < output.size() / eb; ++x) Store(t, NAN, &output[x * eb]);
  attnrt_paged_gqa_attributes a = Attributes(pools.block_size, pools.bnsh, p_precision);
  if (struct_size != 0) a.struct_size = struct_size;
  const std::vector<int64_t> pool_shape = pools.Shape();
  attnrt_tensor key_cache = Desc(pools.key.data(), t.dtype, pool_shape);
  attnrt_tensor value_cache = Desc(pools.value.data(), t.dtype, pool_shape);
  const std::vector<int64_t> table_shape{B, pools.slots};
  attnrt_tensor table = Desc(pools.table.data(), kI32, table_shape);
  const int64_t S = d.seqs[0].q_len;
  const std::vector<int64_t> q_shape = varlen ? std::vector<int64_t>{rows, kHeads * kHeadSize}
                                              : std::vector<int64_t>{B, S, kHeads * kHeadSize};
  const std::vector<int64_t> kv_shape = varlen ? std::vector<int64_t>{rows, kKvHeads * kHeadSize}
                                               : std::vector<int64_t>{B, S, kKvHeads * kHeadSize};
  attnrt_tensor tq = Desc(query.data(), t.dtype, q_shape);
  attnrt_tensor tk = Desc(key.data(), t.dtype, kv_shape);
  attnrt_tensor tv = Desc(value.data(), t.dtype, kv_shape);
  attnrt_tensor to = Desc(output.data(), t.dtype, q_shape);
  const std::vector<int64_t> b_shape{B}, b1_shape{B + 1}, one{1};
  std::vector<int32_t> total{*std::max_element(seq_lens.begin(), seq_lens.end())};
  attnrt_tensor t_qsl = Desc(qsl.data(), kI32, b1_shape);
  attnrt_tensor t_lens = Desc(seq_lens.data(), kI32, b_shape);
  attnrt_tensor t_seqlens_k = Desc(seqlens_k.data(), kI32, b_shape);
  attnrt_tensor t_total = Desc(total.data(), kI32, one);
  std::vector<const attnrt_tensor*> in;
  if (varlen) {
    in.assign(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = &tq;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = &tk;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = &tv;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = &key_cache;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = &value_cache;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = &t_qsl;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = &t_lens;
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = &table;
  } else {
    in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = &tq;
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = &tk;
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = &tv;
    in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = &key_cache;
    in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = &value_cache;
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = &t_seqlens_k;
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &t_total;
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = &table;
  }
  attnrt_op* op = nullptr;
  attnrt_status s =
      attnrt_op_create(runtime, varlen ? ATTNRT_OP_PAGED_GQA_VARLEN : ATTNRT_OP_PAGED_GQA, &a, &op);
  EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
  if (s != ATTNRT_OK) return false;
  OpPtr op_holder(op);
  const attnrt_tensor* outs[] = {&to};
  if (explained != nullptr) {
    for (const Candidate& c : Explain(op, in.data(), in.size(), outs, 1)) {
      explained->push_back(c.kernel + ": " + c.reason);
    }
    return true;
  }
  attnrt_plan* plan = nullptr;
  s = attnrt_op_plan(op, in.data(), in.size(), outs, 1, &plan);
  if (s != ATTNRT_OK) {
    *why = LastError(s);
    return false;
  }
  PlanPtr plan_holder(plan);
  *kernel = PlanKernel(plan);
  s = attnrt_plan_run(plan, in.data(), in.size(), outs, 1, nullptr, 0, nullptr);
  EXPECT_EQ(s, ATTNRT_OK) << LastError(s);
  out->resize(output.size() / eb);
  for (size_t x = 0; x < out->size(); ++x) (*out)[x] = Load(t, &output[x * eb]);
  return s == ATTNRT_OK;
}

std::vector<std::string> Kernels(int32_t op_kind) {
  RuntimePtr runtime = CreateRuntime();
  std::vector<std::string> names;
  if (!runtime) return names;
  for (const PluginInfo& plugin : ListPlugins(runtime.get())) {
    for (const KernelInfo& k : plugin.kernels) {
      if (k.op_kind == op_kind && k.device_type == ATTNRT_DEVICE_CPU) names.push_back(k.name);
    }
  }
  return names;
}

// Decodes (q_len 1) and prefill chunks (q_len 5 or 7 after a past, or a first prompt), for the
// padded op in separate calls (equal q_len); for the varlen op mixed in one call.
std::vector<std::vector<Sequence>> Steps(bool varlen) {
  if (varlen) return {{{1, 170}, {5, 140}, {1, 33}}, {{7, 7}, {1, 260}}};
  // A prompt chunk after a past is one sequence per call (GroupQueryAttention's rule).
  return {{{1, 170}, {1, 33}}, {{5, 140}}, {{5, 261}}};
}

// ---- validation -----------------------------------------------------------------------------

TEST(PagedPPrecision, BadValueIsRefusedByName) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  for (int32_t op_kind : {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN}) {
    for (int32_t bad : {2, -1, 7}) {
      attnrt_paged_gqa_attributes a = Attributes(16, false, bad);
      attnrt_op* op = nullptr;
      const attnrt_status s = attnrt_op_create(runtime.get(), op_kind, &a, &op);
      EXPECT_EQ(s, ATTNRT_ERROR_INVALID_ARGUMENT);
      const std::string message = attnrt_last_error_message();
      EXPECT_NE(message.find("p_precision"), std::string::npos) << message;
      EXPECT_NE(message.find("0 (EXACT) or 1 (INPUT)"), std::string::npos) << message;
      EXPECT_NE(message.find("got " + std::to_string(bad)), std::string::npos) << message;
      if (op != nullptr) attnrt_op_destroy(op);
    }
  }
}

TEST(PagedPPrecision, AttributesOfAbi14GetExact) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  // A caller built against ABI 1.4 knows the struct up to kv_layout; what lies beyond is not its.
  attnrt_paged_gqa_attributes a = Attributes(16, false, /*garbage*/ 12345);
  a.struct_size = offsetof(attnrt_paged_gqa_attributes, p_precision);
  attnrt_op* op = nullptr;
  attnrt_status s = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op);
  ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
  attnrt_op_destroy(op);
  a.struct_size = offsetof(attnrt_paged_gqa_attributes, kv_layout);
  s = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op);
  EXPECT_EQ(s, ATTNRT_ERROR_ABI_MISMATCH) << LastError(s);
  // The old caller's run is EXACT (bfloat16, where the modes differ), whatever lies beyond its
  // struct: here INPUT.
  attnrt_runtime_options options = DefaultOptions();
  options.num_threads = 1;
  RuntimePtr one = CreateRuntime(options);
  ASSERT_TRUE(one);
  std::mt19937_64 rng(TestSeed());
  SCOPED_TRACE(SeedTrace());
  const Data d({{1, 170}, {1, 33}}, rng);
  const Pools pools(d, kTypeBf16, 16, false, rng);
  std::vector<double> exact, input, old;
  std::string kernel, why;
  for (bool varlen : {false, true}) {
    ASSERT_TRUE(RunStep(one.get(), varlen, d, kTypeBf16, pools, ATTNRT_P_PRECISION_EXACT, &exact,
                        &kernel, &why))
        << why;
    ASSERT_TRUE(RunStep(one.get(), varlen, d, kTypeBf16, pools, ATTNRT_P_PRECISION_INPUT, &input,
                        &kernel, &why))
        << why;
    ASSERT_TRUE(RunStep(one.get(), varlen, d, kTypeBf16, pools, ATTNRT_P_PRECISION_INPUT, &old,
                        &kernel, &why, offsetof(attnrt_paged_gqa_attributes, p_precision)))
        << why;
    EXPECT_EQ(old, exact) << kernel;
    EXPECT_NE(input, exact) << kernel << ": EXACT and INPUT gave the same bfloat16 outputs";
  }
}

// A plugin built for ABI 1.4 does not see p_precision: its paged and varlen kernels are offered
// EXACT problems only (the varlen one in the ABI 1.4 layout:
// tests/core/paged_varlen_abi14_test.cpp).
TEST(PagedPPrecision, OlderPluginsAreNotOfferedWhatTheyCannotRead) {
  CleanAttnrtEnv env;
  const char* paths[] = {ATTNRT_TEST_PLUGINS_ABI14};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  std::mt19937_64 rng(TestSeed());
  const Data d({{1, 40}}, rng);
  const Pools pools(d, kTypeBf16, 16, false, rng);
  std::vector<double> unused;
  std::string kernel, why;
  auto explain = [&](bool varlen, int32_t mode) {
    std::vector<std::string> explained;
    EXPECT_TRUE(RunStep(runtime.get(), varlen, d, kTypeBf16, pools, mode, &unused, &kernel, &why, 0,
                        &explained));
    EXPECT_EQ(explained.size(), 1u);
    return explained.empty() ? std::string() : explained[0];
  };
  const std::string exact = explain(false, ATTNRT_P_PRECISION_EXACT);
  EXPECT_NE(exact.find("test fixture kernel never runs"), std::string::npos) << exact;
  const std::string input = explain(false, ATTNRT_P_PRECISION_INPUT);
  EXPECT_NE(input.find("was built for ABI 1.4, and p_precision INPUT needs ABI 1.5"),
            std::string::npos)
      << input;
  // The fixture's varlen kernel is offered the EXACT problem and declines it itself (it runs
  // float32 only, the problem is bfloat16).
  const std::string varlen_exact = explain(true, ATTNRT_P_PRECISION_EXACT);
  EXPECT_NE(varlen_exact.find("the fixture runs float32 only"), std::string::npos) << varlen_exact;
  const std::string varlen_input = explain(true, ATTNRT_P_PRECISION_INPUT);
  EXPECT_NE(varlen_input.find("was built for ABI 1.4, and p_precision INPUT needs ABI 1.5"),
            std::string::npos)
      << varlen_input;
}

// ---- kernels --------------------------------------------------------------------------------

struct Param {
  bool varlen;
  std::string kernel;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.kernel; }

class PPrecisionKernels : public ::testing::TestWithParam<Param> {};

TEST_P(PPrecisionKernels, Float32InputIsExactBitForBit) {
  const Param& param = GetParam();
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = param.kernel.c_str();
  options.num_threads = 2;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  int ran = 0;
  std::string why;
  for (int64_t bs : {16, 128}) {
    for (bool bnsh : {false, true}) {
      for (const auto& step : Steps(param.varlen)) {
        std::mt19937_64 rng(TestSeed());
        SCOPED_TRACE(SeedTrace() + " block_size " + std::to_string(bs) +
                     (bnsh ? " BNSH" : " BSNH"));
        const Data d(step, rng);
        const Pools pools(d, kTypeF32, bs, bnsh, rng);
        std::vector<double> exact, input;
        std::string kernel;
        if (!RunStep(runtime.get(), param.varlen, d, kTypeF32, pools, ATTNRT_P_PRECISION_EXACT,
                     &exact, &kernel, &why)) {
          continue;
        }
        ASSERT_TRUE(RunStep(runtime.get(), param.varlen, d, kTypeF32, pools,
                            ATTNRT_P_PRECISION_INPUT, &input, &kernel, &why))
            << why;
        ASSERT_EQ(exact.size(), input.size());
        for (size_t x = 0; x < exact.size(); ++x) {
          ASSERT_FALSE(std::isnan(input[x])) << "element " << x << " not written";
          ASSERT_EQ(std::memcmp(&exact[x], &input[x], sizeof(double)), 0) << "element " << x;
        }
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << param.kernel << " serves none of these problems here: " << why;
}

TEST_P(PPrecisionKernels, Float16TypesMatchTheInputDefinition) {
  const Param& param = GetParam();
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = param.kernel.c_str();
  options.num_threads = 1;  // no split-KV: the running maximum is the row maximum (key 0)
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  int ran = 0;
  std::string why;
  for (const Type& t : {kTypeBf16, kTypeF16}) {
    double worst_input = 0, worst_bound_ratio = 0;
    bool modes_apart = false;
    for (int64_t bs : {16, 128}) {
      for (bool bnsh : {false, true}) {
        for (const auto& step : Steps(param.varlen)) {
          std::mt19937_64 rng(TestSeed());
          SCOPED_TRACE(SeedTrace() + " " + t.name + " block_size " + std::to_string(bs) +
                       (bnsh ? " BNSH" : " BSNH"));
          const Data d(step, rng);
          const Pools pools(d, t, bs, bnsh, rng);
          std::vector<double> out;
          std::string kernel;
          if (!RunStep(runtime.get(), param.varlen, d, t, pools, ATTNRT_P_PRECISION_INPUT, &out,
                       &kernel, &why)) {
            continue;
          }
          ++ran;
          int64_t row = 0;
          for (size_t b = 0; b < d.seqs.size(); ++b) {
            for (int64_t i = 0; i < d.seqs[b].q_len; ++i, ++row) {
              for (int64_t n = 0; n < kHeads; ++n) {
                const RowRef ref = Reference(d, t, static_cast<int64_t>(b), i, n);
                for (int64_t e = 0; e < kHeadSize; ++e) {
                  const double got = out[(row * kHeads + n) * kHeadSize + e];
                  ASSERT_FALSE(std::isnan(got)) << "row " << row << " head " << n << " not written";
                  const double err = std::fabs(got - ref.input[e]);
                  ASSERT_LE(err, ref.input_tol[e])
                      << kernel << " row " << row << " head " << n << " element " << e
                      << ": INPUT reference " << ref.input[e] << ", got " << got;
                  const double vs_exact = std::fabs(got - ref.exact[e]);
                  ASSERT_LE(vs_exact, ref.bound[e])
                      << kernel << " row " << row << " head " << n << " element " << e
                      << ": exact attention " << ref.exact[e] << ", got " << got;
                  worst_input = std::max(worst_input, err);
                  worst_bound_ratio = std::max(worst_bound_ratio, vs_exact / ref.bound[e]);
                  if (vs_exact > ref.input_tol[e]) modes_apart = true;
                }
              }
            }
          }
        }
      }
    }
    if (ran > 0) {
      std::printf("%s %s: max |out - INPUT reference| %.3g, max |out - exact| / bound %.3f\n",
                  param.kernel.c_str(), t.name, worst_input, worst_bound_ratio);
    }
    if (t.bits == 8 && ran > 0) {
      EXPECT_TRUE(modes_apart) << "the exact float64 attention lies within the INPUT tolerance "
                                  "everywhere: this check cannot tell INPUT from EXACT";
    }
  }
  if (ran == 0) GTEST_SKIP() << param.kernel << " serves none of these problems here: " << why;
}

std::vector<Param> AllKernels() {
  std::vector<Param> params;
  for (const std::string& k : Kernels(ATTNRT_OP_PAGED_GQA)) params.push_back({false, k});
  for (const std::string& k : Kernels(ATTNRT_OP_PAGED_GQA_VARLEN)) params.push_back({true, k});
  return params;
}

INSTANTIATE_TEST_SUITE_P(All, PPrecisionKernels, ::testing::ValuesIn(AllKernels()),
                         [](const ::testing::TestParamInfo<Param>& param_info) {
                           std::string name = param_info.param.kernel;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PPrecisionKernels);

}  // namespace
}  // namespace attnrt_test
