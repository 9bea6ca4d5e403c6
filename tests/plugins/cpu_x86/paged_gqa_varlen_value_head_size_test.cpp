// Paged GroupQueryAttention over packed variable-length batches (attnrt/ops/paged_gqa_varlen.h)
// with a value head size Hv other than H (ABI 1.8): value [num_tokens, Nkv*Hv], output
// [num_tokens, N*Hv], value_cache's last dimension Hv (or its bytes). Every paged varlen kernel the
// CPU plugin registers (pinned; declines must say why) and the runtime's own choice, against the
// float64 reference of paged_gqa_value_head_size_support.h.
//
// One call per case packs a decode, a first prefill, a prefill chunk after a past, a decode at a
// block boundary and a one-token first prefill, then two rows of engine padding after
// query_start_loc[B]; with and without slot_mapping; BSNH and BNSH pools; the (H, Hv) pairs, query
// types and cache formats of paged_gqa_value_head_size_test.cpp, with plain, local window,
// softcap, head_sink, all three and an explicit scale in turn. The padding rows of the output must
// stay NaN; the pools must hold the new rows byte for byte as the test's own codec writes them,
// every other byte unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "paged_gqa_value_head_size_support.h"

namespace attnrt_test {
namespace value_head_size {
namespace {

constexpr int64_t kPadding = 2;

// (q_len, T_b) per sequence.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {
    {1, 40}, {7, 7}, {5, 33}, {1, 17}, {1, 1}};

struct Variant {
  const char* name = "plain";
  int32_t window = -1;
  float softcap = 0.0f;
  bool head_sink = false;
  float scale = 0.0f;
};

const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"plain"},
      {"window", 6},
      {"softcap", -1, 5.0f},
      {"head_sink", -1, 0.0f, true},
      {"window_softcap_sink", 5, 8.0f, true},
      {"scale", -1, 0.0f, false, 0.11f},
  };
  return v;
}

struct Case {
  std::string name;
  HeadSizes hs;
  FloatFormat t = FloatFormat::kFloat32;
  Cache cache = Cache::kFloat;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  bool slot_mapping = false;
  Variant variant;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> v;
  size_t counter = 0;
  const std::vector<HeadSizes> pairs = AllHeadSizes();
  for (size_t pi = 0; pi < pairs.size(); ++pi) {
    for (size_t ti = 0; ti < 3; ++ti) {
      const std::vector<Cache> caches = CachesFor(pairs[pi]);
      for (size_t ci = 0; ci < caches.size(); ++ci) {
        for (size_t combo = 0; combo < 4; ++combo) {
          const size_t index = counter++;
          // Reduced: one query type per (pair, cache), two of the four layout x slot_mapping.
          if (kReduced && (ti != (pi + ci) % 3 || combo % 2 != (pi + ci) % 2)) continue;
          Case c;
          c.hs = pairs[pi];
          c.t = ti == 0   ? FloatFormat::kFloat32
                : ti == 1 ? FloatFormat::kFloat16
                          : FloatFormat::kBFloat16;
          c.cache = caches[ci];
          c.layout = combo % 2 == 0 ? ATTNRT_PAGED_KV_LAYOUT_BSNH : ATTNRT_PAGED_KV_LAYOUT_BNSH;
          c.slot_mapping = combo >= 2;
          // Variants in turn, shifted by one per group of four so each meets both layouts.
          c.variant = Variants()[(index + index / 4) % Variants().size()];
          c.name = "h" + std::to_string(c.hs.H) + "_hv" + std::to_string(c.hs.Hv) + "_" +
                   FloatFormatName(c.t) + "_" + CacheName(c.cache) + "_" +
                   (combo % 2 == 0 ? "bsnh" : "bnsh") + (c.slot_mapping ? "_slot_mapping" : "") +
                   "_" + c.variant.name;
          v.push_back(c);
        }
      }
    }
  }
  return v;
}

class PagedGqaVarlenValueHeadSize : public testing::TestWithParam<Case> {};

TEST_P(PagedGqaVarlenValueHeadSize, MatchesReferenceOnEveryKernel) {
  const Case& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.t;
  const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t N = bnsh ? 6 : 4, Nkv = 2, H = c.hs.H, Hv = c.hs.Hv;
  const int64_t B = static_cast<int64_t>(kSequences.size());
  std::vector<int32_t> start = {0}, seq_lens;
  std::vector<int64_t> lengths;
  int64_t max_len = 0;
  for (const auto& [q_len, len] : kSequences) {
    start.push_back(static_cast<int32_t>(start.back() + q_len));
    seq_lens.push_back(static_cast<int32_t>(len));
    lengths.push_back(len);
    max_len = std::max(max_len, len);
  }
  const int64_t tokens = start.back() + kPadding;

  Pools p;
  p.cache = c.cache;
  p.t = t;
  p.layout = c.layout;
  p.Nkv = Nkv;
  p.block_size = bnsh ? 5 : 16;
  p.width[0] = H;
  p.width[1] = Hv;
  MakePools(p, lengths, max_len, rng);

  // Rows of every token, padding included; query x3 so that the scores spread over several units.
  std::vector<float> query = block_quant::RoundedNormal(t, tokens * N * H, rng);
  for (float& x : query) x = RoundToFormat(t, 3.0f * x);
  const std::vector<float> key = block_quant::RoundedNormal(t, tokens * Nkv * H, rng);
  const std::vector<float> value = block_quant::RoundedNormal(t, tokens * Nkv * Hv, rng);
  // Per (sequence, kv head): the values of tokens [0, T_b) as a kernel reads them.
  std::vector<std::vector<float>> kv[2];
  std::vector<int64_t> slot_mapping(static_cast<size_t>(tokens), -1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = lengths[static_cast<size_t>(b)];
    const int64_t past = len - q_len;
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int which = 0; which < 2; ++which) {
        kv[which].emplace_back(static_cast<size_t>(len * p.width[which]));
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
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t past = lengths[static_cast<size_t>(b)] - q_len;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t token = start[static_cast<size_t>(b)] + i, j = past + i;
      slot_mapping[static_cast<size_t>(token)] =
          int64_t{p.table[static_cast<size_t>(b * p.slots + j / p.block_size)]} * p.block_size +
          j % p.block_size;
      for (int64_t h = 0; h < Nkv; ++h) {
        for (int which = 0; which < 2; ++which) {
          const int64_t n = p.width[which];
          const float* x = (which == 0 ? key : value).data() + (token * Nkv + h) * n;
          PutRow(p, p.after[which], which, b, h, j, x,
                 kv[which][static_cast<size_t>(b * Nkv + h)].data() + j * n);
        }
      }
    }
  }

  const attnrt_dtype dq = QueryDtype(t);
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Tensor(dq, {tokens, N * H});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = Tensor(dq, {tokens, Nkv * H});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = Tensor(dq, {tokens, Nkv * Hv});
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY], t, query);
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY], t, key);
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE], t, value);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = p.MakeTensor(0);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = p.MakeTensor(1);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(p.table, {B, p.slots});
  if (c.slot_mapping) in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = I64(slot_mapping, {tokens});
  std::vector<float> sink;
  if (c.variant.head_sink) {
    sink = block_quant::RoundedNormal(t, N, rng);
    for (float& x : sink) x = RoundToFormat(t, 2.0f * x);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK], t, sink);
  }
  for (int which = 0; which < 2; ++which) {
    if (p.scales[which].empty()) continue;
    Tensor& x = in[ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE + which];
    x = F32({static_cast<int64_t>(p.scales[which].size())});
    std::copy(p.scales[which].begin(), p.scales[which].end(), x.f32());
  }
  Tensor output = block_quant::Filled(t, {tokens, N * Hv}, kNaN);

  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.gqa.local_window_size = c.variant.window;
  a.gqa.softcap = c.variant.softcap;
  a.gqa.scale = c.variant.scale;
  SetQuantization(c.cache, a.gqa);
  a.block_size = static_cast<int32_t>(p.block_size);
  a.kv_layout = c.layout;

  // The reference: row i of sequence b is token T_b - q_len + i and sees keys up to itself, the
  // last W of them with a window; the padding rows stay NaN.
  std::vector<double> want(static_cast<size_t>(tokens * N * Hv), kNaN);
  std::vector<double> bound(want.size(), 0.0);
  Softmax sm;
  sm.alpha = Alpha(c.variant.scale, H);
  sm.softcap = c.variant.softcap;
  sm.has_sink = c.variant.head_sink;
  double nonuniformity = 0.0;
  int64_t rows_of_4 = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t past = lengths[static_cast<size_t>(b)] - q_len;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t h = n / (N / Nkv);
      const std::vector<float>& kk = kv[0][static_cast<size_t>(b * Nkv + h)];
      const std::vector<float>& vv = kv[1][static_cast<size_t>(b * Nkv + h)];
      if (sm.has_sink) sm.sink = sink[static_cast<size_t>(n)];
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t token = start[static_cast<size_t>(b)] + i;
        const int64_t hi = past + i + 1, W = c.variant.window;
        const int64_t lo = W >= 0 && hi > W ? hi - W : 0;
        const RowRef r = AttendRow(
            query.data() + (token * N + n) * H, H, Hv, lo, hi, hi, sm,
            [&](int64_t j) { return kk.data() + j * H; },
            [&](int64_t j) { return vv.data() + j * Hv; });
        const size_t o = static_cast<size_t>((token * N + n) * Hv);
        std::copy(r.out.begin(), r.out.end(), want.begin() + o);
        std::copy(r.out_bound.begin(), r.out_bound.end(), bound.begin() + o);
        if (r.keys >= 4) {
          nonuniformity += r.nonuniformity;
          ++rows_of_4;
        }
      }
    }
  }
  // Not near-uniform attention (see paged_gqa_value_head_size_test.cpp).
  EXPECT_GE(nonuniformity / static_cast<double>(rows_of_4), 0.3)
      << "attention too uniform for the test to see a wrong kernel";

  Call call;
  for (Tensor& x : in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.outputs.push_back(output.get());
  call.reset = [&] {
    for (int which = 0; which < 2; ++which) {
      std::copy(p.before[which].begin(), p.before[which].end(),
                static_cast<uint8_t*>(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE + which].data()));
    }
    block_quant::Store(output, t, std::vector<float>(static_cast<size_t>(output.numel()), kNaN));
  };
  call.check = [&](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    const double worst = ExpectWithinBound(
        "output", output, t, want, bound, [](int64_t) { return true; },
        [&](int64_t i) {
          const int64_t token = i / (N * Hv);
          const auto it = std::upper_bound(start.begin(), start.end(), token);
          const int64_t b = it - start.begin() - 1;
          return "token " + std::to_string(token) +
                 (b < B ? " (sequence " + std::to_string(b) + ")" : std::string(" (padding)")) +
                 ", head " + std::to_string(i / Hv % N) + ", element " + std::to_string(i % Hv) +
                 " of Hv " + std::to_string(Hv);
        });
    std::printf("[observed] %s on %s: output max error / bound %.3g\n", c.name.c_str(),
                kernel.c_str(), worst);
    for (int which = 0; which < 2; ++which) {
      ExpectSameBytes(
          which == 0 ? "key_cache" : "value_cache",
          static_cast<const uint8_t*>(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE + which].data()),
          p.after[which], [&](int64_t byte) { return p.Describe(which, byte); });
    }
  };
  RunOnEveryKernel(ATTNRT_OP_PAGED_GQA_VARLEN, &a, call);
}

std::string ParamName(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaVarlenValueHeadSize, testing::ValuesIn(Cases()),
                         ParamName);

}  // namespace
}  // namespace value_head_size
}  // namespace attnrt_test
