// topk_value_mode 3 (global slot ids, ABI 1.6) and PA_BBND caches with a block stride, for every
// sparse MLA kernel, against the float64 reference (tests/common/sparse_mla_reference.h; its slot
// addressing follows abi/attnrt/ops/sparse_mla.h). Acceptance as the conformance suite: rtol 2^-7,
// atol 1e-4 on >= 99.5% of attn_out, every element written, softmax_lse in fp32. A strided cache
// must give the compact cache's result bit for bit; the bytes around its blocks are NaN-producing
// or hold other blocks, so a kernel that reads with the wrong stride or offset shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

namespace ref = attnrt::testref;
const std::vector<std::string>& kKernels = SparseMlaKernels();
constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

bool DeclinesFp16(const SparseMlaSpec& spec, const std::string& kernel) {
  return spec.fp16 && kernel.find("bf16") != std::string::npos;
}

// Runs the case on `kernel` and compares it with the reference; false (with a failure recorded)
// when it did not run.
bool RunAndCompare(SparseMlaCase& c, const std::string& kernel, double fraction = 0.995) {
  c.Poison();
  std::string error, chosen;
  const attnrt_status st = RunSparseMla(c, kernel, &error, &chosen);
  EXPECT_EQ(st, ATTNRT_OK) << error;
  if (st != ATTNRT_OK) return false;
  EXPECT_EQ(chosen, kernel);
  std::string report;
  EXPECT_TRUE(CompareWithReference(c, &report, nullptr, fraction)) << report;
  ::testing::Test::RecordProperty("report", report);
  return true;
}

void Check(const SparseMlaSpec& spec, const std::string& kernel, double fraction = 0.995) {
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(spec, rng);
  if (DeclinesFp16(spec, kernel)) {
    std::string error;
    EXPECT_NE(RunSparseMla(c, kernel, &error), ATTNRT_OK);
    return;
  }
  RunAndCompare(c, kernel, fraction);
}

// attn_out and softmax_lse bytes of the last call.
std::vector<uint8_t> OutputBytes(SparseMlaCase& c) {
  std::vector<uint8_t> bytes;
  for (Tensor& t : c.out()) {
    if (t.empty()) continue;
    const auto* p = static_cast<const uint8_t*>(t.data());
    bytes.insert(bytes.end(), p, p + t.bytes());
  }
  return bytes;
}

// ---- the reference's slot addressing against its block-table addressing
// -----------------------------------------------------------------------------------------------

// A topk_value_mode 1 problem with block tables and masks, restated as slot lists: each row's
// visible ori positions and selected cmp indices (SparseMlaGetRowKeys) mapped through the block
// tables to global slots, with -1 entries spread between them. The reference gives the same bits in
// both forms (same keys in the same order, hence the same tiles), also reading the caches through
// strided views, and rejects an out-of-range slot.
TEST(SparseMlaSlotsReference, AgreesWithBlockTableAddressing) {
  SCOPED_TRACE(SeedTrace());
  for (int32_t quant_mode : {1, 2, 3}) {
    for (int32_t scenario : {ATTNRT_SPARSE_MLA_SWA, ATTNRT_SPARSE_MLA_CSA}) {
      SCOPED_TRACE("quant_mode " + std::to_string(quant_mode) + " scenario " +
                   std::to_string(scenario));
      std::mt19937_64 rng(TestSeed() + quant_mode * 2 + scenario);
      SparseMlaSpec s;
      s.scenario = scenario;
      s.quant_mode = quant_mode;
      s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
      s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
      s.seqused_q = true;
      s.s1 = {4, 9};
      s.s2 = {300, 6};  // batch 1: the first rows see no key
      s.ori_win_left = 140;
      s.topk = 200;
      s.block_size = 8;
      s.q_scale = 2.0f;
      SparseMlaCase c(s, rng);
      const ref::SparseMlaRefInputs tables = c.RefInputs();
      ref::SparseMlaRefOutputs want;
      ASSERT_TRUE(ref::SparseMlaReference(tables, &want)) << want.error;
      const int64_t rows = tables.q_t;
      const int64_t width = 2 * 160;  // > visible keys + the -1 entries
      std::vector<int32_t> ori_idx(rows * width, -1), cmp_idx(rows * width, -1);
      int64_t keyed_rows = 0;
      for (int64_t b = 0; b < tables.b; ++b) {
        for (int64_t i = 0; i < tables.seqused_q[b]; ++i) {
          ref::SparseMlaRowKeys keys;
          std::string error;
          ASSERT_TRUE(ref::SparseMlaGetRowKeys(tables, b, i, &keys, &error)) << error;
          if (!keys.valid) continue;
          const int64_t row = tables.cu_seqlens_q[b] + i;
          auto slot = [&](const int32_t* table, int64_t cols, int64_t pos) {
            return table[b * cols + pos / s.block_size] * s.block_size + pos % s.block_size;
          };
          int64_t k = 0;
          for (int64_t pos = keys.ori_lo; pos < keys.ori_hi; ++pos) {
            if (rng() % 4 == 0) ++k;  // a -1 entry
            ori_idx[row * width + k++] = static_cast<int32_t>(
                slot(tables.ori_block_table, tables.ori_block_table_cols, pos));
          }
          ASSERT_LE(k, width);
          k = 0;
          for (int64_t pos : keys.cmp) {
            if (rng() % 4 == 0) ++k;
            cmp_idx[row * width + k++] = static_cast<int32_t>(
                slot(tables.cmp_block_table, tables.cmp_block_table_cols, pos));
          }
          ASSERT_LE(k, width);
          keyed_rows += keys.ori_hi > keys.ori_lo || !keys.cmp.empty() ? 1 : 0;
        }
      }
      ASSERT_GT(keyed_rows, 4);
      ref::SparseMlaRefInputs slots = tables;
      slots.topk_value_mode = 3;
      slots.ori_mask_mode = slots.cmp_mask_mode = 0;
      slots.ori_block_table = slots.cmp_block_table = nullptr;
      slots.seqused_ori_kv = slots.seqused_cmp_kv = slots.cmp_residual_kv = nullptr;
      slots.ori_sparse_indices = ori_idx.data();
      slots.ori_kv_w = width;
      if (scenario == ATTNRT_SPARSE_MLA_CSA) {
        slots.cmp_sparse_indices = cmp_idx.data();
        slots.cmp_kv_k = width;
      }
      ref::SparseMlaRefOutputs got;
      ASSERT_TRUE(ref::SparseMlaReference(slots, &got)) << got.error;
      EXPECT_TRUE(got.attn_out_bits == want.attn_out_bits);
      EXPECT_TRUE(got.softmax_lse == want.softmax_lse);
      // The same caches as strided views (other layers' blocks and 0xFF around them).
      UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, 16 * 1024, 3, 2, 576);
      if (scenario == ATTNRT_SPARSE_MLA_CSA) {
        UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_CMP_KV, 8 * 1024, 2, 1, 1152);
      }
      const ref::SparseMlaRefInputs viewed = c.RefInputs();
      slots.ori_kv = viewed.ori_kv;
      slots.ori_kv_block_stride = viewed.ori_kv_block_stride;
      slots.cmp_kv = viewed.cmp_kv;
      slots.cmp_kv_block_stride = viewed.cmp_kv_block_stride;
      ASSERT_TRUE(ref::SparseMlaReference(slots, &got)) << got.error;
      EXPECT_TRUE(got.attn_out_bits == want.attn_out_bits);
      // Out-of-range slots are refused, naming the entry.
      const int64_t ori_slots = tables.ori_kv_block_nums * s.block_size;
      for (int32_t bad : {static_cast<int32_t>(ori_slots), -2}) {
        ori_idx[width + 3] = bad;
        EXPECT_FALSE(ref::SparseMlaReference(slots, &got));
        EXPECT_NE(got.error.find("ori_sparse_indices[1][3]"), std::string::npos) << got.error;
        ori_idx[width + 3] = -1;
      }
    }
  }
}

// ---- slot lists: scenarios, quant modes, q layouts
// -----------------------------------------------------------------

using SlotParam = std::tuple<int32_t, int32_t, int32_t, std::string>;

class SparseMlaSlots : public ::testing::TestWithParam<SlotParam> {};

TEST_P(SparseMlaSlots, MatchesReference) {
  const auto& [scenario, quant_mode, layout_q, kernel] = GetParam();
  SparseMlaSpec s = SlotsSpec(scenario, quant_mode);
  s.layout_q = layout_q;
  s.seqused_q = layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  s.s1 = {3, 5};
  s.s2 = {150, 90};
  s.ori_topk = 24;
  s.topk = 40;
  s.q_scale = 2.0f;
  Check(s, kernel);
}

std::string SlotName(const ::testing::TestParamInfo<SlotParam>& info) {
  const auto& [scenario, quant_mode, layout_q, kernel] = info.param;
  return std::string(scenario == ATTNRT_SPARSE_MLA_SWA ? "SWA" : "CSA") + "_mode" +
         std::to_string(quant_mode) +
         (layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND ? "_TND" : "_BSND") + "_" +
         KernelTestName(kernel);
}

INSTANTIATE_TEST_SUITE_P(All, SparseMlaSlots,
                         ::testing::Combine(::testing::Values(ATTNRT_SPARSE_MLA_SWA,
                                                              ATTNRT_SPARSE_MLA_CSA),
                                            ::testing::Values(1, 2, 3),
                                            ::testing::Values(ATTNRT_SPARSE_MLA_LAYOUT_BSND,
                                                              ATTNRT_SPARSE_MLA_LAYOUT_TND),
                                            ::testing::ValuesIn(kKernels)),
                         SlotName);

// ---- edge rows, fp16, threads, negative controls
// -------------------------------------------------------------------

class SparseMlaSlotVariants : public ::testing::TestWithParam<std::string> {};

// Each query row gets one pattern (ori row / cmp row): -1 first, in the middle, last; every entry
// -1 on one side or both (no key: zero output, lse -inf or the sink); one slot repeated W times;
// the last slot of the cache and slot 0. With and without sinks (one of them -inf).
TEST_P(SparseMlaSlotVariants, CraftedSlotRows) {
  SCOPED_TRACE(SeedTrace());
  const std::string& kernel = GetParam();
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  for (bool sinks : {true, false}) {
    SCOPED_TRACE(sinks ? "with sinks" : "without sinks");
    std::mt19937_64 rng(TestSeed() + (sinks ? 1 : 0));
    SparseMlaSpec s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, 2);
    s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
    s.s1 = {8, 8};
    s.s2 = {100, 60};
    s.ori_topk = 6;
    s.topk = 6;
    s.sinks = sinks;
    SparseMlaCase c(s, rng);
    if (sinks)
      c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS].f32()[3] = -std::numeric_limits<float>::infinity();
    const int64_t ori_slots = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV].shape()[0] * s.block_size;
    const int64_t cmp_slots = c.in()[ATTNRT_SPARSE_MLA_INPUT_CMP_KV].shape()[0] * s.block_size;
    Tensor& ori_idx = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
    Tensor& cmp_idx = c.in()[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
    const int64_t rows = ori_idx.shape()[0];
    std::vector<int64_t> empty_rows;
    for (int64_t row = 0; row < rows; ++row) {
      int32_t* o = ori_idx.i32() + row * 6;
      int32_t* k = cmp_idx.i32() + row * 6;
      const int32_t a = static_cast<int32_t>(rng() % ori_slots);
      const int32_t b = static_cast<int32_t>(rng() % cmp_slots);
      switch (row % 8) {
        case 0:  // -1 first / -1 last
          for (int j = 0; j < 6; ++j) o[j] = j == 0 ? -1 : (a + j) % ori_slots;
          for (int j = 0; j < 6; ++j) k[j] = j == 5 ? -1 : (b + j) % cmp_slots;
          break;
        case 1:  // -1 in the middle on both sides
          for (int j = 0; j < 6; ++j) o[j] = j == 2 || j == 3 ? -1 : (a + 7 * j) % ori_slots;
          for (int j = 0; j < 6; ++j) k[j] = j == 1 ? -1 : (b + 5 * j) % cmp_slots;
          break;
        case 2:  // no ori key, cmp keys
          std::fill(o, o + 6, -1);
          for (int j = 0; j < 6; ++j) k[j] = (b + j) % cmp_slots;
          break;
        case 3:  // ori keys, no cmp key
          for (int j = 0; j < 6; ++j) o[j] = (a + j) % ori_slots;
          std::fill(k, k + 6, -1);
          break;
        case 4:  // no key at all
          std::fill(o, o + 6, -1);
          std::fill(k, k + 6, -1);
          empty_rows.push_back(row);
          break;
        case 5:  // one slot W times on each side
          std::fill(o, o + 6, a);
          std::fill(k, k + 6, b);
          break;
        case 6:  // the last and the first slot of each cache
          for (int j = 0; j < 6; ++j) o[j] = j % 2 ? 0 : static_cast<int32_t>(ori_slots - 1);
          for (int j = 0; j < 6; ++j) k[j] = j % 2 ? static_cast<int32_t>(cmp_slots - 1) : 0;
          break;
        default:  // a single ori key after -1 entries, a single cmp key before them
          std::fill(o, o + 6, -1);
          o[5] = a;
          std::fill(k, k + 6, -1);
          k[0] = b;
          break;
      }
    }
    if (!RunAndCompare(c, kernel)) continue;
    // Rows without any key: exactly zero output, lse -inf without sinks, the sink with them.
    const auto* out =
        static_cast<const uint16_t*>(c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].data());
    const float* lse = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].f32();
    for (int64_t row : empty_rows) {
      for (int64_t h = 0; h < s.num_heads; ++h) {
        for (int64_t d = 0; d < kD; ++d) {
          ASSERT_EQ(out[(row * s.num_heads + h) * kD + d] & 0x7FFF, 0) << "row " << row;
        }
        const float want = sinks ? c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS].f32()[h]
                                 : -std::numeric_limits<float>::infinity();
        EXPECT_EQ(lse[row * s.num_heads + h], want) << "row " << row << " head " << h;
      }
    }
  }
}

TEST_P(SparseMlaSlotVariants, Fp16QueriesAndNoLse) {
  SparseMlaSpec s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, 3);
  s.fp16 = true;
  s.lse = false;
  s.sinks = false;
  s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  s.ori_topk = 20;
  s.topk = 33;
  Check(s, GetParam());
}

// Few rows and many threads: the kernels split each row's tiles (W + K = 640 keys, five tiles)
// and merge; the result is within CANN's tolerance of the reference at 1, 2 and 4 threads, on all
// but a fifth of one head's elements as in sparse_mla_split_test: with 8 heads and one row, a P
// rounded the other way moves a whole head's near-cancelling elements (OneRowCloseFraction).
TEST_P(SparseMlaSlotVariants, SplitAcrossThreads) {
  for (int32_t threads : {1, 2, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    SparseMlaSpec s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, 1);
    s.num_heads = 8;
    s.s1 = {1};
    s.q_extra = 0;
    s.s2 = {2400};
    s.block_size = 64;
    s.ori_topk = 128;
    s.topk = 512;
    s.num_threads = threads;
    Check(s, GetParam(), OneRowCloseFraction(s.num_heads));
  }
}

// Negative controls: the kernel's result is within tolerance of the reference, and beyond it for a
// reference whose rows each lose one slot, or that reads a strided cache with the compact stride.
TEST_P(SparseMlaSlotVariants, NegativeControls) {
  SCOPED_TRACE(SeedTrace());
  const std::string& kernel = GetParam();
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaSpec s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, 2);
  s.q_scale = 3.0f;  // peaked softmax
  s.block_size = 8;
  s.ori_topk = 16;
  s.topk = 16;
  SparseMlaCase c(s, rng);
  UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, 9 * 576, 2, 1, 1152);  // 8 * 584 bytes
  ASSERT_TRUE(RunAndCompare(c, kernel));
  std::string report;
  // Each row's first ori slot dropped.
  Tensor& idx = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
  const std::vector<int32_t> saved(idx.i32(), idx.i32() + idx.numel());
  for (int64_t row = 0; row < idx.numel() / s.ori_topk; ++row) {
    int32_t* r = idx.i32() + row * s.ori_topk;
    for (int64_t k = 0; k < s.ori_topk; ++k) {
      if (r[k] != -1) {
        r[k] = -1;
        break;
      }
    }
  }
  EXPECT_FALSE(CompareWithReference(c, &report)) << "one slot dropped: " << report;
  std::copy(saved.begin(), saved.end(), idx.i32());
  EXPECT_TRUE(CompareWithReference(c, &report)) << report;
  // The reference reading the strided buffer with the compact block stride.
  ref::SparseMlaRefInputs wrong = c.RefInputs();
  wrong.ori_kv_block_stride = 0;
  ref::SparseMlaRefOutputs expected;
  ASSERT_TRUE(ref::SparseMlaReference(wrong, &expected)) << expected.error;
  const auto* bits =
      static_cast<const uint16_t*>(c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].data());
  int64_t differ = 0;
  for (size_t k = 0; k < expected.attn_out_bits.size(); ++k) {
    differ += bits[k] != expected.attn_out_bits[k] ? 1 : 0;
  }
  EXPECT_GT(differ, static_cast<int64_t>(expected.attn_out_bits.size() / 4));
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaSlotVariants, ::testing::ValuesIn(kKernels),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return KernelTestName(p.param);
                         });

// ---- DeepSeek-V4 decode as vLLM passes it: TND q with cu_seqlens_q [0, T], quant_mode 2 block-
// planar caches of 64-token blocks as strided views of a shared buffer, a 128-slot window per row,
// K compressed slots (K = 0: SWA, no cmp_kv), sinks with -inf (no sink) for head 0
// -----------------------------------------------------------------------------------------------

using DeepSeekParam = std::tuple<int64_t, int64_t, std::string>;

class SparseMlaSlotsDeepSeek : public ::testing::TestWithParam<DeepSeekParam> {};

TEST_P(SparseMlaSlotsDeepSeek, WindowAndCompressedSlots) {
  const auto& [heads, topk, kernel] = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaSpec s = SlotsSpec(topk > 0 ? ATTNRT_SPARSE_MLA_CSA : ATTNRT_SPARSE_MLA_SWA, 2);
  s.num_heads = heads;
  s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  s.block_size = 64;
  s.cmp_ratio = 4;
  s.ori_topk = 128;
  s.topk = topk;
  // At least ~64 (row, head) outputs (see SparseMlaHeads in the conformance suite).
  const int32_t rows = static_cast<int32_t>(std::max<int64_t>(2, 64 / heads));
  s.s1 = {rows};
  s.q_extra = 0;
  s.s2 = {2600};
  SparseMlaCase c(s, rng);
  if (s.sinks)
    c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS].f32()[0] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(RunAndCompare(c, kernel));
  const std::vector<uint8_t> compact = OutputBytes(c);
  // vLLM: pages of the shared buffer padded to a multiple of 576 bytes, 3 layers interleaved.
  const int64_t block_bytes = s.block_size * ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;
  const int64_t page = (block_bytes + 575) / 576 * 576;
  UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, page, 3, 1, 0);
  if (topk > 0) UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_CMP_KV, page, 3, 2, 576);
  ASSERT_TRUE(RunAndCompare(c, kernel));
  EXPECT_TRUE(OutputBytes(c) == compact) << "strided caches changed the result";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseMlaSlotsDeepSeek,
    ::testing::Combine(::testing::Values(int64_t{1}, int64_t{16}, int64_t{64}, int64_t{128}),
                       ::testing::Values(int64_t{0}, int64_t{512}), ::testing::ValuesIn(kKernels)),
    [](const ::testing::TestParamInfo<DeepSeekParam>& p) {
      return "heads" + std::to_string(std::get<0>(p.param)) + "_topk" +
             std::to_string(std::get<1>(p.param)) + "_" + KernelTestName(std::get<2>(p.param));
    });

// ---- strided PA_BBND caches in every quant mode, with slot lists and with block tables
// -----------------------------------------------------------------------------------------------

using StrideParam = std::tuple<int32_t, int32_t, std::string>;

class SparseMlaStridedCache : public ::testing::TestWithParam<StrideParam> {};

TEST_P(SparseMlaStridedCache, EqualsCompactBitForBit) {
  const auto& [quant_mode, topk_value_mode, kernel] = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaSpec s;
  if (topk_value_mode == 3) {
    s = SlotsSpec(ATTNRT_SPARSE_MLA_CSA, quant_mode);
    s.ori_topk = 20;
  } else {
    s.scenario = ATTNRT_SPARSE_MLA_CSA;
    s.quant_mode = quant_mode;
    s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
    s.topk_value_mode = topk_value_mode;
  }
  s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  s.block_size = 8;
  s.s1 = {3, 4};
  s.s2 = {70, 45};
  s.topk = 24;
  SparseMlaCase c(s, rng);
  ASSERT_TRUE(RunAndCompare(c, kernel));
  const std::vector<uint8_t> compact = OutputBytes(c);
  auto block_bytes = [&](int input) {
    return static_cast<int64_t>(c.in()[input].bytes()) / c.in()[input].shape()[0];
  };
  const int64_t ori_page = (block_bytes(ATTNRT_SPARSE_MLA_INPUT_ORI_KV) / 576 + 1) * 576;
  const int64_t cmp_page = (block_bytes(ATTNRT_SPARSE_MLA_INPUT_CMP_KV) / 576 + 1) * 576;
  struct Layout {
    const char* what;
    int64_t layers, ori_layer, cmp_layer, lead, dim2_stride;
  };
  const Layout layouts[] = {
      {"one layer, padded pages, offset", 1, 0, 0, 1152, -1},
      {"four layers interleaved", 4, 3, 1, 0, -1},
      {"two layers, odd stride on the extent-1 dim", 2, 1, 0, 576, 12345},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.what);
    UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ori_page, l.layers, l.ori_layer, l.lead,
                        l.dim2_stride);
    UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_CMP_KV, cmp_page, l.layers, l.cmp_layer,
                        l.lead + 576, l.dim2_stride);
    if (!RunAndCompare(c, kernel)) continue;
    EXPECT_TRUE(OutputBytes(c) == compact) << "strided caches changed the result";
  }
  // Only the ori cache strided (the cmp one compact).
  c.ClearKvViews();
  UseInterleavedCache(c, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ori_page, 2, 0, 0);
  if (RunAndCompare(c, kernel)) {
    EXPECT_TRUE(OutputBytes(c) == compact);
  }
}

INSTANTIATE_TEST_SUITE_P(All, SparseMlaStridedCache,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 2, 3),
                                            ::testing::ValuesIn(kKernels)),
                         [](const ::testing::TestParamInfo<StrideParam>& p) {
                           return "mode" + std::to_string(std::get<0>(p.param)) +
                                  "_topk_value_mode" + std::to_string(std::get<1>(p.param)) + "_" +
                                  KernelTestName(std::get<2>(p.param));
                         });

}  // namespace
}  // namespace attnrt_test
