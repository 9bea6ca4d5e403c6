// Split-KV decode (docs/sparse-mla.md): when the metadata's work items (rows × head groups) are
// fewer than the runtime's threads, the kernels split each row's key tiles across threads and merge
// the parts' states. Checked per kernel with the runtime's num_threads option at 2 and 4: every
// split call within CANN's tolerance of the float64 reference (attn_out and softmax_lse), split
// and unsplit (1 thread) calls equal up to the merge's reassociation, and the sinks (finite, -inf,
// +inf, NaN) and rows that see no key keeping their defined results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

// One decode row (B = 1, BSND), CSA with a 256-key window and top-k 1024 over 1200 compressed
// tokens: about 1280 keys, ten tiles of 128, so every part of a 4-way split has keys. 4 heads make
// one head group (one work item), 8 heads two.
SparseMlaSpec SplitSpec(int64_t heads, int32_t threads) {
  SparseMlaSpec s;
  s.scenario = ATTNRT_SPARSE_MLA_CSA;
  s.quant_mode = 1;
  s.num_heads = heads;
  s.s1 = {1};
  s.s2 = {4800};
  s.q_extra = 0;
  s.topk = 1024;
  s.ori_win_left = 255;
  s.block_size = 64;
  s.sinks = true;
  s.lse = true;
  s.num_threads = threads;
  return s;
}

// The split call against the unsplit one: every rounded P is the same (each part starts from the
// golden's running max), so only the merge's reassociation differs, which can move the final bf16
// rounding by one step: every element within 2^-7 relative plus 1e-6, lse within 1e-5 + 1e-6 |lse|
// (equal where infinite or NaN). Merging finished parts by their LSE instead (each part's P rounded
// against its own max) moves elements by up to 1e-2.
void ExpectSameAsUnsplit(const SparseMlaResult& got, const SparseMlaResult& want) {
  ASSERT_EQ(got.out.size(), want.out.size());
  ASSERT_EQ(got.lse.size(), want.lse.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.out.size(); ++i) {
    const double g = got.out[i], w = want.out[i];
    if (!(std::isnan(g) && std::isnan(w)) && !(std::fabs(g - w) <= 1e-6 + std::fabs(w) / 128.0) &&
        bad++ < 4) {
      ADD_FAILURE() << "attn_out[" << i << "]: split " << g << ", unsplit " << w;
    }
  }
  EXPECT_EQ(bad, 0);
  for (size_t i = 0; i < got.lse.size(); ++i) {
    const double g = got.lse[i], w = want.lse[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "lse " << i;
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << "lse " << i;
    } else {
      EXPECT_NEAR(g, w, 1e-5 + 1e-6 * std::fabs(w)) << "lse " << i;
    }
  }
}

class SparseMlaSplitKv
    : public ::testing::TestWithParam<std::tuple<std::string, int64_t, int32_t>> {};

TEST_P(SparseMlaSplitKv, SplitDecodeMatchesTheReferenceAndTheUnsplitCall) {
  const auto& [kernel, heads, threads] = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase split(SplitSpec(heads, threads), rng);
  const SparseMlaResult got = RunSparseMlaCall(split, kernel);
  // CANN's tolerance, on all but a fifth of one head's elements: with 4 or 8 heads and one row, a
  // P rounded the other way moves a whole head's near-cancelling elements (OneRowCloseFraction).
  std::string report;
  EXPECT_TRUE(CompareWithReference(split, &report, nullptr, OneRowCloseFraction(heads))) << report;
  // The same inputs on one thread (no split).
  std::mt19937_64 rng1(TestSeed());
  SparseMlaCase whole(SplitSpec(heads, 1), rng1);
  ExpectSameAsUnsplit(got, RunSparseMlaCall(whole, kernel));
}

TEST_P(SparseMlaSplitKv, NonFiniteSinksSurviveTheSplit) {
  const auto& [kernel, heads, threads] = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(SplitSpec(heads, threads), rng);
  Tensor sinks = c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS];  // keeps the storage after the reset
  float* sink = sinks.f32();
  sink[0] = -std::numeric_limits<float>::infinity();
  sink[1] = std::numeric_limits<float>::infinity();
  sink[2] = std::numeric_limits<float>::quiet_NaN();
  const SparseMlaResult got = RunSparseMlaCall(c, kernel);
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS] = Tensor();
  const SparseMlaResult none = RunSparseMlaCall(c, kernel);
  // Head 0 (-inf sink) equals the call without sinks, head 1 takes the +inf sink, head 2 is NaN.
  EXPECT_EQ(got.lse[0], none.lse[0]);
  EXPECT_EQ(got.lse[1], kInf);
  EXPECT_TRUE(std::isnan(got.lse[2]));
  for (int64_t d = 0; d < kD; ++d) {
    ASSERT_EQ(got.out[d], none.out[d]) << d;
    ASSERT_EQ(got.out[kD + d], 0.0) << d;
    ASSERT_TRUE(std::isnan(got.out[2 * kD + d])) << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaSplitKv,
                         ::testing::Combine(::testing::ValuesIn(SparseMlaKernels()),
                                            ::testing::Values(int64_t{4}, int64_t{8}),
                                            ::testing::Values(2, 4)),
                         [](const auto& x) {
                           return KernelTestName(std::get<0>(x.param)) + "_heads" +
                                  std::to_string(std::get<1>(x.param)) + "_threads" +
                                  std::to_string(std::get<2>(x.param));
                         });

// Without a split (items >= threads), every thread count gives the same bits: the metadata groups
// heads differently per thread count, and a head's lanes compute the same whatever its neighbours.
class SparseMlaThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseMlaThreads, UnsplitCallsAreIdenticalAcrossThreadCounts) {
  const std::string& kernel = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::vector<SparseMlaResult> results;
  for (int32_t threads : {1, 2, 3}) {
    std::mt19937_64 rng(TestSeed());
    SparseMlaSpec spec;  // 16 heads, two batches of 2 and 3 rows: at least 5 items
    spec.scenario = ATTNRT_SPARSE_MLA_CSA;
    spec.num_threads = threads;
    SparseMlaCase c(spec, rng);
    results.push_back(RunSparseMlaCall(c, kernel));
  }
  for (size_t k = 1; k < results.size(); ++k) {
    ASSERT_EQ(results[k].out.size(), results[0].out.size());
    for (size_t i = 0; i < results[0].out.size(); ++i) {
      ASSERT_EQ(std::memcmp(&results[k].out[i], &results[0].out[i], sizeof(double)), 0) << i;
    }
    for (size_t i = 0; i < results[0].lse.size(); ++i) {
      ASSERT_EQ(std::memcmp(&results[k].lse[i], &results[0].lse[i], sizeof(double)), 0) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaThreads, ::testing::ValuesIn(SparseMlaKernels()),
                         [](const auto& x) { return KernelTestName(x.param); });

// A second query row that takes no part (seqused_q 1 of 2): 2 items on 4 threads, each split in
// two; the empty row reports the sink alone (lse = sink, attn_out 0), -inf without sinks.
class SparseMlaSplitKvEmptyRow : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseMlaSplitKvEmptyRow, EmptyRowsReportTheSinkAlone) {
  const std::string& kernel = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaSpec spec = SplitSpec(4, 4);
  spec.seqused_q = true;
  spec.q_extra = 1;
  SparseMlaCase c(spec, rng);
  const SparseMlaResult got = RunSparseMlaCall(c, kernel);
  std::string report;
  EXPECT_TRUE(CompareWithReference(c, &report, nullptr, 0.98)) << report;
  const float* sink = c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS].f32();
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_EQ(got.lse[4 + h], static_cast<double>(sink[h])) << "head " << h;
    for (int64_t d = 0; d < kD; ++d) ASSERT_EQ(got.out[(4 + h) * kD + d], 0.0) << d;
  }
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS] = Tensor();
  const SparseMlaResult none = RunSparseMlaCall(c, kernel);
  EXPECT_TRUE(CompareWithReference(c, &report, nullptr, 0.98)) << report;
  for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(none.lse[4 + h], -kInf) << "head " << h;
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaSplitKvEmptyRow, ::testing::ValuesIn(SparseMlaKernels()),
                         [](const auto& x) { return KernelTestName(x.param); });

}  // namespace
}  // namespace attnrt_test
