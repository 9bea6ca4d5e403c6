// Paged varlen GroupQueryAttention (ATTNRT_OP_PAGED_GQA_VARLEN) over unquantized caches of any
// positive head size (ABI 1.9; paged_gqa_head_size_support.h states the rule), on every registered
// kernel of the op (naive kernels must accept and match, flash kernels must decline) and on the
// runtime's own choice, against the float64 reference of paged_gqa_mixed_kv_types_support.h.
//
// One call packs a decode, a first prefill of 6 tokens, a 4-token chunk after 17 cached tokens, a
// decode at a block boundary of 16 and a one-token first prefill, plus 2 rows of engine padding
// (never read, never written: they must stay NaN), with new K/V rows (and slot_mapping) or with
// key/value absent (the pools hold every row). Head sizes and types as the padded op's test
// (paged_gqa_head_size_test.cpp), each type set with both layouts; block sizes 16, 1, 5; (N, Nkv)
// (4, 2), (6, 2), (4, 1), (8, 2); rotating, softcap 8, a head_sink and a local window of 5 keys.
// Guards of poisoned rows / NaN around both pools and the output, checked unchanged; the pools
// byte for byte. ATTNRT_TEST_SEED repeats a run.
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
#include "paged_gqa_head_size_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace head_size {
namespace {

using mixed_kv::Expected;
using mixed_kv::kNaN;
using mixed_kv::Pool;

constexpr int64_t kTies = 4;
constexpr int64_t kPadding = 2;  // engine padding rows after query_start_loc[B]
constexpr int64_t kBlockSizes[] = {16, 1, 5};
constexpr std::pair<int64_t, int64_t> kHeads[] = {{4, 2}, {6, 2}, {4, 1}, {8, 2}};
// (q_len, T_b) of each sequence.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {
    {1, 23}, {6, 6}, {4, 21}, {1, 17}, {1, 1}};

struct VarlenCase {
  std::string name;
  TypeSet types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  bool kv_absent = false;
  int64_t H = 65, Hv = 67, block_size = 16, N = 4, Nkv = 2;
  Features features;
};

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

VarlenCase MakeCase(const TypeSet& types, HeadSizes hs, int32_t layout, size_t index) {
  VarlenCase c;
  c.types = types;
  c.layout = layout;
  c.H = hs.H;
  c.Hv = hs.Hv;
  const uint64_t h = Mix(index);
  c.kv_absent = (h >> 40) % 2 == 1;
  c.block_size = kBlockSizes[h % 3];
  c.N = kHeads[(h >> 8) % 4].first;
  c.Nkv = kHeads[(h >> 8) % 4].second;
  if ((h >> 16) % 3 == 0) c.features.softcap = 8.0f;
  if ((h >> 24) % 3 == 0) c.features.sink = true;
  if ((h >> 32) % 3 == 0) c.features.window = 5;
  c.name = types.name + "_" + (layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh") +
           (c.kv_absent ? "_kv_absent" : "_new_rows_slot_mapping") + "_h" + std::to_string(c.H) +
           "_hv" + std::to_string(c.Hv) + "_bs" + std::to_string(c.block_size) + "_n" +
           std::to_string(c.N) + "_nkv" + std::to_string(c.Nkv) + FeatureName(c.features);
  return c;
}

std::vector<VarlenCase> Cases() {
  std::vector<VarlenCase> v;
  size_t index = 0;
  for (const HeadSizes& hs : kHeadSizes) {
    for (const TypeSet& types : FloatTypeSets()) {
      for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
        v.push_back(MakeCase(types, hs, layout, index++));
      }
    }
  }
  for (const QuantValueSet& q : QuantValueSets()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (int k = 0; k < 2; ++k) v.push_back(MakeCase(q.types, q.hs, layout, index++));
    }
  }
  return v;
}

class PagedGqaVarlenHeadSize : public testing::TestWithParam<VarlenCase> {};

TEST_P(PagedGqaVarlenHeadSize, MatchesReferenceOnEveryKernel) {
  const VarlenCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  const FloatFormat t = c.types.t;
  const int64_t N = c.N, Nkv = c.Nkv, H = c.H, Hv = c.Hv, W = c.features.window;
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
  const mixed_kv::Paging paging =
      mixed_kv::MakePaging(c.layout, Nkv, c.block_size, lengths, capacity, rng);
  Pool pool[2] = {{"key_cache", c.types.k, H, {}, {}}, {"value_cache", c.types.v, Hv, {}, {}}};
  for (Pool& p : pool) mixed_kv::PoisonPool(p, paging, rng);

  std::vector<float> query = block_quant::RoundedNormal(t, tokens * N * H, rng);
  for (float& x : query) x = RoundToFormat(t, 4.0f * x);
  std::vector<float> sink = block_quant::RoundedNormal(t, N, rng);
  for (float& x : sink) x = RoundToFormat(t, 2.0f * x + 1.0f);
  std::vector<float> key, value;
  for (int64_t r = 0; r < tokens * Nkv; ++r) {
    const std::vector<float> kr = block_quant::RoundedNormal(t, H, rng);
    const std::vector<float> vr = mixed_kv::ValueRow(t, c.types.v, Hv, kTies, rng);
    key.insert(key.end(), kr.begin(), kr.end());
    value.insert(value.end(), vr.begin(), vr.end());
  }
  std::vector<int64_t> slot_mapping(static_cast<size_t>(tokens), -1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t len = lengths[static_cast<size_t>(b)];
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < (c.kv_absent ? len : len - q_len); ++j) {
        const std::vector<float> k = block_quant::RoundedNormal(t, H, rng);
        const std::vector<float> v = mixed_kv::ValueRow(t, c.types.v, Hv, kTies, rng);
        mixed_kv::EncodeRow(c.types.k, k.data(), H, pool[0].RowIn(pool[0].before, paging, b, h, j));
        mixed_kv::EncodeRow(c.types.v, v.data(), Hv,
                            pool[1].RowIn(pool[1].before, paging, b, h, j));
      }
    }
  }
  for (Pool& p : pool) p.after = p.before;
  for (int64_t b = 0; b < B && !c.kv_absent; ++b) {
    const int64_t q_len = kSequences[static_cast<size_t>(b)].first;
    const int64_t past = lengths[static_cast<size_t>(b)] - q_len;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t token = start[static_cast<size_t>(b)] + i, j = past + i;
      slot_mapping[static_cast<size_t>(token)] =
          int64_t{paging.table[static_cast<size_t>(b * paging.slots + j / c.block_size)]} *
              c.block_size +
          j % c.block_size;
      for (int64_t h = 0; h < Nkv; ++h) {
        mixed_kv::EncodeRow(c.types.k, key.data() + (token * Nkv + h) * H, H,
                            pool[0].RowIn(pool[0].after, paging, b, h, j));
        mixed_kv::EncodeRow(c.types.v, value.data() + (token * Nkv + h) * Hv, Hv,
                            pool[1].RowIn(pool[1].after, paging, b, h, j));
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
  if (c.features.sink) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK], t, sink);
  }
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(paging.table, {B, paging.slots});
  Guarded pool_tensor[2] = {GuardedPool(pool[0], paging, rng), GuardedPool(pool[1], paging, rng)};
  Guarded output = GuardedOutput(t, {tokens, N * Hv});
  const attnrt_paged_gqa_attributes attributes =
      Attributes(c.types, N, Nkv, c.block_size, c.layout, c.features);

  // The reference: row i of sequence b is token T_b - q_len + i and sees keys up to itself (the
  // last W of them with a window); the padding rows stay NaN.
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
        mixed_kv::DecodeRow(c.types.k, pool[0].RowIn(pool[0].after, paging, b, h, j), H,
                            kk.data() + j * H);
        mixed_kv::DecodeRow(c.types.v, pool[1].RowIn(pool[1].after, paging, b, h, j), Hv,
                            vv.data() + j * Hv);
      }
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        mixed_kv::Scoring scoring;
        scoring.softcap = c.features.softcap;
        scoring.has_sink = c.features.sink;
        scoring.sink = sink[static_cast<size_t>(n)];
        for (int64_t i = 0; i < q_len; ++i) {
          const int64_t token = start[static_cast<size_t>(b)] + i, hi = len - q_len + i + 1;
          const mixed_kv::RowRef r = mixed_kv::AttendRow(
              query.data() + (token * N + n) * H, H, Hv, W >= 0 ? std::max<int64_t>(0, hi - W) : 0,
              hi, 1.0 / std::sqrt(static_cast<double>(H)),
              [&](int64_t j) { return kk.data() + j * H; },
              [&](int64_t j) { return vv.data() + j * Hv; }, scoring);
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
      << "attention too uniform for the test to see wrong rows";

  mixed_kv::Call call;
  call.op_kind = ATTNRT_OP_PAGED_GQA_VARLEN;
  call.attributes = &attributes;
  for (Tensor& x : in) call.inputs.push_back(x.empty() ? nullptr : x.get());
  call.inputs[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE] = pool_tensor[0].get();
  call.inputs[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE] = pool_tensor[1].get();
  call.outputs.push_back(output.get());
  call.reset = [&] {
    for (int which = 0; which < 2; ++which) {
      std::copy(pool[which].before.begin(), pool[which].before.end(), pool_tensor[which].body());
      pool_tensor[which].RestoreGuards();
    }
    PoisonOutput(output, t);
    output.RestoreGuards();
  };
  call.check = [&](const std::string& kernel) {
    SCOPED_TRACE("checked after " + kernel);
    int64_t bad = 0, first = -1;
    double worst = 0.0;
    for (size_t i = 0; i < want.out.size(); ++i) {
      const double g = LoadOutput(output, t, static_cast<int64_t>(i)), w = want.out[i];
      bool ok = std::isnan(g);  // must stay NaN where w is NaN (padding rows)
      if (!std::isnan(w)) {
        const double allowed = mixed_kv::Allowed(t, w, want.bound[i]);
        ok = std::fabs(g - w) <= allowed;
        if (ok) worst = std::max(worst, std::fabs(g - w) / allowed);
      }
      if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
    }
    if (bad > 0) {
      const int64_t token = first / (N * Hv);
      const int64_t b = std::upper_bound(start.begin(), start.end(), token) - start.begin() - 1;
      const double w = want.out[static_cast<size_t>(first)];
      ADD_FAILURE() << "output: " << bad << " of " << want.out.size()
                    << " elements outside the bound; first at token " << token
                    << (b < B ? " (sequence " + std::to_string(b) + ")" : std::string(" (padding)"))
                    << ", head " << first / Hv % N << ", element " << first % Hv << " of Hv " << Hv
                    << ": got " << LoadOutput(output, t, first) << ", want " << w << ", allowed "
                    << (std::isnan(w)
                            ? 0.0
                            : mixed_kv::Allowed(t, w, want.bound[static_cast<size_t>(first)]));
    }
    std::printf("[observed] %s on %s: output max error / allowed %.3g\n", c.name.c_str(),
                kernel.c_str(), worst);
    output.ExpectGuards("output");
    for (int which = 0; which < 2; ++which) {
      mixed_kv::ExpectPoolBytes(pool[which], paging, pool_tensor[which].body());
      pool_tensor[which].ExpectGuards(pool[which].name);
    }
  };
  const mixed_kv::Outcome outcome = mixed_kv::RunOnEveryKernel(call);
  const bool one_type = !c.types.own || c.types.k == c.types.v;
  ExpectVerdicts(outcome, ATTNRT_OP_PAGED_GQA_VARLEN,
                 one_type && c.H == c.Hv && c.features.softcap == 0.0f && !c.features.sink,
                 OddSize(c.H, c.Hv));
}

std::string CaseName(const testing::TestParamInfo<VarlenCase>& p) {
  std::string name = p.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaVarlenHeadSize, testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace head_size
}  // namespace attnrt_test
