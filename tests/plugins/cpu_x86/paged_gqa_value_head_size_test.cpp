// Paged GroupQueryAttention (attnrt/ops/paged_gqa.h) with a value head size Hv other than the key
// head size H (ABI 1.8): value_cache's last dimension is Hv (or its bytes), value (B, L, Nkv*Hv),
// output (B, S, N*Hv), a per-channel v_scale Nkv*Hv values, scale 0 meaning 1/sqrt(H). Checked on
// every paged kernel the CPU plugin registers (pinned; a kernel that declines must say why) and on
// the runtime's own choice, against a float64 reference written from that text
// (paged_gqa_value_head_size_support.h).
//
// Matrix: (H, Hv) in {(192,128), (96,64), (64,128), (72,64), (64,72), (128,256), (128,128) as the
// equal control}; T float32, float16, bfloat16; caches T, int8 PER_TENSOR and PER_CHANNEL, int4
// PER_CHANNEL, and PER_BLOCK_32 Q8_0 / Q4_0 where H and Hv are multiples of 32; kv_layout BSNH and
// BNSH; a right-padded first prompt of 3 sequences, a chunked prompt and a decode of 3 sequences of
// different lengths; variants in turn: plain, local window, softcap, head_sink, all three,
// output_qk (scores, with a window; probabilities, with a sink), an explicit scale with rotary.
//
// Method: query, key and value are N(0,1) values rounded to T, the query times 3 so that the
// scores spread over several units (checked: the largest probability of a row averages several
// times the uniform one); past tokens are encoded into the pools by the test's own codecs; every
// other pool row is poisoned (NaN, or the most negative code); outputs are NaN before each run.
// After each run: every output element within the float64 reference's bound (see AttendRow and
// Bound), output_qk over columns [0, T_b), and both pools byte for byte: the new rows as the
// test's quantizer (or T itself) writes them at their tokens' rows, every other byte unchanged.
// Seeds: ATTNRT_TEST_SEED reproduces a run (printed with each case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "paged_gqa_value_head_size_support.h"

namespace attnrt_test {
namespace value_head_size {
namespace {

enum class Phase { kFirstPrompt, kChunkedPrompt, kDecode };

const char* PhaseName(Phase p) {
  return p == Phase::kFirstPrompt     ? "first_prompt"
         : p == Phase::kChunkedPrompt ? "chunked"
                                      : "decode";
}

struct Variant {
  const char* name = "plain";
  int32_t window = -1;
  float softcap = 0.0f;
  bool head_sink = false;
  int32_t qk_output = ATTNRT_GQA_QK_OUTPUT_NONE;
  float scale = 0.0f;
  bool rotary = false;  // only where H % 16 == 0 and the cache is quantized
};

const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"plain"},
      {"window", 6},
      {"softcap", -1, 5.0f},
      {"head_sink", -1, 0.0f, true},
      {"window_softcap_sink", 5, 8.0f, true},
      {"qk_scores_window", 7, 0.0f, false, ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX},
      {"qk_probs_sink", -1, 0.0f, true, ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX},
      {"scale_rotary", -1, 0.0f, false, ATTNRT_GQA_QK_OUTPUT_NONE, 0.11f, true},
  };
  return v;
}

struct Case {
  std::string name;
  HeadSizes hs;
  FloatFormat t = FloatFormat::kFloat32;
  Cache cache = Cache::kFloat;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Phase phase = Phase::kDecode;
  Variant variant;
  int64_t B = 1, S = 1, N = 4, Nkv = 2, block_size = 16;
  std::vector<int32_t> seqlens;  // T_b - 1
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case MakeCase(const HeadSizes& hs, FloatFormat t, Cache cache, int32_t layout, Phase phase,
              size_t variant) {
  Case c;
  c.hs = hs;
  c.t = t;
  c.cache = cache;
  c.layout = layout;
  c.phase = phase;
  c.variant = Variants()[variant % Variants().size()];
  const bool bnsh = layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  if (c.variant.rotary && (hs.H % 16 != 0 || cache == Cache::kFloat)) {
    c.variant.rotary = false;  // rotary needs H % 16 == 0; float caches: explicit scale only
    c.variant.name = "scale";
  }
  c.N = bnsh ? 6 : 4;
  c.Nkv = 2;
  switch (phase) {
    case Phase::kFirstPrompt:  // right-padded: T_b 13, 9, 4
      c.B = 3;
      c.S = 13;
      c.seqlens = {12, 8, 3};
      c.block_size = bnsh ? 8 : 5;
      break;
    case Phase::kChunkedPrompt:  // 9 new tokens after 28
      c.B = 1;
      c.S = 9;
      c.seqlens = {36};
      c.block_size = bnsh ? 7 : 16;
      break;
    case Phase::kDecode:
      c.B = 3;
      c.S = 1;
      c.seqlens = {44, 16, 29};
      c.block_size = bnsh ? 32 : 16;
      break;
  }
  c.name = "h" + std::to_string(hs.H) + "_hv" + std::to_string(hs.Hv) + "_" + FloatFormatName(t) +
           "_" + CacheName(cache) + "_" + (bnsh ? "bnsh" : "bsnh") + "_" + PhaseName(phase) + "_" +
           c.variant.name;
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  size_t counter = 0;
  const std::vector<HeadSizes> pairs = AllHeadSizes();
  for (size_t pi = 0; pi < pairs.size(); ++pi) {
    for (size_t ti = 0; ti < 3; ++ti) {
      const FloatFormat t = ti == 0   ? FloatFormat::kFloat32
                            : ti == 1 ? FloatFormat::kFloat16
                                      : FloatFormat::kBFloat16;
      const std::vector<Cache> caches = CachesFor(pairs[pi]);
      for (size_t ci = 0; ci < caches.size(); ++ci) {
        for (size_t phi = 0; phi < 3; ++phi) {
          for (size_t li = 0; li < 2; ++li) {
            const size_t index = counter++;
            // Variants in turn, shifted by one per group of six so each meets both layouts.
            const size_t variant = index + index / 6;
            // Reduced: one query type per (pair, cache), two of the six phase x layout combos.
            if (kReduced && (ti != (pi + ci) % 3 || (phi * 2 + li) % 3 != (pi + ci + ti) % 3)) {
              continue;
            }
            v.push_back(
                MakeCase(pairs[pi], t, caches[ci],
                         li == 0 ? ATTNRT_PAGED_KV_LAYOUT_BSNH : ATTNRT_PAGED_KV_LAYOUT_BNSH,
                         static_cast<Phase>(phi), variant));
          }
        }
      }
    }
  }
  return v;
}

// The call, the expected pools and the reference outputs.
struct Built {
  Case c;
  int64_t T = 0;
  Pools pools;
  std::vector<Tensor> in;  // ATTNRT_PAGED_GQA_NUM_INPUTS
  Tensor output, output_qk;
  attnrt_paged_gqa_attributes attributes{};
  // Reference: output (B, S, N*Hv) and output_qk (B, N, S, T), with the naive and the flash rule
  // for padded rows in a window (docs/gqa-semantics.md); the bounds of AttendRow.
  std::vector<double> out[2], out_bound[2], qk[2], qk_bound[2];
  std::vector<int64_t> valid;  // T_b
};

void Build(Built& s, const Case& c, std::mt19937_64& rng) {
  s.c = c;
  const FloatFormat t = c.t;
  const int64_t B = c.B, S = c.S, N = c.N, Nkv = c.Nkv, H = c.hs.H, Hv = c.hs.Hv;
  s.T = *std::max_element(c.seqlens.begin(), c.seqlens.end()) + 1;
  const bool first_prompt = S == s.T;
  Pools& p = s.pools;
  p.cache = c.cache;
  p.t = t;
  p.layout = c.layout;
  p.Nkv = Nkv;
  p.block_size = c.block_size;
  p.width[0] = H;
  p.width[1] = Hv;
  std::vector<int64_t> lengths;
  for (int32_t v : c.seqlens) lengths.push_back(v + 1);
  MakePools(p, lengths, s.T, rng);  // a first prompt's table holds S = T tokens

  // Per (b, kv head): the H / Hv values of tokens [0, T_b) as a kernel reads them; the past
  // tokens' rows random values of T, encoded.
  std::vector<std::vector<float>> kv[2];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = lengths[static_cast<size_t>(b)];
    const int64_t past = first_prompt ? 0 : tb - S;
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int which = 0; which < 2; ++which) {
        kv[which].emplace_back(static_cast<size_t>(tb * p.width[which]));
        for (int64_t j = 0; j < past; ++j) {
          const std::vector<float> x = block_quant::RoundedNormal(t, p.width[which], rng);
          PutRow(p, p.before[which], which, b, h, j, x.data(),
                 kv[which].back().data() + j * p.width[which]);
        }
      }
    }
  }
  p.after[0] = p.before[0];
  p.after[1] = p.before[1];

  // Query (x3), key, value; RoPE in float on query and key, rounded to T.
  s.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
  std::vector<float> q = block_quant::RoundedNormal(t, B * S * N * H, rng);
  for (float& x : q) x = RoundToFormat(t, 3.0f * x);
  std::vector<float> k = block_quant::RoundedNormal(t, B * S * Nkv * H, rng);
  const std::vector<float> v = block_quant::RoundedNormal(t, B * S * Nkv * Hv, rng);
  const attnrt_dtype dq = QueryDtype(t);
  s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
  s.in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, S, Nkv * H});
  s.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, S, Nkv * Hv});
  block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], t, q);
  block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_KEY], t, k);
  block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_VALUE], t, v);
  if (c.variant.rotary) {
    const int64_t M = s.T + 3, half = H / 2;
    std::vector<float> cos_cache, sin_cache;
    std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
    for (int64_t i = 0; i < M * half; ++i) {
      const double a = angle(rng);
      cos_cache.push_back(RoundToFormat(t, static_cast<float>(std::cos(a))));
      sin_cache.push_back(RoundToFormat(t, static_cast<float>(std::sin(a))));
    }
    s.in[ATTNRT_PAGED_GQA_INPUT_COS_CACHE] = Tensor(dq, {M, half});
    s.in[ATTNRT_PAGED_GQA_INPUT_SIN_CACHE] = Tensor(dq, {M, half});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_COS_CACHE], t, cos_cache);
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_SIN_CACHE], t, sin_cache);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < S; ++i) {
        const int64_t pos = first_prompt ? i : c.seqlens[static_cast<size_t>(b)] + 1 - S + i;
        const float* cr = cos_cache.data() + pos * half;
        const float* sr = sin_cache.data() + pos * half;
        for (int64_t n = 0; n < N; ++n) {
          block_quant::RotateAndRound(t, q.data() + ((b * S + i) * N + n) * H, H, cr, sr, half,
                                      false);
        }
        for (int64_t h = 0; h < Nkv; ++h) {
          block_quant::RotateAndRound(t, k.data() + ((b * S + i) * Nkv + h) * H, H, cr, sr, half,
                                      false);
        }
      }
    }
  }
  // New rows: encoded where their tokens go (a first prompt's padding is not stored).
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = lengths[static_cast<size_t>(b)];
    const int64_t past = first_prompt ? 0 : tb - S;
    for (int64_t i = 0; i < S && past + i < tb; ++i) {
      for (int64_t h = 0; h < Nkv; ++h) {
        for (int which = 0; which < 2; ++which) {
          const int64_t n = p.width[which];
          const float* x = (which == 0 ? k.data() : v.data()) + ((b * S + i) * Nkv + h) * n;
          PutRow(p, p.after[which], which, b, h, past + i, x,
                 kv[which][static_cast<size_t>(b * Nkv + h)].data() + (past + i) * n);
        }
      }
    }
  }
  s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = p.MakeTensor(0);
  s.in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = p.MakeTensor(1);
  s.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(c.seqlens, {B});
  s.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.T)}, {1});
  s.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(p.table, {B, p.slots});
  std::vector<float> sink;
  if (c.variant.head_sink) {
    sink = block_quant::RoundedNormal(t, N, rng);
    for (float& x : sink) x = RoundToFormat(t, 2.0f * x);
    s.in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(s.in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK], t, sink);
  }
  for (int which = 0; which < 2; ++which) {
    if (p.scales[which].empty()) continue;
    Tensor& x = s.in[ATTNRT_PAGED_GQA_INPUT_K_SCALE + which];
    x = F32({static_cast<int64_t>(p.scales[which].size())});
    std::copy(p.scales[which].begin(), p.scales[which].end(), x.f32());
  }
  s.output = block_quant::Filled(t, {B, S, N * Hv}, kNaN);
  if (c.variant.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    s.output_qk = block_quant::Filled(t, {B, N, S, s.T}, kNaN);
  }

  attnrt_paged_gqa_attributes_init(&s.attributes);
  attnrt_gqa_attributes& a = s.attributes.gqa;
  a = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.local_window_size = c.variant.window;
  a.softcap = c.variant.softcap;
  a.qk_output = c.variant.qk_output;
  a.scale = c.variant.scale;
  a.do_rotary = c.variant.rotary ? 1 : 0;
  SetQuantization(c.cache, a);
  s.attributes.block_size = static_cast<int32_t>(c.block_size);
  s.attributes.kv_layout = c.layout;

  // The reference, with the naive (rule 0) and the flash (rule 1) window of padded rows.
  Softmax sm;
  sm.alpha = Alpha(c.variant.scale, H);
  sm.softcap = c.variant.softcap;
  sm.has_sink = c.variant.head_sink;
  const int64_t W = c.variant.window;
  double nonuniformity = 0.0;
  int64_t rows_of_4 = 0;
  int64_t wrong_scale_elements = 0;
  // The two rules differ only for a first prompt's padded rows in a window.
  const int rules = first_prompt && W >= 0 ? 2 : 1;
  for (int rule = 0; rule < 2; ++rule) {
    s.out[rule].assign(static_cast<size_t>(B * S * N * Hv), 0.0);
    s.out_bound[rule].assign(s.out[rule].size(), 0.0);
    s.qk[rule].assign(static_cast<size_t>(B * N * S * s.T), 0.0);
    s.qk_bound[rule].assign(s.qk[rule].size(), 0.0);
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = c.seqlens[static_cast<size_t>(b)] + 1;
    s.valid.push_back(tb);
    const int64_t offset = first_prompt ? 0 : tb - S;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t h = n / (N / Nkv);
      const std::vector<float>& kk = kv[0][static_cast<size_t>(b * Nkv + h)];
      const std::vector<float>& vv = kv[1][static_cast<size_t>(b * Nkv + h)];
      auto key = [&](int64_t j) { return kk.data() + j * H; };
      auto value = [&](int64_t j) { return vv.data() + j * Hv; };
      if (sm.has_sink) sm.sink = sink[static_cast<size_t>(n)];
      for (int64_t i = 0; i < S; ++i) {
        const float* qi = q.data() + ((b * S + i) * N + n) * H;
        const int64_t hi = std::min(offset + i + 1, tb);
        for (int rule = 0; rule < rules; ++rule) {
          int64_t lo = (W >= 0 && hi > W) ? hi - W : 0;
          if (rule == 1 && first_prompt && W >= 0 && i >= tb) {
            lo = std::min(std::max<int64_t>(0, i + 1 - W), hi);
          }
          const RowRef r = AttendRow(qi, H, Hv, lo, hi, s.T, sm, key, value);
          const size_t o = static_cast<size_t>(((b * S + i) * N + n) * Hv);
          std::copy(r.out.begin(), r.out.end(), s.out[rule].begin() + o);
          std::copy(r.out_bound.begin(), r.out_bound.end(), s.out_bound[rule].begin() + o);
          const size_t qo = static_cast<size_t>(((b * N + n) * S + i) * s.T);
          const bool scores = c.variant.qk_output == ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX;
          for (int64_t j = 0; j < s.T; ++j) {
            const double pj = r.prob[static_cast<size_t>(j)];
            s.qk[rule][qo + j] = scores ? r.score[static_cast<size_t>(j)] : pj;
            s.qk_bound[rule][qo + j] = scores ? r.score_bound : pj * r.prob_relative_bound;
          }
          if (rule == 1) continue;
          if (r.keys >= 4) {
            nonuniformity += r.nonuniformity;
            ++rows_of_4;
          }
          if (c.variant.scale == 0.0f && H != Hv) {
            // 1/sqrt(Hv) in place of 1/sqrt(H) must show beyond the bound.
            Softmax wrong = sm;
            wrong.alpha = 1.0 / std::sqrt(static_cast<double>(Hv));
            const RowRef w = AttendRow(qi, H, Hv, lo, hi, s.T, wrong, key, value);
            for (int64_t d = 0; d < Hv; ++d) {
              const double e =
                  std::fabs(w.out[static_cast<size_t>(d)] - r.out[static_cast<size_t>(d)]);
              wrong_scale_elements +=
                  e > Bound(t, r.out[static_cast<size_t>(d)], r.out_bound[static_cast<size_t>(d)])
                      ? 1
                      : 0;
            }
          }
        }
      }
    }
  }
  if (rules == 1) {
    s.out[1] = s.out[0];
    s.out_bound[1] = s.out_bound[0];
    s.qk[1] = s.qk[0];
    s.qk_bound[1] = s.qk_bound[0];
  }
  // Not near-uniform attention: over the rows of 4 keys or more, the probabilities are on average
  // at a total variation distance of at least 0.3 from the uniform ones.
  if (rows_of_4 > 0) {
    std::printf("[observed] %s: mean distance from uniform attention %.3f\n", c.name.c_str(),
                nonuniformity / static_cast<double>(rows_of_4));
    EXPECT_GE(nonuniformity / static_cast<double>(rows_of_4), 0.3)
        << "attention too uniform for the test to see a wrong kernel";
  }
  if (c.variant.scale == 0.0f && H != Hv) {
    EXPECT_GT(wrong_scale_elements, 0) << "the bounds cannot tell 1/sqrt(H) from 1/sqrt(Hv)";
  }
}

using Param = Case;

class PagedGqaValueHeadSize : public testing::TestWithParam<Param> {};

TEST_P(PagedGqaValueHeadSize, MatchesReferenceOnEveryKernel) {
  const Case& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  Built s;
  Build(s, c, rng);
  ASSERT_FALSE(HasFatalFailure());
  const int64_t N = c.N, S = c.S, Hv = c.hs.Hv, T = s.T;

  Call call;
  for (size_t i = 0; i < s.in.size(); ++i) {
    call.inputs.push_back(s.in[i].empty() ? nullptr : s.in[i].get());
  }
  call.outputs.push_back(s.output.get());
  if (!s.output_qk.empty()) call.outputs.push_back(s.output_qk.get());
  call.reset = [&] {
    for (int which = 0; which < 2; ++which) {
      std::copy(s.pools.before[which].begin(), s.pools.before[which].end(),
                static_cast<uint8_t*>(s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE + which].data()));
    }
    block_quant::Store(s.output, c.t,
                       std::vector<float>(static_cast<size_t>(s.output.numel()), kNaN));
    if (!s.output_qk.empty()) {
      block_quant::Store(s.output_qk, c.t,
                         std::vector<float>(static_cast<size_t>(s.output_qk.numel()), kNaN));
    }
  };
  call.check = [&](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    const int rule = block_quant::Algorithm(kernel) == "flash" ? 1 : 0;
    const double worst = ExpectWithinBound(
        "output", s.output, c.t, s.out[rule], s.out_bound[rule], [](int64_t) { return true; },
        [&](int64_t i) {
          return "b " + std::to_string(i / (S * N * Hv)) + ", token " +
                 std::to_string(i / (N * Hv) % S) + ", head " + std::to_string(i / Hv % N) +
                 ", element " + std::to_string(i % Hv) + " of Hv " + std::to_string(Hv);
        });
    std::printf("[observed] %s on %s: output max error / bound %.3g\n", c.name.c_str(),
                kernel.c_str(), worst);
    if (!s.output_qk.empty()) {
      ExpectWithinBound(
          "output_qk", s.output_qk, c.t, s.qk[rule], s.qk_bound[rule],
          [&](int64_t i) { return i % T < s.valid[static_cast<size_t>(i / (N * S * T))]; },
          [&](int64_t i) {
            return "b " + std::to_string(i / (N * S * T)) + ", head " +
                   std::to_string(i / (S * T) % N) + ", token " + std::to_string(i / T % S) +
                   ", column " + std::to_string(i % T);
          });
    }
    for (int which = 0; which < 2; ++which) {
      ExpectSameBytes(
          which == 0 ? "key_cache" : "value_cache",
          static_cast<const uint8_t*>(s.in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE + which].data()),
          s.pools.after[which], [&](int64_t byte) { return s.pools.Describe(which, byte); });
    }
  };
  RunOnEveryKernel(ATTNRT_OP_PAGED_GQA, &s.attributes, call);
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaValueHeadSize, testing::ValuesIn(Cases()), ParamName);

}  // namespace
}  // namespace value_head_size
}  // namespace attnrt_test
