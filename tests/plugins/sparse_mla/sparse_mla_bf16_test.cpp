// The bf16 kernels' documented departures (docs/sparse-mla.md, bf16 kernels and Arm): VDPBF16PS
// (avx512_bf16) and TDPBF16PS (amx_bf16) read bf16 denormals as zero, so a key whose values are
// bf16 denormals scores as if those values were 0; and both decline float16 queries, naming the
// dtype, so that the fp32 kernels run them. The expected values come from the float64 reference
// (tests/common/sparse_mla_reference.h) on the same buffers, with the denormals kept and with them
// replaced by zeros.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "sparse_mla_case.h"

namespace attnrt_test {
namespace {

const std::string kFp32Kernel = "sparse_mla.sparse_mla.flash.avx512";
constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;
constexpr int kDenormalDims = 8;

bool KernelRuns(const std::string& kernel) {
  for (const auto& name : SparseMlaKernels()) {
    if (name == kernel) return SparseMlaKernelRuns(name);
  }
  return false;
}

class SparseMlaBf16 : public ::testing::TestWithParam<std::string> {};

// quant_mode 3 (raw bf16 ori tokens), SWA, BSND: dims [0, 8) of every ori token hold bf16
// denormals (±m · 2^-133, m in [32, 127]) and every query has ±2^127 there, so each of those
// products is a normal fp32 value of magnitude 2^-1 .. 2^0 and moves the scores by up to ±8 before
// the softmax scale.
SparseMlaCase DenormalCase(std::mt19937_64& rng) {
  SparseMlaSpec s;
  s.scenario = ATTNRT_SPARSE_MLA_SWA;
  s.quant_mode = 3;
  s.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  s.s2 = {40, 70};
  s.ori_win_left = 31;
  SparseMlaCase c(s, rng);
  std::uniform_int_distribution<int> mantissa(32, 127), sign(0, 1);
  Tensor& kv = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV];
  auto* k = static_cast<uint16_t*>(kv.data());
  for (int64_t t = 0; t < kv.numel() / kD; ++t) {
    for (int d = 0; d < kDenormalDims; ++d) {
      k[t * kD + d] = static_cast<uint16_t>((sign(rng) ? 0x8000 : 0) | mantissa(rng));
    }
  }
  Tensor& qt = c.in()[ATTNRT_SPARSE_MLA_INPUT_Q];
  auto* q = static_cast<uint16_t*>(qt.data());
  for (int64_t r = 0; r < qt.numel() / kD; ++r) {
    for (int d = 0; d < kDenormalDims; ++d) q[r * kD + d] = sign(rng) ? 0xFF00 : 0x7F00;  // ±2^127
  }
  return c;
}

TEST_P(SparseMlaBf16, DenormalKeyValuesReadAsZero) {
  const std::string& bf16_kernel = GetParam();
  if (!KernelRuns(bf16_kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaCase c = DenormalCase(rng);
  std::string error, chosen, report;

  // The fp32 kernel keeps the denormals: it matches the reference on the buffers as they are.
  ASSERT_EQ(RunSparseMla(c, kFp32Kernel, &error, &chosen), ATTNRT_OK) << error;
  EXPECT_TRUE(CompareWithReference(c, &report)) << report;

  ASSERT_EQ(RunSparseMla(c, bf16_kernel, &error, &chosen), ATTNRT_OK) << error;
  EXPECT_EQ(chosen, bf16_kernel);
  // ... the bf16 kernel does not (the test's premise: the denormals matter) ...
  EXPECT_FALSE(CompareWithReference(c, &report)) << report;

  // ... but matches the reference with those values replaced by zeros.
  Tensor& kv = c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV];
  auto* k = static_cast<uint16_t*>(kv.data());
  for (int64_t t = 0; t < kv.numel() / kD; ++t) {
    for (int d = 0; d < kDenormalDims; ++d) k[t * kD + d] = 0;
  }
  EXPECT_TRUE(CompareWithReference(c, &report)) << report;
}

TEST_P(SparseMlaBf16, DeclinesFloat16Queries) {
  const std::string& bf16_kernel = GetParam();
  if (!KernelRuns(bf16_kernel)) GTEST_SKIP() << "this CPU lacks the kernel's instructions";
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  SparseMlaSpec s;
  s.quant_mode = 3;
  s.fp16 = true;
  SparseMlaCase c(s, rng);
  std::string error, chosen;
  // Pinned, the kernel's refusal is the error; unpinned, the runtime picks an fp32 kernel.
  EXPECT_NE(RunSparseMla(c, bf16_kernel, &error, &chosen), ATTNRT_OK);
  EXPECT_NE(error.find("float16"), std::string::npos) << error;
  ASSERT_EQ(RunSparseMla(c, "", &error, &chosen), ATTNRT_OK) << error;
  EXPECT_EQ(chosen, kFp32Kernel);
  std::string report;
  EXPECT_TRUE(CompareWithReference(c, &report)) << report;
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseMlaBf16,
                         ::testing::Values("sparse_mla.sparse_mla.flash.avx512_bf16",
                                           "sparse_mla.sparse_mla.flash.amx_bf16"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return KernelTestName(p.param);
                         });

}  // namespace
}  // namespace attnrt_test
