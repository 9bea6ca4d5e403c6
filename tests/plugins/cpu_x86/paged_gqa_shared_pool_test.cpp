// The paged ops over key_cache and value_cache that share elements (ABI 1.8; attnrt/ops/
// paged_gqa.h, the paragraph on strided pools): a call that writes no rows (paged key and value of
// kv_sequence_length 0; varlen key and value absent) may read V as the leading Hv elements of the
// K rows of one tensor, MLA's layout. value_cache is the strided view key_cache[..., :Hv] of one
// compact pool (BSNH [num_blocks, block_size, Nkv, H] or BNSH [num_blocks, Nkv, block_size, H]);
// with Hv == H it is key_cache's own descriptor (BSNH) or a second descriptor of the same memory
// with explicit strides (BNSH). (H, Hv) in {(576,512), (96,64), (192,128), (128,128)}.
//
// Every kernel the CPU plugin registers for the op that accepts the call (pinned; a decline must
// say why, and a naive kernel may decline only for the CPU), then the runtime's own choice, against
// the float64 reference of paged_gqa_value_head_size_support.h with V read as the text says
// (paged_gqa_shared_pool_support.h):
//  - paged op: float32, float16 and bfloat16 queries over caches of their type, and int8
//    PER_TENSOR caches (v_scale other than k_scale); decodes of 3 sequences of lengths 45, 17 and
//    30, a right-padded first prompt of 3 sequences (13, 9 and 4 tokens) and a 6-row prompt chunk
//    ending at token 37, all rows already in the cache; in turn no attention_bias, a bias of shape
//    (B, N, S, T) and one of shape (B, 1, S, T) that mask about a third of the keys with -inf
//    (never a row's last visible key) and add 2·N(0,1) to the others;
//  - varlen op: a decode, a whole prefill, a prefill chunk and two more decodes packed in one call
//    with two rows of engine padding; in turn plain, local window, softcap and head_sink.
// Queries are 3·N(0,1) (checked: attention far from uniform); outputs NaN before each run, padding
// rows NaN after; key_cache byte for byte unchanged; and the controls: the reference with V taken
// from the trailing Hv elements of the K rows (Hv < H), and for int8 with V decoded with k_scale,
// must be rejected by the bounds on most elements, of the reference itself and of every kernel's
// output. Seeds: ATTNRT_TEST_SEED reproduces a run (printed with each case).
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
#include "paged_gqa_shared_pool_support.h"
#include "paged_gqa_value_head_size_support.h"

namespace attnrt_test {
namespace value_head_size {
namespace shared_pool {
namespace {

std::string TypeName(FloatFormat t) { return FloatFormatName(t); }

FloatFormat TypeOf(size_t i) {
  return i % 3 == 0   ? FloatFormat::kFloat32
         : i % 3 == 1 ? FloatFormat::kFloat16
                      : FloatFormat::kBFloat16;
}

std::string HeadName(const HeadSizes& hs) {
  return "h" + std::to_string(hs.H) + "_hv" + std::to_string(hs.Hv);
}

std::string ParamName(const std::string& s) {
  std::string name = s;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// ---- paged op
// ------------------------------------------------------------------------------------
enum class Phase { kDecode, kFirstPrompt, kChunk };
enum class Mask { kNone, kBNST, kB1ST };

struct PagedCase {
  std::string name;
  HeadSizes hs;
  FloatFormat t = FloatFormat::kFloat32;
  Cache cache = Cache::kFloat;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Phase phase = Phase::kDecode;
  Mask mask = Mask::kNone;
};

void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

std::vector<PagedCase> PagedCases() {
  std::vector<PagedCase> v;
  const std::vector<HeadSizes> pairs = SharedHeadSizes();
  size_t counter = 0;
  for (size_t pi = 0; pi < pairs.size(); ++pi) {
    // Caches of the query type (each type), then int8 PER_TENSOR (one type in turn).
    for (size_t ci = 0; ci < 4; ++ci) {
      for (size_t phi = 0; phi < 3; ++phi) {
        for (size_t li = 0; li < 2; ++li) {
          const size_t index = counter++;
          PagedCase c;
          c.hs = pairs[pi];
          c.cache = ci < 3 ? Cache::kFloat : Cache::kInt8PerTensor;
          c.t = TypeOf(ci < 3 ? ci : pi + phi + li);
          c.layout = li == 0 ? ATTNRT_PAGED_KV_LAYOUT_BSNH : ATTNRT_PAGED_KV_LAYOUT_BNSH;
          c.phase = static_cast<Phase>(phi);
          // Masks in turn, shifted by one per group of six so each meets every phase and layout.
          c.mask = static_cast<Mask>((index + index / 6) % 3);
          // Reduced: one type per (pair, phase, layout) for T caches, half of the int8 ones.
          if (kReduced && (ci < 3 ? ci != (pi + phi + li) % 3 : li != phi % 2)) continue;
          const char* phases[] = {"decode", "first_prompt", "chunk"};
          const char* masks[] = {"no_bias", "mask_bnst", "mask_b1st"};
          c.name = HeadName(c.hs) + "_" + TypeName(c.t) + "_" + CacheName(c.cache) + "_" +
                   (li == 0 ? "bsnh" : "bnsh") + "_" + phases[phi] + "_" +
                   masks[static_cast<int>(c.mask)];
          v.push_back(c);
        }
      }
    }
  }
  return v;
}

class PagedGqaSharedPool : public testing::TestWithParam<PagedCase> {};

TEST_P(PagedGqaSharedPool, ReadsValueRowsInsideKeyRowsOnEveryKernel) {
  const PagedCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.t;
  const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t N = bnsh ? 6 : 4, Nkv = bnsh ? 2 : 1, H = c.hs.H, Hv = c.hs.Hv;
  int64_t B = 3, S = 1, block_size = bnsh ? 5 : 16;
  std::vector<int32_t> seqlens = {44, 16, 29};  // T_b - 1
  if (c.phase == Phase::kFirstPrompt) {
    S = 13;
    seqlens = {12, 8, 3};
    block_size = bnsh ? 8 : 5;
  } else if (c.phase == Phase::kChunk) {
    B = 1;
    S = 6;
    seqlens = {36};
    block_size = bnsh ? 7 : 16;
  }
  std::vector<int64_t> lengths;
  for (int32_t x : seqlens) lengths.push_back(x + 1);
  const int64_t T = *std::max_element(lengths.begin(), lengths.end());
  const bool first_prompt = S == T;

  SharedPool s;
  MakeSharedPool(s, c.cache, t, c.layout, Nkv, block_size, c.hs, lengths, T, !bnsh, rng);
  ASSERT_FALSE(HasFatalFailure());

  const attnrt_dtype dq = QueryDtype(t);
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
  std::vector<float> q = block_quant::RoundedNormal(t, B * S * N * H, rng);
  for (float& x : q) x = RoundToFormat(t, 3.0f * x);
  in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
  block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, q);
  in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, 0, Nkv * H});  // L = 0: nothing to write
  in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, 0, Nkv * Hv});
  in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(seqlens, {B});
  in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});
  in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.p.table, {B, s.p.slots});
  if (!s.v_scale.empty()) {
    in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = F32({1});
    in[ATTNRT_PAGED_GQA_INPUT_K_SCALE].f32()[0] = s.p.scales[0][0];
    in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = F32({1});
    in[ATTNRT_PAGED_GQA_INPUT_V_SCALE].f32()[0] = s.v_scale[0];
  }
  // Causal offset of sequence b: 0 in a first prompt, else T_b - S (every row is in the cache).
  auto visible_end = [&](int64_t b, int64_t i) {
    const int64_t tb = lengths[static_cast<size_t>(b)];
    return std::min(first_prompt ? i + 1 : tb - S + i + 1, tb);
  };
  const int64_t Nb = c.mask == Mask::kBNST ? N : 1;
  std::vector<double> bias;
  if (c.mask != Mask::kNone) {
    std::bernoulli_distribution masked(0.35);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t n = 0; n < Nb; ++n) {
        for (int64_t i = 0; i < S; ++i) {
          const int64_t last = visible_end(b, i) - 1;
          for (int64_t j = 0; j < T; ++j) {
            values.push_back(j != last && masked(rng) ? -INFINITY
                                                      : RoundToFormat(t, 2.0f * normal(rng)));
          }
        }
      }
    }
    in[ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS] = Tensor(dq, {B, Nb, S, T});
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS], t, values);
    bias.assign(values.begin(), values.end());
  }
  Tensor output = block_quant::Filled(t, {B, S, N * Hv}, kNaN);

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  SetQuantization(c.cache, a.gqa);
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = c.layout;

  Expected e(static_cast<size_t>(B * S * N * Hv));
  Softmax sm;
  sm.alpha = Alpha(0.0f, H);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        const double* row = bias.empty() ? nullptr : bias.data() + ((b * Nb + n % Nb) * S + i) * T;
        e.Row(s, b, n / (N / Nkv), q.data() + ((b * S + i) * N + n) * H, 0, visible_end(b, i), T,
              sm, row, static_cast<size_t>(((b * S + i) * N + n) * Hv));
      }
    }
  }
  CheckReference(c.name, s, e, t);

  Call call;
  for (size_t i = 0; i < in.size(); ++i)
    call.inputs.push_back(in[i].empty() ? nullptr : in[i].get());
  call.inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = s.KeyCache();
  call.inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = s.ValueCache();
  call.outputs.push_back(output.get());
  call.reset = [&] {
    s.Restore();
    block_quant::Store(output, t, std::vector<float>(static_cast<size_t>(output.numel()), kNaN));
  };
  call.check = [&](const std::string& kernel) {
    CheckRun(c.name, kernel, s, output, t, e, [&](int64_t i) {
      return "b " + std::to_string(i / (S * N * Hv)) + ", token " +
             std::to_string(i / (N * Hv) % S) + ", head " + std::to_string(i / Hv % N) +
             ", element " + std::to_string(i % Hv) + " of Hv " + std::to_string(Hv);
    });
  };
  RunOnEveryKernel(ATTNRT_OP_PAGED_GQA, &a, call);
}

std::string PagedName(const testing::TestParamInfo<PagedCase>& info) {
  return ParamName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaSharedPool, testing::ValuesIn(PagedCases()), PagedName);

// ---- varlen op
// -----------------------------------------------------------------------------------
constexpr int64_t kPadding = 2;

// (q_len, T_b) per sequence: a decode, a whole prefill, a prefill chunk, a decode at a block
// boundary, a one-token sequence.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {
    {1, 40}, {7, 7}, {5, 33}, {1, 17}, {1, 1}};

struct VarlenVariant {
  const char* name = "plain";
  int32_t window = -1;
  float softcap = 0.0f;
  bool head_sink = false;
};

const std::vector<VarlenVariant>& VarlenVariants() {
  static const std::vector<VarlenVariant> v = {
      {"plain"}, {"window", 6}, {"softcap", -1, 5.0f}, {"head_sink", -1, 0.0f, true}};
  return v;
}

struct VarlenCase {
  std::string name;
  HeadSizes hs;
  FloatFormat t = FloatFormat::kFloat32;
  Cache cache = Cache::kFloat;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  VarlenVariant variant;
};

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

std::vector<VarlenCase> VarlenCases() {
  std::vector<VarlenCase> v;
  const std::vector<HeadSizes> pairs = SharedHeadSizes();
  size_t counter = 0;
  for (size_t pi = 0; pi < pairs.size(); ++pi) {
    for (size_t ci = 0; ci < 4; ++ci) {
      for (size_t li = 0; li < 2; ++li) {
        const size_t index = counter++;
        VarlenCase c;
        c.hs = pairs[pi];
        c.cache = ci < 3 ? Cache::kFloat : Cache::kInt8PerTensor;
        c.t = TypeOf(ci < 3 ? ci : pi + li);
        c.layout = li == 0 ? ATTNRT_PAGED_KV_LAYOUT_BSNH : ATTNRT_PAGED_KV_LAYOUT_BNSH;
        c.variant = VarlenVariants()[(index + index / 4) % VarlenVariants().size()];
        if (kReduced && (ci < 3 ? ci != (pi + li) % 3 : li != pi % 2)) continue;
        c.name = HeadName(c.hs) + "_" + TypeName(c.t) + "_" + CacheName(c.cache) + "_" +
                 (li == 0 ? "bsnh" : "bnsh") + "_" + c.variant.name;
        v.push_back(c);
      }
    }
  }
  return v;
}

class PagedGqaVarlenSharedPool : public testing::TestWithParam<VarlenCase> {};

TEST_P(PagedGqaVarlenSharedPool, ReadsValueRowsInsideKeyRowsOnEveryKernel) {
  const VarlenCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.t;
  const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t N = bnsh ? 6 : 4, Nkv = bnsh ? 2 : 1, H = c.hs.H, Hv = c.hs.Hv;
  const int64_t B = static_cast<int64_t>(kSequences.size());
  std::vector<int32_t> start = {0}, seq_lens;
  std::vector<int64_t> lengths;
  for (const auto& [q_len, len] : kSequences) {
    start.push_back(static_cast<int32_t>(start.back() + q_len));
    seq_lens.push_back(static_cast<int32_t>(len));
    lengths.push_back(len);
  }
  const int64_t tokens = start.back() + kPadding;
  const int64_t max_len = *std::max_element(lengths.begin(), lengths.end());

  SharedPool s;
  MakeSharedPool(s, c.cache, t, c.layout, Nkv, bnsh ? 5 : 16, c.hs, lengths, max_len, !bnsh, rng);
  ASSERT_FALSE(HasFatalFailure());

  const attnrt_dtype dq = QueryDtype(t);
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  std::vector<float> query = block_quant::RoundedNormal(t, tokens * N * H, rng);
  for (float& x : query) x = RoundToFormat(t, 3.0f * x);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Tensor(dq, {tokens, N * H});
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY], t, query);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(s.p.table, {B, s.p.slots});
  std::vector<float> sink;
  if (c.variant.head_sink) {
    sink = block_quant::RoundedNormal(t, N, rng);
    for (float& x : sink) x = RoundToFormat(t, 2.0f * x);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK], t, sink);
  }
  if (!s.v_scale.empty()) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE] = F32({1});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE].f32()[0] = s.p.scales[0][0];
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE] = F32({1});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE].f32()[0] = s.v_scale[0];
  }
  Tensor output = block_quant::Filled(t, {tokens, N * Hv}, kNaN);

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.gqa.local_window_size = c.variant.window;
  a.gqa.softcap = c.variant.softcap;
  SetQuantization(c.cache, a.gqa);
  a.block_size = static_cast<int32_t>(s.p.block_size);
  a.kv_layout = c.layout;

  // Row i of sequence b is token T_b - q_len + i: keys up to itself, the last W with a window.
  Expected e(static_cast<size_t>(tokens * N * Hv));
  Softmax sm;
  sm.alpha = Alpha(0.0f, H);
  sm.softcap = c.variant.softcap;
  sm.has_sink = c.variant.head_sink;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t past = lengths[static_cast<size_t>(b)] - q_len;
    for (int64_t n = 0; n < N; ++n) {
      if (sm.has_sink) sm.sink = sink[static_cast<size_t>(n)];
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t token = start[static_cast<size_t>(b)] + i;
        const int64_t hi = past + i + 1, W = c.variant.window;
        e.Row(s, b, n / (N / Nkv), query.data() + (token * N + n) * H,
              W >= 0 && hi > W ? hi - W : 0, hi, hi, sm, nullptr,
              static_cast<size_t>((token * N + n) * Hv));
      }
    }
  }
  CheckReference(c.name, s, e, t);

  Call call;
  for (Tensor& x : in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.inputs[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = s.KeyCache();
  call.inputs[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = s.ValueCache();
  call.outputs.push_back(output.get());
  call.reset = [&] {
    s.Restore();
    block_quant::Store(output, t, std::vector<float>(static_cast<size_t>(output.numel()), kNaN));
  };
  call.check = [&](const std::string& kernel) {
    CheckRun(c.name, kernel, s, output, t, e, [&](int64_t i) {
      const int64_t token = i / (N * Hv);
      const auto it = std::upper_bound(start.begin(), start.end(), token);
      const int64_t b = it - start.begin() - 1;
      return "token " + std::to_string(token) +
             (b < B ? " (sequence " + std::to_string(b) + ")" : std::string(" (padding)")) +
             ", head " + std::to_string(i / Hv % N) + ", element " + std::to_string(i % Hv) +
             " of Hv " + std::to_string(Hv);
    });
  };
  RunOnEveryKernel(ATTNRT_OP_PAGED_GQA_VARLEN, &a, call);
}

std::string VarlenName(const testing::TestParamInfo<VarlenCase>& info) {
  return ParamName(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaVarlenSharedPool, testing::ValuesIn(VarlenCases()),
                         VarlenName);

}  // namespace
}  // namespace shared_pool
}  // namespace value_head_size
}  // namespace attnrt_test
