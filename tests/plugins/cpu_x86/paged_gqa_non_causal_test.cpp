// NON-CAUSAL attention (attnrt_gqa_attributes causal = 0, embedded in the paged attributes as
// .gqa) through the paged op (ATTNRT_OP_PAGED_GQA) and the paged varlen op
// (ATTNRT_OP_PAGED_GQA_VARLEN), on every kernel the plugins register for them (each pinned: a
// kernel may decline a case with a reason, then its pinned plan must fail UNSUPPORTED; a naive
// kernel may decline only for the CPU) and on the runtime's own choice (which must accept and
// match), against a float64 reference written here from the definition below.
//
// The semantics under test (abi/attnrt/ops/gqa.h, paged_gqa.h, paged_gqa_varlen.h):
//   - with causal = 0, every query row of sequence b sees every key [0, T_b) of its sequence
//     (T_b = seqlens_k[b] + 1 in the paged op, seq_lens[b] in the varlen op), including the keys
//     of this call's later new tokens; a right-padded first prompt's padding rows see [0, T_b) too;
//   - the new K/V rows are still written into the pools first, at the positions of the causal
//     case: new token i of sequence b is token T_b - q_len_b + i (0 + i in a first prompt, whose
//     padding rows, tokens >= T_b, are not stored), quantized for a quantized cache, every other
//     byte of the pools unchanged;
//   - causal = 0 requires local_window_size = -1: any other value is INVALID_ARGUMENT at op
//     creation (the error case below);
//   - everything else as in the causal case: scale (0 = 1/sqrt(H)), softcap, head_sink /
//     smooth_softmax (one more logit bringing no value), int8/int4 PER_TENSOR/PER_CHANNEL caches
//     with k_scale/v_scale, PER_BLOCK_32 Q8_0/Q4_0 caches, p_precision EXACT and INPUT;
//   - varlen: output rows after query_start_loc[B] (an engine's padding) are neither read nor
//     written.
//
// Matrix: T float32/float16/bfloat16 with a cache of T, and each of the six quantized caches
// (int8/int4 x PER_TENSOR/PER_CHANNEL, Q8_0, Q4_0) with each T; kv_layout BSNH and BNSH; block
// sizes 16, 1 and 5, each with every other combination (the long prefills: one of them in turn;
// and again over unquantized caches without softcap/head_sink/smooth_softmax, so that every flash
// kernel, AMX's for bfloat16, takes them, in blocks of 32 and 64 rows). In the paged op: a
// right-padded first prompt of 2 sequences (T_b 7 and 5), a prefill chunk of 5 after 18 cached
// tokens, a chunk of 6 with key/value of kv_sequence_length 0 (the pools hold every row), a decode
// of 3 sequences, a decode with kv_sequence_length 0, a packed-QKV chunk of 4 after 9, and long
// prefills spanning several query and key tiles of the flash kernels (a padded first prompt of 96
// with T_b 96 and 77, a chunk of 70 after 80, a chunk of 40 with key/value of length 0 over 130
// held tokens). In the varlen op: one call packing decodes, first prefills (6 and 1 tokens) and
// chunks after a past (5 after 16, 3 after 6); one packing a long chunk (70 after 60), a long first
// prefill of 40, a decode and a chunk; or one of decodes only; each with 2 rows of engine padding,
// with new rows (with and without slot_mapping) or key/value absent. Rotating per case
// (deterministically, by the case index): (N, Nkv) (4, 2), (8, 1), (6, 6); head size 64, 128, 72
// (not for Q8_0/Q4_0) and 67 (unquantized only: the flash kernels decline it); softcap 10;
// head_sink or smooth_softmax; scale 2/sqrt(H); p_precision EXACT or INPUT.
//
// Method: fresh random inputs each run (the seed is printed; ATTNRT_TEST_SEED repeats a run):
// query N(0,1) x 4 (checked: the mean total variation distance of the attention weights from
// uniform ones is at least 0.3, so attention is peaked, not near-uniform), key/value N(0,1), all
// values of T; in every sequence of several query rows, row 0 of each head is aimed at the key of
// the sequence's last token (support header, PlantLaterKey). Pool rows not holding a token are
// poisoned (NaN, NaN block scales, the largest int8/int4 code), as are a block's worth of rows on
// each side of each pool and 64 elements on each side of the output (guards, checked unchanged);
// the output is NaN before each run. After each run: every output element within the bound of
// the reference (support header), engine padding rows still NaN, both pools byte for byte.
// NEGATIVE CONTROL: the causal float64 reference of the same inputs is computed too; for every
// sequence with more than one query row it must differ from the non-causal one by at least 20
// times the tolerance on some row (else the case could not tell causal from non-causal), and every
// kernel's output of such a case must lie outside the causal reference's bound somewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"
#include "paged_gqa_head_size_support.h"
#include "paged_gqa_mixed_kv_types_support.h"
#include "paged_gqa_non_causal_run.h"
#include "paged_gqa_non_causal_support.h"

namespace attnrt_test {
namespace non_causal {
namespace {

constexpr int64_t kBlockSizes[] = {16, 1, 5};
// Block sizes of the flash-eligible long cases: multiples of 32 rows, which the flash prompts read
// in place (docs/paged-gqa.md).
constexpr int64_t kLongBlockSizes[] = {32, 64};
constexpr std::pair<int64_t, int64_t> kHeads[] = {{4, 2}, {8, 1}, {6, 6}};

struct TypePair {
  FloatFormat t;
  Cache cache;
};

std::vector<TypePair> AllTypes() {
  std::vector<TypePair> v;
  const FloatFormat ts[] = {FloatFormat::kFloat32, FloatFormat::kFloat16, FloatFormat::kBFloat16};
  for (FloatFormat t : ts) v.push_back({t, Cache::kT});
  for (Cache c : {Cache::kInt8Tensor, Cache::kInt8Channel, Cache::kInt4Tensor, Cache::kInt4Channel,
                  Cache::kQ8_0, Cache::kQ4_0}) {
    for (FloatFormat t : ts) v.push_back({t, c});
  }
  // float8 e5m2 last, so the cases before it keep their index (and features); with bfloat16
  // queries only (vLLM's fp8_e5m2 cache under its default dtype), which keeps the suite inside its
  // time limit under qemu; the other query types meet e5m2 in the dtype conformance suite.
  for (Cache c : {Cache::kE5M2Tensor, Cache::kE5M2Channel})
    v.push_back({FloatFormat::kBFloat16, c});
  return v;
}

// Heads, head size and features of case `index` (independent bits of its hash).
void Rotate(Scenario& s, size_t index) {
  const uint64_t h = head_size::Mix(index);
  s.N = kHeads[(h >> 8) % 3].first;
  s.Nkv = kHeads[(h >> 8) % 3].second;
  std::vector<int64_t> sizes = {64, 128};
  if (!IsBlock(s.cache)) sizes.push_back(72);
  if (s.cache == Cache::kT) sizes.push_back(67);
  s.H = sizes[(h >> 12) % sizes.size()];
  if ((h >> 16) % 4 == 0) s.f.softcap = 10.0f;
  if ((h >> 20) % 4 == 1) s.f.sink = true;
  if ((h >> 20) % 4 == 2) s.f.smooth = true;
  if ((h >> 24) % 4 == 0) s.f.scale = static_cast<float>(2.0 / std::sqrt(static_cast<double>(s.H)));
  s.f.p_input = (h >> 28) % 2 == 1;
}

// A flash-eligible case (the flash kernels, AMX's for bfloat16, take it): no softcap, head_sink or
// smooth_softmax, a head size that is a multiple of 8.
void MakeFlashEligible(Scenario& s) {
  s.f.softcap = 0.0f;
  s.f.sink = s.f.smooth = false;
  if (s.H == 67) s.H = 128;
}

std::string BaseName(const Scenario& s) {
  return std::string(FloatFormatName(s.t)) + "_" + CacheName(s.cache) + "_" +
         (s.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "bnsh" : "bsnh");
}

std::string Shape(const Scenario& s) {
  return "_h" + std::to_string(s.H) + "_bs" + std::to_string(s.block_size) + "_n" +
         std::to_string(s.N) + "_nkv" + std::to_string(s.Nkv) + FeatureName(s.f);
}

// ---- the paged op
// -------------------------------------------------------------------------------
enum class Phase {
  kFirstPrompt,
  kChunk,
  kChunkCached,
  kDecode,
  kDecodeCached,
  kPackedChunk,
  kLongFirstPrompt,
  kLongChunk,
  kLongChunkCached
};
constexpr int kPhases = 9;

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kFirstPrompt:
      return "first_prompt_padded";
    case Phase::kChunk:
      return "chunk_after_past";
    case Phase::kChunkCached:
      return "chunk_kv_absent";
    case Phase::kDecode:
      return "decode";
    case Phase::kDecodeCached:
      return "decode_kv_absent";
    case Phase::kPackedChunk:
      return "packed_qkv_chunk";
    case Phase::kLongFirstPrompt:
      return "long_first_prompt_padded";
    case Phase::kLongChunk:
      return "long_chunk_after_past";
    case Phase::kLongChunkCached:
      break;
  }
  return "long_chunk_kv_absent";
}

struct PagedCase {
  std::string name;
  TypePair types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Phase phase = Phase::kDecode;
  int64_t block_size = 16;
  bool flash_eligible = false;
  size_t index = 0;
};

void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

// (S, T_b of each sequence, new rows): a first prompt has T = S, a chunk B = 1. The long phases
// span several query and key tiles of the flash kernels.
Scenario PagedScenario(const PagedCase& c) {
  Scenario s;
  s.t = c.types.t;
  s.cache = c.types.cache;
  s.layout = c.layout;
  Rotate(s, c.index);
  if (c.flash_eligible) MakeFlashEligible(s);
  s.block_size = c.block_size;
  int64_t S = 1;
  std::vector<int64_t> tbs;
  switch (c.phase) {
    case Phase::kFirstPrompt:
      S = 7, tbs = {7, 5};
      break;
    case Phase::kChunk:
      S = 5, tbs = {23};
      break;
    case Phase::kChunkCached:
      S = 6, tbs = {21}, s.new_rows = false;
      break;
    case Phase::kDecode:
      tbs = {33, 16, 7};
      break;
    case Phase::kDecodeCached:
      tbs = {25, 12}, s.new_rows = false;
      break;
    case Phase::kPackedChunk:
      S = 4, tbs = {13};
      break;
    case Phase::kLongFirstPrompt:
      S = 96, tbs = {96, 77};
      break;
    case Phase::kLongChunk:
      S = 70, tbs = {150};
      break;
    case Phase::kLongChunkCached:
      S = 40, tbs = {130}, s.new_rows = false;
      break;
  }
  s.capacity = *std::max_element(tbs.begin(), tbs.end());
  const bool first_prompt = S == s.capacity;
  for (size_t b = 0; b < tbs.size(); ++b) {
    s.seqs.push_back({static_cast<int64_t>(b) * S, S, first_prompt ? 0 : tbs[b] - S, tbs[b]});
  }
  s.rows_total = static_cast<int64_t>(tbs.size()) * S;
  s.name = c.name;
  return s;
}

std::vector<PagedCase> PagedCases() {
  std::vector<PagedCase> v;
  size_t index = 0, long_groups = 0;
  for (const TypePair& types : AllTypes()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (int phase = 0; phase < kPhases; ++phase) {
        for (int64_t block_size : kBlockSizes) {
          // The long phases (the time of the suite) take one block size each, in turn.
          const bool long_phase = phase >= static_cast<int>(Phase::kLongFirstPrompt);
          if (long_phase && block_size != kBlockSizes[long_groups % 3]) {
            ++index;
            continue;
          }
          PagedCase c;
          c.types = types;
          c.layout = layout;
          c.phase = static_cast<Phase>(phase);
          c.block_size = block_size;
          c.index = index++;
          Scenario s = PagedScenario(c);
          c.name = BaseName(s) + "_" + PhaseName(c.phase) + Shape(s);
          v.push_back(c);
        }
        if (phase >= static_cast<int>(Phase::kLongFirstPrompt)) ++long_groups;
      }
    }
  }
  // The long phases once more over unquantized caches, flash-eligible, in blocks of 32 and 64.
  for (FloatFormat t : {FloatFormat::kFloat32, FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (int phase = static_cast<int>(Phase::kLongFirstPrompt); phase < kPhases; ++phase) {
        for (int64_t block_size : kLongBlockSizes) {
          PagedCase c;
          c.types = {t, Cache::kT};
          c.layout = layout;
          c.phase = static_cast<Phase>(phase);
          c.block_size = block_size;
          c.flash_eligible = true;
          c.index = index++;
          Scenario s = PagedScenario(c);
          c.name = BaseName(s) + "_" + PhaseName(c.phase) + "_flash_eligible" + Shape(s);
          v.push_back(c);
        }
      }
    }
  }
  return v;
}

class PagedGqaNonCausal : public testing::TestWithParam<PagedCase> {};

TEST_P(PagedGqaNonCausal, MatchesReferenceOnEveryKernel) {
  const PagedCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  Scenario s = PagedScenario(c);
  BuildScenario(s, rng);
  PlantLaterKey(s);
  ComputeReferences(s);
  const int64_t B = static_cast<int64_t>(s.seqs.size()), S = s.seqs[0].rows;
  const int64_t N = s.N, Nkv = s.Nkv, H = s.H, L = s.new_rows ? S : 0;
  const attnrt_dtype dq = block_quant::QueryDtype(s.t);
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
  if (c.phase == Phase::kPackedChunk) {
    std::vector<float> packed;  // per token: the query heads, the key heads, the value heads
    for (int64_t r = 0; r < B * S; ++r) {
      packed.insert(packed.end(), s.q.begin() + r * N * H, s.q.begin() + (r + 1) * N * H);
      packed.insert(packed.end(), s.k_new.begin() + r * Nkv * H,
                    s.k_new.begin() + (r + 1) * Nkv * H);
      packed.insert(packed.end(), s.v_new.begin() + r * Nkv * H,
                    s.v_new.begin() + (r + 1) * Nkv * H);
    }
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, (N + 2 * Nkv) * H});
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_QUERY], s.t, packed);
  } else {
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_QUERY], s.t, s.q);
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, L, Nkv * H});
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, L, Nkv * H});
    const size_t n = static_cast<size_t>(B * L * Nkv * H);
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_KEY], s.t,
                       std::vector<float>(s.k_new.begin(), s.k_new.begin() + n));
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_VALUE], s.t,
                       std::vector<float>(s.v_new.begin(), s.v_new.begin() + n));
  }
  std::vector<int32_t> seqlens;
  for (const Seq& q : s.seqs) seqlens.push_back(static_cast<int32_t>(q.tb - 1));
  in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(seqlens, {B});
  in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.capacity)}, {1});
  in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.paging.table, {B, s.paging.slots});
  if (s.f.sink) {
    in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK], s.t, s.sink);
  }
  if (HasScales(s.cache)) {
    in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = Scales(s.kc);
    in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = Scales(s.vc);
  }
  RunEverywhere(s, ATTNRT_OP_PAGED_GQA, in, ATTNRT_PAGED_GQA_INPUT_KEY_CACHE,
                ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, {B, S, N * H}, rng);
}

std::string PagedName(const testing::TestParamInfo<PagedCase>& p) {
  return Sanitized(p.param.name);
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaNonCausal, testing::ValuesIn(PagedCases()), PagedName);

// ---- the varlen op
// ------------------------------------------------------------------------------
constexpr int64_t kPadding = 2;  // engine padding rows after query_start_loc[B]
// (q_len, T_b) of the batches: mixed, a decode, a first prefill, a chunk after 16 cached tokens, a
// decode at a block boundary of 16, a chunk after 6, a one-token first prefill; long, a long chunk
// after 60 and a long first prefill (several query and key tiles) with a decode and a short chunk;
// decodes only (the split-KV decode path).
enum class Batch { kMixed, kLong, kDecodes };
const std::vector<std::pair<int64_t, int64_t>> kMixedBatch = {{1, 23}, {6, 6}, {5, 21},
                                                              {1, 17}, {3, 9}, {1, 1}};
const std::vector<std::pair<int64_t, int64_t>> kLongBatch = {{1, 23}, {70, 130}, {40, 40}, {3, 9}};
const std::vector<std::pair<int64_t, int64_t>> kDecodeBatch = {{1, 23}, {1, 17}, {1, 1}};

const char* BatchName(Batch b) {
  return b == Batch::kMixed ? "_mixed_" : b == Batch::kLong ? "_long_" : "_decodes_";
}
const std::vector<std::pair<int64_t, int64_t>>& Sequences(Batch b) {
  return b == Batch::kMixed ? kMixedBatch : b == Batch::kLong ? kLongBatch : kDecodeBatch;
}

enum class KvMode { kNewRowsSlots, kNewRows, kAbsent };

struct VarlenCase {
  std::string name;
  TypePair types;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  KvMode mode = KvMode::kNewRows;
  Batch batch = Batch::kMixed;
  int64_t block_size = 16;
  bool flash_eligible = false;
  size_t index = 0;
};

void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.name; }

Scenario VarlenScenario(const VarlenCase& c) {
  Scenario s;
  s.t = c.types.t;
  s.cache = c.types.cache;
  s.layout = c.layout;
  Rotate(s, c.index + 10000);
  if (c.flash_eligible) MakeFlashEligible(s);
  s.block_size = c.block_size;
  int64_t first = 0;
  for (const auto& [q_len, tb] : Sequences(c.batch)) {
    s.seqs.push_back({first, q_len, tb - q_len, tb});
    first += q_len;
    s.capacity = std::max(s.capacity, tb);
  }
  s.rows_total = first + kPadding;
  s.new_rows = c.mode != KvMode::kAbsent;
  s.name = c.name;
  return s;
}

std::vector<VarlenCase> VarlenCases() {
  std::vector<VarlenCase> v;
  size_t index = 0, long_groups = 0;
  const std::pair<KvMode, const char*> modes[] = {{KvMode::kNewRowsSlots, "new_rows_slot_mapping"},
                                                  {KvMode::kNewRows, "new_rows"},
                                                  {KvMode::kAbsent, "kv_absent"}};
  for (const TypePair& types : AllTypes()) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (Batch batch : {Batch::kMixed, Batch::kLong, Batch::kDecodes}) {
        for (const auto& [mode, mode_name] : modes) {
          for (int64_t block_size : kBlockSizes) {
            // The long batch (the time of the suite) takes one block size each, in turn.
            if (batch == Batch::kLong && block_size != kBlockSizes[long_groups % 3]) {
              ++index;
              continue;
            }
            VarlenCase c;
            c.types = types;
            c.layout = layout;
            c.mode = mode;
            c.batch = batch;
            c.block_size = block_size;
            c.index = index++;
            Scenario s = VarlenScenario(c);
            c.name = BaseName(s) + BatchName(batch) + mode_name + Shape(s);
            v.push_back(c);
          }
          if (batch == Batch::kLong) ++long_groups;
        }
      }
    }
  }
  // The long batch once more over unquantized caches, flash-eligible, in blocks of 32 and 64.
  for (FloatFormat t : {FloatFormat::kFloat32, FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
    for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
      for (const auto& [mode, mode_name] : modes) {
        for (int64_t block_size : kLongBlockSizes) {
          VarlenCase c;
          c.types = {t, Cache::kT};
          c.layout = layout;
          c.mode = mode;
          c.batch = Batch::kLong;
          c.block_size = block_size;
          c.flash_eligible = true;
          c.index = index++;
          Scenario s = VarlenScenario(c);
          c.name = BaseName(s) + "_long_flash_eligible_" + mode_name + Shape(s);
          v.push_back(c);
        }
      }
    }
  }
  return v;
}

class PagedGqaVarlenNonCausal : public testing::TestWithParam<VarlenCase> {};

TEST_P(PagedGqaVarlenNonCausal, MatchesReferenceOnEveryKernel) {
  const VarlenCase& c = GetParam();
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("case " + c.name);
  std::printf("[case] %s ATTNRT_TEST_SEED=%llu\n", c.name.c_str(),
              static_cast<unsigned long long>(BaseSeed()));
  std::mt19937_64 rng(TestSeed());
  Scenario s = VarlenScenario(c);
  BuildScenario(s, rng);
  PlantLaterKey(s);
  ComputeReferences(s);
  const int64_t B = static_cast<int64_t>(s.seqs.size()), tokens = s.rows_total;
  const int64_t N = s.N, Nkv = s.Nkv, H = s.H;
  const attnrt_dtype dq = block_quant::QueryDtype(s.t);
  std::vector<int32_t> start = {0}, seq_lens;
  std::vector<int64_t> slots(static_cast<size_t>(tokens), -1);
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const Seq& q = s.seqs[b];
    start.push_back(static_cast<int32_t>(q.first + q.rows));
    seq_lens.push_back(static_cast<int32_t>(q.tb));
    for (int64_t i = 0; i < q.rows; ++i) {
      const int64_t j = q.offset + i;
      slots[static_cast<size_t>(q.first + i)] =
          int64_t{s.paging.table[b * static_cast<size_t>(s.paging.slots) +
                                 static_cast<size_t>(j / s.block_size)]} *
              s.block_size +
          j % s.block_size;
    }
  }
  std::vector<Tensor> in(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Tensor(dq, {tokens, N * H});
  block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY], s.t, s.q);
  if (s.new_rows) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = Tensor(dq, {tokens, Nkv * H});
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = Tensor(dq, {tokens, Nkv * H});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY], s.t, s.k_new);
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE], s.t, s.v_new);
    if (c.mode == KvMode::kNewRowsSlots) {
      in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = I64(slots, {tokens});
    }
  }
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = I32(start, {B + 1});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = I32(seq_lens, {B});
  in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = I32(s.paging.table, {B, s.paging.slots});
  if (s.f.sink) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK] = Tensor(dq, {N});
    block_quant::Store(in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK], s.t, s.sink);
  }
  if (HasScales(s.cache)) {
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE] = Scales(s.kc);
    in[ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE] = Scales(s.vc);
  }
  RunEverywhere(s, ATTNRT_OP_PAGED_GQA_VARLEN, in, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE,
                ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE, {tokens, N * H}, rng);
}

std::string VarlenName(const testing::TestParamInfo<VarlenCase>& p) {
  return Sanitized(p.param.name);
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaVarlenNonCausal, testing::ValuesIn(VarlenCases()),
                         VarlenName);

// ---- errors
// -------------------------------------------------------------------------------------
// causal = 0 with local_window_size != -1: INVALID_ARGUMENT at op creation, naming
// local_window_size, in the paged op for every cache type; the varlen op takes a window of
// non-causal attention (ABI 1.10) of at least one key, and refuses 0 and -2 so. The same
// attributes with causal = 1, and causal = 0 with local_window_size = -1, are accepted.
TEST(PagedGqaNonCausalErrors, LocalWindowIsInvalidArgument) {
  attnrt_runtime* runtime = mixed_kv::RuntimeFor("");
  ASSERT_NE(runtime, nullptr);
  for (int32_t op_kind : {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN}) {
    for (Cache cache : {Cache::kT, Cache::kInt8Channel, Cache::kInt4Tensor, Cache::kQ4_0}) {
      for (int32_t window : {-1, 0, 1, 5, 64, -2}) {
        SCOPED_TRACE(std::string(attnrt_op_kind_name(op_kind)) + " " + CacheName(cache) +
                     " local_window_size " + std::to_string(window));
        for (int32_t causal : {0, 1}) {
          attnrt_paged_gqa_attributes a =
              Attributes(cache, 4, 2, 16, ATTNRT_PAGED_KV_LAYOUT_BSNH, Features{}, causal);
          a.gqa.local_window_size = window;
          attnrt_op* raw = nullptr;
          const attnrt_status st = attnrt_op_create(runtime, op_kind, &a, &raw);
          const std::string message = st == ATTNRT_OK ? "" : LastError(st);
          OpPtr op(raw);
          const bool varlen_window = op_kind == ATTNRT_OP_PAGED_GQA_VARLEN && window >= 1;
          if (causal == 1 || window == -1 || varlen_window) {
            EXPECT_EQ(st, ATTNRT_OK) << "causal " << causal << ": " << message;
          } else {
            EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << "causal 0: " << message;
            EXPECT_TRUE(ContainsI(message, "local_window_size")) << message;
            EXPECT_NE(message.find(std::to_string(window)), std::string::npos) << message;
            EXPECT_EQ(raw, nullptr);
          }
        }
      }
    }
  }
}

// local_window_right (ABI 1.10): the varlen op's, with causal = 0 (any value >= -1); with causal =
// 1 only -1 and 0 (FlashAttention's causal right edge); the paged op refuses anything but -1 (and 0
// with causal = 1); below -1 is refused everywhere. Refusals name local_window_right and the value.
TEST(PagedGqaNonCausalErrors, LocalWindowRight) {
  attnrt_runtime* runtime = mixed_kv::RuntimeFor("");
  ASSERT_NE(runtime, nullptr);
  for (int32_t op_kind : {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN}) {
    for (int32_t causal : {0, 1}) {
      for (int32_t right : {-1, 0, 3, 1000, -2}) {
        SCOPED_TRACE(std::string(attnrt_op_kind_name(op_kind)) + " causal " +
                     std::to_string(causal) + " local_window_right " + std::to_string(right));
        attnrt_paged_gqa_attributes a =
            Attributes(Cache::kT, 4, 2, 16, ATTNRT_PAGED_KV_LAYOUT_BSNH, Features{}, causal);
        a.local_window_right = right;
        attnrt_op* raw = nullptr;
        const attnrt_status st = attnrt_op_create(runtime, op_kind, &a, &raw);
        const std::string message = st == ATTNRT_OK ? "" : LastError(st);
        OpPtr op(raw);
        const bool accepted = right == -1 || (causal == 1 && right == 0) ||
                              (op_kind == ATTNRT_OP_PAGED_GQA_VARLEN && causal == 0 && right >= 0);
        if (accepted) {
          EXPECT_EQ(st, ATTNRT_OK) << message;
        } else {
          EXPECT_EQ(st, ATTNRT_ERROR_INVALID_ARGUMENT) << message;
          EXPECT_NE(message.find("local_window_right"), std::string::npos) << message;
          EXPECT_NE(message.find(std::to_string(right)), std::string::npos) << message;
        }
      }
    }
  }
}

// A caller built for ABI 1.9 passes struct_size 104, its sizeof, which covers 4 bytes of padding
// it never wrote (here 0x7F each): the attributes' reserved field; local_window_right, past them,
// is -1 for it, so its non-causal calls stay unbounded.
TEST(PagedGqaNonCausalErrors, AbiNineCallerPaddingIsNotRead) {
  attnrt_runtime* runtime = mixed_kv::RuntimeFor("");
  ASSERT_NE(runtime, nullptr);
  static_assert(offsetof(attnrt_paged_gqa_attributes, local_window_right) == 104);
  attnrt_paged_gqa_attributes a =
      Attributes(Cache::kT, 4, 2, 16, ATTNRT_PAGED_KV_LAYOUT_BSNH, Features{}, 0);
  std::memset(&a.reserved, 0x7F, sizeof a.reserved);
  a.local_window_right = 5;  // past the 1.9 struct: not read
  a.struct_size = 104;
  for (int32_t op_kind : {ATTNRT_OP_PAGED_GQA, ATTNRT_OP_PAGED_GQA_VARLEN}) {
    attnrt_op* raw = nullptr;
    const attnrt_status st = attnrt_op_create(runtime, op_kind, &a, &raw);
    OpPtr op(raw);
    EXPECT_EQ(st, ATTNRT_OK) << attnrt_op_kind_name(op_kind) << ": "
                             << (st == ATTNRT_OK ? "" : LastError(st));
  }
}

}  // namespace
}  // namespace non_causal
}  // namespace attnrt_test
