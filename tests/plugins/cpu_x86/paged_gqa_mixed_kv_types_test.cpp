// Paged GroupQueryAttention with independent key and value cache types (ABI 1.9;
// attnrt/ops/paged_gqa.h, "Value cache type (v_cache_bit_width)"), as llama.cpp's -ctk/-ctv make:
// both paged ops (ATTNRT_OP_PAGED_GQA and ATTNRT_OP_PAGED_GQA_VARLEN) on every kernel the plugins
// register for them (pinned: a kernel that does not serve two types must decline with a reason,
// and its pinned plan fail with ATTNRT_ERROR_UNSUPPORTED) and on the runtime's own choice, against
// a float64 reference written from the headers (paged_gqa_mixed_kv_types_support.h).
//
// Types (T; key_cache; value_cache): (f16; f16; Q4_0), (f32; Q4_0; f16), (f32; Q8_0; Q4_0),
// (f16; f16; f32), (bf16; bf16; f16), (f32; Q4_0; Q8_0), (f32; f32; bf16), and (f32; Q8_0; Q8_0)
// with v_cache_bit_width 8 as the control of equal independent types. Each with kv_layout BSNH and
// BNSH and, in the padded op, a right-padded first prompt of 2 sequences, a chunked prompt after
// 18 cached tokens, a decode of 3 sequences, a decode with key/value of kv_sequence_length 0 (the
// pools hold every row) and a packed-QKV decode; in the varlen op one call packing decodes, a
// first prefill, a chunk after a past and a one-token prefill plus two rows of engine padding, with
// new rows (and slot_mapping) or with key/value absent. Head sizes (H, Hv) rotate over (64, 64),
// (128, 128), (128, 64) and (64, 128), block sizes over 16, 1 and 5, (N, Nkv) over (4, 2), (6, 2)
// and (4, 1).
//
// Method: query (times 3, so that the softmax is peaked: checked, the mean total variation
// distance from uniform weights is at least 0.3), key and value are N(0,1) values of T; a T =
// float32 value row headed for a float16/bfloat16 cache starts with exact rounding ties. Past rows
// are written into the pools by the test's own codecs; every other row is poisoned (NaN, or NaN
// block scales); the output is NaN before each run. After each run: every output element within
// the bound of AttendRow (float32 arithmetic from the element values the pools hold, plus one
// rounding to T), rows never written (engine padding) still NaN, and both pools byte for byte: each
// new key row as T itself or the test's Q8_0/Q4_0 quantizer writes it, each new value row rounded
// to the value cache's float type to nearest even or quantized, every other byte unchanged.
// A negative control shows the comparison fails when the value cache is read as the key cache's
// type. Seeds: ATTNRT_TEST_SEED reproduces a run (printed with each case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace mixed_kv {
namespace {

constexpr int64_t kTies = 4;  // rounding ties at the start of each float16/bfloat16 value row

struct HeadSizes {
  int64_t H, Hv;
};
constexpr HeadSizes kHeadSizes[] = {{64, 64}, {128, 128}, {128, 64}, {64, 128}};
constexpr int64_t kBlockSizes[] = {16, 1, 5};
constexpr std::pair<int64_t, int64_t> kHeads[] = {{4, 2}, {6, 2}, {4, 1}};

std::string Sanitized(std::string name) {
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// ---- the padded paged op
// ------------------------------------------------------------------------
enum class Phase { kFirstPrompt, kChunkedPrompt, kDecode, kDecodeCached, kPackedDecode };
constexpr int kPhases = 5;

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kFirstPrompt:
      return "first_prompt";
    case Phase::kChunkedPrompt:
      return "chunked_prompt";
    case Phase::kDecode:
      return "decode";
    case Phase::kDecodeCached:
      return "decode_kv_absent";
    case Phase::kPackedDecode:
      break;
  }
  return "packed_qkv_decode";
}

struct Case {
  std::string name;
  Types types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Phase phase = Phase::kDecode;
  int64_t H = 64, Hv = 64, block_size = 16, N = 4, Nkv = 2;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case MakeCase(const Types& types, int32_t layout, Phase phase, size_t index) {
  Case c;
  c.types = types;
  c.layout = layout;
  c.phase = phase;
  const HeadSizes hs = kHeadSizes[(static_cast<size_t>(phase) + index / kPhases) % 4];
  c.H = hs.H;
  c.Hv = phase == Phase::kPackedDecode ? hs.H : hs.Hv;  // packed QKV needs Hv == H
  c.block_size = kBlockSizes[index % 3];
  c.N = kHeads[index / 3 % 3].first;
  c.Nkv = kHeads[index / 3 % 3].second;
  c.name = types.name + "_" + (layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh") + "_" +
           PhaseName(phase) + "_h" + std::to_string(c.H) + "_hv" + std::to_string(c.Hv) + "_bs" +
           std::to_string(c.block_size) + "_n" + std::to_string(c.N) + "_nkv" +
           std::to_string(c.Nkv);
  return c;
}

std::vector<Case> PaddedCases() {
  std::vector<Case> v;
  size_t index = 0;
  for (const Types& types : AllTypes()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (int phase = 0; phase < kPhases; ++phase) {
        v.push_back(MakeCase(types, layout, static_cast<Phase>(phase), index++));
      }
    }
  }
  return v;
}

// One padded call: its tensors, the pools before and after, and the T values of q, k, v.
struct Padded {
  Case c;
  int64_t B = 1, S = 1, T = 1, L = 1;
  std::vector<int32_t> seqlens;  // T_b - 1
  bool first_prompt = false;
  Paging paging;
  Pool pool[2];
  std::vector<float> q;  // (B, S, N, H)
  std::vector<Tensor> in;
  Tensor output;
  attnrt_paged_gqa_attributes attributes{};

  int64_t Tb(int64_t b) const { return seqlens[static_cast<size_t>(b)] + 1; }
  // The first token of this step's query rows of sequence b.
  int64_t Offset(int64_t b) const { return first_prompt ? 0 : Tb(b) - S; }
};

void BuildPadded(Padded& s, const Case& c, std::mt19937_64& rng) {
  s.c = c;
  const FloatFormat t = c.types.t;
  switch (c.phase) {
    case Phase::kFirstPrompt:  // right-padded: T_b 11 and 7
      s.B = 2;
      s.S = 11;
      s.seqlens = {10, 6};
      break;
    case Phase::kChunkedPrompt:  // 5 new tokens after 18
      s.B = 1;
      s.S = 5;
      s.seqlens = {22};
      break;
    case Phase::kDecode:
      s.B = 3;
      s.seqlens = {32, 15, 6};
      break;
    case Phase::kDecodeCached:
      s.B = 2;
      s.seqlens = {24, 11};
      break;
    case Phase::kPackedDecode:
      s.B = 2;
      s.seqlens = {17, 4};
      break;
  }
  s.T = *std::max_element(s.seqlens.begin(), s.seqlens.end()) + 1;
  s.first_prompt = s.S == s.T;
  s.L = c.phase == Phase::kDecodeCached ? 0 : s.S;
  const int64_t B = s.B, S = s.S, N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv;
  std::vector<int64_t> lengths;
  for (int32_t x : s.seqlens) lengths.push_back(x + 1);
  s.paging = MakePaging(c.layout, Nkv, c.block_size, lengths, s.T, rng);
  s.pool[0] = Pool{"key_cache", c.types.k, H, {}, {}};
  s.pool[1] = Pool{"value_cache", c.types.v, Hv, {}, {}};
  for (Pool& pool : s.pool) PoisonPool(pool, s.paging, rng);
  // Past rows: random values of T in the pools' types.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t past = s.L == 0 ? s.Tb(b) : s.Offset(b);
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < past; ++j) {
        const std::vector<float> k = block_quant::RoundedNormal(t, H, rng);
        const std::vector<float> v = ValueRow(t, c.types.v, Hv, kTies, rng);
        EncodeRow(c.types.k, k.data(), H, s.pool[0].RowIn(s.pool[0].before, s.paging, b, h, j));
        EncodeRow(c.types.v, v.data(), Hv, s.pool[1].RowIn(s.pool[1].before, s.paging, b, h, j));
      }
    }
  }
  for (Pool& pool : s.pool) pool.after = pool.before;
  // This step's rows: query x3 (a peaked softmax), key, value.
  s.q = block_quant::RoundedNormal(t, B * S * N * H, rng);
  for (float& x : s.q) x = RoundToFormat(t, 3.0f * x);
  std::vector<float> k, v;
  for (int64_t r = 0; r < B * s.L * Nkv; ++r) {
    const std::vector<float> kr = block_quant::RoundedNormal(t, H, rng);
    const std::vector<float> vr = ValueRow(t, c.types.v, Hv, kTies, rng);
    k.insert(k.end(), kr.begin(), kr.end());
    v.insert(v.end(), vr.begin(), vr.end());
  }
  // New rows go to their tokens' rows (a first prompt's right padding is not stored).
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < s.L && s.Offset(b) + i < s.Tb(b); ++i) {
      for (int64_t h = 0; h < Nkv; ++h) {
        const int64_t j = s.Offset(b) + i, r = (b * s.L + i) * Nkv + h;
        EncodeRow(c.types.k, k.data() + r * H, H,
                  s.pool[0].RowIn(s.pool[0].after, s.paging, b, h, j));
        EncodeRow(c.types.v, v.data() + r * Hv, Hv,
                  s.pool[1].RowIn(s.pool[1].after, s.paging, b, h, j));
      }
    }
  }

  const attnrt_dtype dq = block_quant::QueryDtype(t);
  s.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
  if (c.phase == Phase::kPackedDecode) {
    // query (B, S, (N + 2 Nkv) H): the query heads, then the key heads, then the value heads.
    std::vector<float> packed;
    for (int64_t r = 0; r < B * S; ++r) {
      packed.insert(packed.end(), s.q.begin() + r * N * H, s.q.begin() + (r + 1) * N * H);
      packed.insert(packed.end(), k.begin() + r * Nkv * H, k.begin() + (r + 1) * Nkv * H);
      packed.insert(packed.end(), v.begin() + r * Nkv * Hv, v.begin() + (r + 1) * Nkv * Hv);
    }
    s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, (N + 2 * Nkv) * H});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, packed);
  } else {
    s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
    s.in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, s.L, Nkv * H});
    s.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, s.L, Nkv * Hv});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, s.q);
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_KEY], t, k);
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_VALUE], t, v);
  }
  s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = s.pool[0].MakeTensor(s.paging);
  s.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = s.pool[1].MakeTensor(s.paging);
  s.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(s.seqlens, {B});
  s.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.T)}, {1});
  s.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.paging.table, {B, s.paging.slots});
  s.output = block_quant::Filled(t, {B, S, N * Hv}, kNaN);
  s.attributes = MixedAttributes(c.types, N, Nkv, c.block_size, c.layout);
}

// The float64 reference of a padded call from the pools' expected bytes, the value rows read as
// `value_as` (the value cache's type; another one for the negative control). Row i of sequence b
// is token Offset(b) + i and sees keys [0, min(Offset(b) + i + 1, T_b)) (a padded row of a first
// prompt: all T_b keys). *mean_tv: the mean distance from uniform weights over rows of >= 4 keys.
Expected PaddedReference(const Padded& s, CacheType value_as, double* mean_tv) {
  const Case& c = s.c;
  const int64_t S = s.S, N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv;
  Expected e;
  e.out.assign(static_cast<size_t>(s.B * S * N * Hv), 0.0);
  e.bound.assign(e.out.size(), 0.0);
  double tv = 0.0;
  int64_t rows = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t tb = s.Tb(b);
    for (int64_t h = 0; h < Nkv; ++h) {
      std::vector<float> kk(static_cast<size_t>(tb * H)), vv(static_cast<size_t>(tb * Hv));
      for (int64_t j = 0; j < tb; ++j) {
        DecodeRow(c.types.k, s.pool[0].RowIn(s.pool[0].after, s.paging, b, h, j), H,
                  kk.data() + j * H);
        DecodeRow(value_as, s.pool[1].RowIn(s.pool[1].after, s.paging, b, h, j), Hv,
                  vv.data() + j * Hv);
      }
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        for (int64_t i = 0; i < S; ++i) {
          const RowRef r = AttendRow(
              s.q.data() + ((b * S + i) * N + n) * H, H, Hv, 0, std::min(s.Offset(b) + i + 1, tb),
              1.0 / std::sqrt(static_cast<double>(H)), [&](int64_t j) { return kk.data() + j * H; },
              [&](int64_t j) { return vv.data() + j * Hv; });
          const size_t o = static_cast<size_t>(((b * S + i) * N + n) * Hv);
          std::copy(r.out.begin(), r.out.end(), e.out.begin() + o);
          std::copy(r.bound.begin(), r.bound.end(), e.bound.begin() + o);
          if (r.keys >= 4) {
            tv += r.tv;
            ++rows;
          }
        }
      }
    }
  }
  *mean_tv = rows > 0 ? tv / static_cast<double>(rows) : 1.0;
  return e;
}

// The call of a padded case, checked against `want` on every kernel.
Call PaddedCall(Padded& s, const Expected& want) {
  Call call;
  call.op_kind = ATTNRT_OP_PAGED_GQA;
  call.attributes = &s.attributes;
  for (Tensor& x : s.in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.outputs.push_back(s.output.get());
  call.reset = [&s] {
    for (int which = 0; which < 2; ++which) {
      std::copy(s.pool[which].before.begin(), s.pool[which].before.end(),
                static_cast<uint8_t*>(s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE + which].data()));
    }
    block_quant::Store(s.output, s.c.types.t,
                       std::vector<float>(static_cast<size_t>(s.output.numel()), kNaN));
  };
  call.check = [&s, &want](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    const int64_t S = s.S, N = s.c.N, Hv = s.c.Hv;
    const double worst = ExpectOutput("output", s.output, s.c.types.t, want, [&](int64_t i) {
      return "b " + std::to_string(i / (S * N * Hv)) + ", token " +
             std::to_string(i / (N * Hv) % S) + ", head " + std::to_string(i / Hv % N) +
             ", element " + std::to_string(i % Hv) + " of Hv " + std::to_string(Hv);
    });
    std::printf("[observed] %s on %s: output max error / allowed %.3g\n", s.c.name.c_str(),
                kernel.c_str(), worst);
    for (int which = 0; which < 2; ++which) {
      ExpectPoolBytes(
          s.pool[which], s.paging,
          static_cast<const uint8_t*>(s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE + which].data()));
    }
  };
  return call;
}

class PagedGqaMixedKvTypes : public testing::TestWithParam<Case> {};

TEST_P(PagedGqaMixedKvTypes, MatchesReferenceOnEveryKernel) {
  const Case& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  Padded s;
  BuildPadded(s, c, rng);
  ASSERT_FALSE(HasFatalFailure());
  double tv = 0.0;
  const Expected want = PaddedReference(s, c.types.v, &tv);
  std::printf("[observed] %s: mean distance from uniform attention %.3f\n", c.name.c_str(), tv);
  EXPECT_GE(tv, 0.3) << "attention too uniform for the test to see a wrong value cache";
  Call call = PaddedCall(s, want);
  RunOnEveryKernel(call);
}

std::string PaddedName(const testing::TestParamInfo<Case>& p) { return Sanitized(p.param.name); }

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaMixedKvTypes, testing::ValuesIn(PaddedCases()),
                         PaddedName);

// Negative control: the value cache (float16) read as the key cache's type (bfloat16: rows of
// the same bytes) gives a reference that the runtime's output does not match, while the right
// reading does; so the comparison can fail.
TEST(PagedGqaMixedKvTypesNegativeControl, ValueCacheReadAsKeyTypeDoesNotMatch) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const Types types = AllTypes()[4];
  ASSERT_EQ(types.name, "t_bf16_k_bf16_v_f16");
  const Case c = MakeCase(types, ATTNRT_PAGED_KV_LAYOUT_BSNH, Phase::kDecode, 0);
  std::printf("[case] negative control %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  Padded s;
  BuildPadded(s, c, rng);
  ASSERT_FALSE(HasFatalFailure());
  double tv = 0.0;
  const Expected right = PaddedReference(s, types.v, &tv);
  ASSERT_EQ(RowBytes(types.k, c.Hv), RowBytes(types.v, c.Hv));
  const Expected wrong = PaddedReference(s, types.k, &tv);
  Call call = PaddedCall(s, right);
  const std::string kernel = PlanAndRun(RuntimeFor(""), call);
  ASSERT_FALSE(kernel.empty());
  const Comparison with_right = Compare(s.output, types.t, right);
  const Comparison with_wrong = Compare(s.output, types.t, wrong);
  std::printf(
      "[observed] negative control on %s: %lld of %lld elements outside the bound of the right "
      "reference, %lld outside that of the value cache read as %s\n",
      kernel.c_str(), static_cast<long long>(with_right.bad),
      static_cast<long long>(with_right.checked), static_cast<long long>(with_wrong.bad),
      TypeName(types.k));
  EXPECT_EQ(with_right.bad, 0);
  EXPECT_GT(with_wrong.bad, with_wrong.checked / 2)
      << "the reference with the value cache read as " << TypeName(types.k)
      << " matches the runtime's output: the comparison cannot tell the two types apart";
}

// ---- the varlen op
// ------------------------------------------------------------------------------
constexpr int64_t kPadding = 2;  // engine padding rows after query_start_loc[B]

// (q_len, T_b): a decode, a first prefill, a chunk after a past, a decode at a block boundary of
// 16, a one-token first prefill.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {
    {1, 23}, {6, 6}, {4, 21}, {1, 17}, {1, 1}};

struct VarlenCase {
  std::string name;
  Types types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  bool kv_absent = false;  // key and value NULL: the pools hold every row
  int64_t H = 64, Hv = 64, block_size = 16, N = 4, Nkv = 2;
};

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

std::vector<VarlenCase> VarlenCases() {
  std::vector<VarlenCase> v;
  size_t index = 0;
  for (const Types& types : AllTypes()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (bool kv_absent : {false, true}) {
        VarlenCase c;
        c.types = types;
        c.layout = layout;
        c.kv_absent = kv_absent;
        const HeadSizes hs = kHeadSizes[(index + index / 4) % 4];
        c.H = hs.H;
        c.Hv = hs.Hv;
        c.block_size = kBlockSizes[index % 3];
        c.N = kHeads[index / 3 % 3].first;
        c.Nkv = kHeads[index / 3 % 3].second;
        ++index;
        c.name = types.name + "_" + (layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh") +
                 (kv_absent ? "_kv_absent" : "_new_rows_slot_mapping") + "_h" +
                 std::to_string(c.H) + "_hv" + std::to_string(c.Hv) + "_bs" +
                 std::to_string(c.block_size) + "_n" + std::to_string(c.N) + "_nkv" +
                 std::to_string(c.Nkv);
        v.push_back(c);
      }
    }
  }
  return v;
}

class PagedGqaVarlenMixedKvTypes : public testing::TestWithParam<VarlenCase> {};

TEST_P(PagedGqaVarlenMixedKvTypes, MatchesReferenceOnEveryKernel) {
  const VarlenCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.types.t;
  const int64_t N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv;
  const int64_t B = static_cast<int64_t>(kSequences.size());
  std::vector<int32_t> start = {0}, seq_lens;
  std::vector<int64_t> lengths;
  for (const auto& [q_len, len] : kSequences) {
    start.push_back(static_cast<int32_t>(start.back() + q_len));
    seq_lens.push_back(static_cast<int32_t>(len));
    lengths.push_back(len);
  }
  const int64_t tokens = start.back() + kPadding;
  const int64_t capacity = *std::max_element(lengths.begin(), lengths.end());
  const Paging paging = MakePaging(c.layout, Nkv, c.block_size, lengths, capacity, rng);
  Pool pool[2] = {{"key_cache", c.types.k, H, {}, {}}, {"value_cache", c.types.v, Hv, {}, {}}};
  for (Pool& p : pool) PoisonPool(p, paging, rng);

  // Rows of every token, padding included.
  std::vector<float> query = block_quant::RoundedNormal(t, tokens * N * H, rng);
  for (float& x : query) x = RoundToFormat(t, 3.0f * x);
  std::vector<float> key, value;
  for (int64_t r = 0; r < tokens * Nkv; ++r) {
    const std::vector<float> kr = block_quant::RoundedNormal(t, H, rng);
    const std::vector<float> vr = ValueRow(t, c.types.v, Hv, kTies, rng);
    key.insert(key.end(), kr.begin(), kr.end());
    value.insert(value.end(), vr.begin(), vr.end());
  }
  std::vector<int64_t> slot_mapping(static_cast<size_t>(tokens), -1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = lengths[static_cast<size_t>(b)];
    const int64_t past = c.kv_absent ? len : len - q_len;
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < past; ++j) {
        const std::vector<float> k = block_quant::RoundedNormal(t, H, rng);
        const std::vector<float> v = ValueRow(t, c.types.v, Hv, kTies, rng);
        EncodeRow(c.types.k, k.data(), H, pool[0].RowIn(pool[0].before, paging, b, h, j));
        EncodeRow(c.types.v, v.data(), Hv, pool[1].RowIn(pool[1].before, paging, b, h, j));
      }
    }
  }
  for (Pool& p : pool) p.after = p.before;
  if (!c.kv_absent) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
      const int64_t past = lengths[static_cast<size_t>(b)] - q_len;
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t token = start[static_cast<size_t>(b)] + i, j = past + i;
        slot_mapping[static_cast<size_t>(token)] =
            int64_t{paging.table[static_cast<size_t>(b * paging.slots + j / c.block_size)]} *
                c.block_size +
            j % c.block_size;
        for (int64_t h = 0; h < Nkv; ++h) {
          EncodeRow(c.types.k, key.data() + (token * Nkv + h) * H, H,
                    pool[0].RowIn(pool[0].after, paging, b, h, j));
          EncodeRow(c.types.v, value.data() + (token * Nkv + h) * Hv, Hv,
                    pool[1].RowIn(pool[1].after, paging, b, h, j));
        }
      }
    }
  }

  const attnrt_dtype dq = block_quant::QueryDtype(t);
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Tensor(dq, {tokens, N * H});
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY], t, query);
  if (!c.kv_absent) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = Tensor(dq, {tokens, Nkv * H});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = Tensor(dq, {tokens, Nkv * Hv});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY], t, key);
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE], t, value);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = I64(slot_mapping, {tokens});
  }
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = pool[0].MakeTensor(paging);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = pool[1].MakeTensor(paging);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(paging.table, {B, paging.slots});
  Tensor output = block_quant::Filled(t, {tokens, N * Hv}, kNaN);
  const attnrt_paged_gqa_attributes attributes =
      MixedAttributes(c.types, N, Nkv, c.block_size, c.layout);

  // The reference: row i of sequence b is token T_b - q_len + i and sees keys up to itself; the
  // padding rows stay NaN.
  Expected want;
  want.out.assign(static_cast<size_t>(tokens * N * Hv), kNaN);
  want.bound.assign(want.out.size(), 0.0);
  double tv = 0.0;
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = lengths[static_cast<size_t>(b)];
    for (int64_t h = 0; h < Nkv; ++h) {
      std::vector<float> kk(static_cast<size_t>(len * H)), vv(static_cast<size_t>(len * Hv));
      for (int64_t j = 0; j < len; ++j) {
        DecodeRow(c.types.k, pool[0].RowIn(pool[0].after, paging, b, h, j), H, kk.data() + j * H);
        DecodeRow(c.types.v, pool[1].RowIn(pool[1].after, paging, b, h, j), Hv, vv.data() + j * Hv);
      }
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        for (int64_t i = 0; i < q_len; ++i) {
          const int64_t token = start[static_cast<size_t>(b)] + i;
          const RowRef r = AttendRow(
              query.data() + (token * N + n) * H, H, Hv, 0, len - q_len + i + 1,
              1.0 / std::sqrt(static_cast<double>(H)), [&](int64_t j) { return kk.data() + j * H; },
              [&](int64_t j) { return vv.data() + j * Hv; });
          const size_t o = static_cast<size_t>((token * N + n) * Hv);
          std::copy(r.out.begin(), r.out.end(), want.out.begin() + o);
          std::copy(r.bound.begin(), r.bound.end(), want.bound.begin() + o);
          if (r.keys >= 4) {
            tv += r.tv;
            ++rows;
          }
        }
      }
    }
  }
  std::printf("[observed] %s: mean distance from uniform attention %.3f\n", c.name.c_str(),
              tv / static_cast<double>(rows));
  EXPECT_GE(tv / static_cast<double>(rows), 0.3)
      << "attention too uniform for the test to see a wrong value cache";

  Call call;
  call.op_kind = ATTNRT_OP_PAGED_GQA_VARLEN;
  call.attributes = &attributes;
  for (Tensor& x : in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.outputs.push_back(output.get());
  call.reset = [&] {
    for (int which = 0; which < 2; ++which) {
      std::copy(pool[which].before.begin(), pool[which].before.end(),
                static_cast<uint8_t*>(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE + which].data()));
    }
    block_quant::Store(output, t, std::vector<float>(static_cast<size_t>(output.numel()), kNaN));
  };
  call.check = [&](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    const double worst = ExpectOutput("output", output, t, want, [&](int64_t i) {
      const int64_t token = i / (N * Hv);
      const auto it = std::upper_bound(start.begin(), start.end(), token);
      const int64_t b = it - start.begin() - 1;
      return "token " + std::to_string(token) +
             (b < B ? " (sequence " + std::to_string(b) + ")" : std::string(" (padding)")) +
             ", head " + std::to_string(i / Hv % N) + ", element " + std::to_string(i % Hv) +
             " of Hv " + std::to_string(Hv);
    });
    std::printf("[observed] %s on %s: output max error / allowed %.3g\n", c.name.c_str(),
                kernel.c_str(), worst);
    for (int which = 0; which < 2; ++which) {
      ExpectPoolBytes(
          pool[which], paging,
          static_cast<const uint8_t*>(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE + which].data()));
    }
  };
  RunOnEveryKernel(call);
}

std::string VarlenName(const testing::TestParamInfo<VarlenCase>& p) {
  return Sanitized(p.param.name);
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaVarlenMixedKvTypes, testing::ValuesIn(VarlenCases()),
                         VarlenName);

}  // namespace
}  // namespace mixed_kv
}  // namespace attnrt_test
