// softmax_lse as a log-sum-exp merge uses it (docs/sparse-mla.md): the keys of every row split into
// disjoint shards (split-KV, or keys sharded across ranks), each shard run as its own call, the
// partial results merged by lse = log(sum exp(lse_i)), out = sum exp(lse_i - lse) out_i, must give
// the unsplit call's result. A shard where a row sees no key (an empty shard, or batch 1 whose
// keys all sit in one shard) must report lse -inf so that the merge weights it 0; the sinks join
// one shard only. Also: non-finite sinks (-inf: no sink; +inf: attn_out 0 and lse +inf; NaN: NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

const std::vector<std::string>& kKernels = SparseMlaKernels();

// Two batches of 4 query rows, 40 and 2 ori keys, every key visible (ori_mask_mode 0): in batch 1
// rows 0 and 1 see no key at all (queries aligned to the end of 2 keys).
SparseMlaSpec MergeSpec(bool sinks) {
  SparseMlaSpec s;
  s.scenario = ATTNRT_SPARSE_MLA_SWA;
  s.quant_mode = 1;
  s.num_heads = 8;
  s.s1 = {4, 4};
  s.s2 = {40, 2};
  s.q_extra = 0;
  s.ori_mask_mode = 0;
  s.ori_win_left = -1;
  s.ori_win_right = -1;
  s.sinks = sinks;
  s.lse = true;
  return s;
}

class SparseMlaMerge : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(SparseMlaMerge, ShardsMergedByLseEqualTheWholeCall) {
  const auto& [kernel, sinks] = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(MergeSpec(sinks), rng);
  const SparseMlaResult whole = RunSparseMlaCall(c, kernel);
  std::string report;
  ASSERT_TRUE(CompareWithReference(c, &report)) << report;

  // Shards: batch 0 keys [0, 24) with batch 1's 2 keys (and the sinks); batch 0 keys [24, 40)
  // moved to the front, batch 1 empty; and a shard empty in both batches.
  const Tensor ori = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV].Clone();
  const Tensor sink_tensor = c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS];
  const size_t token = static_cast<size_t>(ori.shape()[3]);
  std::vector<SparseMlaResult> shards;
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] = I32({24, 2}, {2});
  shards.push_back(RunSparseMlaCall(c, kernel));
  Tensor moved = ori.Clone();
  auto* base = static_cast<uint8_t*>(moved.data());
  std::memmove(base, base + 24 * token, 16 * token);
  c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV] = moved;
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] = I32({16, 0}, {2});
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS] = Tensor();
  shards.push_back(RunSparseMlaCall(c, kernel));
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] = I32({0, 0}, {2});
  shards.push_back(RunSparseMlaCall(c, kernel));
  if (sinks) c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS] = sink_tensor;

  // The empty shard: every row sees no key.
  for (double lse : shards[2].lse) ASSERT_EQ(lse, -kInf);
  for (double o : shards[2].out) ASSERT_EQ(o, 0.0);

  const int64_t heads = 8;
  const int64_t cells = static_cast<int64_t>(whole.lse.size());
  int64_t bad = 0;
  for (int64_t k = 0; k < cells; ++k) {
    double m = -kInf;
    for (const SparseMlaResult& s : shards) m = std::max(m, s.lse[k]);
    double sum = 0.0;
    for (const SparseMlaResult& s : shards) sum += std::exp(s.lse[k] - (m == -kInf ? 0.0 : m));
    const double lse = m == -kInf ? -kInf : m + std::log(sum);
    const std::string where =
        "row " + std::to_string(k / heads) + ", head " + std::to_string(k % heads);
    if (std::isinf(whole.lse[k])) {
      EXPECT_EQ(lse, whole.lse[k]) << where;
    } else {
      EXPECT_NEAR(lse, whole.lse[k], 1e-4 + 2e-5 * std::fabs(whole.lse[k])) << where;
    }
    for (int64_t d = 0; d < kD; ++d) {
      double o = 0.0;
      for (const SparseMlaResult& s : shards) {
        if (s.lse[k] != -kInf) o += std::exp(s.lse[k] - lse) * s.out[k * kD + d];
      }
      const double want = whole.out[k * kD + d];
      // Each shard rounds its P (relative to its own max) and its output to bf16 on its own: up to
      // 2^-9 of the values' magnitude (about 2) per term, so 3e-2 absolute. The LSE check above is
      // the sharp one (a wrong weight for an empty shard moves it by far more than 1e-4).
      if (!(std::fabs(o - want) <= 3e-2 + 1.6e-2 * std::fabs(want)) && bad++ < 4) {
        ADD_FAILURE() << where << ", d " << d << ": merged " << o << ", whole " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaMerge,
                         ::testing::Combine(::testing::ValuesIn(kKernels), ::testing::Bool()),
                         [](const auto& x) {
                           return KernelTestName(std::get<0>(x.param)) +
                                  (std::get<1>(x.param) ? "_sinks" : "_no_sinks");
                         });

// Non-finite sinks, each on its own head: -inf is no sink, +inf takes all the weight, NaN is NaN;
// rows that see no key report the sink alone.
class SparseMlaSinks : public ::testing::TestWithParam<std::string> {};

TEST_P(SparseMlaSinks, NonFiniteSinksAreDefined) {
  const std::string& kernel = GetParam();
  SCOPED_TRACE(SeedTrace());
  if (!SparseMlaKernelRuns(kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c(MergeSpec(true), rng);
  Tensor sinks = c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS];  // keeps the storage after the reset below
  float* sink = sinks.f32();
  sink[0] = -std::numeric_limits<float>::infinity();
  sink[1] = std::numeric_limits<float>::infinity();
  sink[2] = std::numeric_limits<float>::quiet_NaN();
  const SparseMlaResult got = RunSparseMlaCall(c, kernel);
  // Head 0 with a -inf sink equals the call without sinks.
  c.in()[ATTNRT_SPARSE_MLA_INPUT_SINKS] = Tensor();
  const SparseMlaResult none = RunSparseMlaCall(c, kernel);
  const int64_t heads = 8;
  const int64_t q_rows = static_cast<int64_t>(got.lse.size()) / heads;
  for (int64_t r = 0; r < q_rows; ++r) {
    const std::string where = "row " + std::to_string(r);
    const bool empty = r >= 4 && r < 6;  // batch 1 rows 0 and 1: no key
    EXPECT_EQ(got.lse[r * heads + 0], none.lse[r * heads + 0]) << where;
    EXPECT_EQ(got.lse[r * heads + 1], kInf) << where;
    EXPECT_TRUE(std::isnan(got.lse[r * heads + 2])) << where;
    if (empty) {
      EXPECT_EQ(none.lse[r * heads + 0], -kInf) << where;
    }
    for (int64_t d = 0; d < kD; ++d) {
      EXPECT_EQ(got.out[(r * heads + 0) * kD + d], none.out[(r * heads + 0) * kD + d]) << where;
      EXPECT_EQ(got.out[(r * heads + 1) * kD + d], 0.0) << where;
      EXPECT_TRUE(std::isnan(got.out[(r * heads + 2) * kD + d])) << where;
    }
    // Head 3's finite sink: in an empty row, the sink alone (lse = sink, attn_out 0).
    if (empty) {
      EXPECT_EQ(got.lse[r * heads + 3], sink[3]) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaSinks, ::testing::ValuesIn(kKernels),
                         [](const auto& x) { return KernelTestName(x.param); });

}  // namespace
}  // namespace attnrt_test
