// The x86 probe's AVX512_BF16 fact, black-box through the runtime, against the kernel's own view of
// the CPU: Linux lists "avx512_bf16" among the /proc/cpuinfo flags when CPUID.(EAX=7, ECX=1):EAX
// bit 5 is set and the AVX-512 state is enabled (it clears the AVX-512 flags otherwise). Both
// plugins that probe (cpu_x86, sparse_mla) must agree with it, in the avx512_bf16 fact and in the
// isa list the kernels' supports() use.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

// Whether the first "flags" line of /proc/cpuinfo has `flag`; false in *readable when the file
// cannot be read.
bool CpuinfoFlag(const std::string& flag, bool* readable) {
  std::ifstream in("/proc/cpuinfo");
  *readable = static_cast<bool>(in);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word;
    while (words >> word) {
      if (word == flag) return true;
    }
    return false;
  }
  *readable = false;
  return false;
}

TEST(CpuProbe, Avx512Bf16FactMatchesTheKernelsCpuFlags) {
  bool readable = false;
  const bool expected = CpuinfoFlag("avx512_bf16", &readable);
  if (!readable) GTEST_SKIP() << "/proc/cpuinfo has no flags line here";
  RuntimePtr runtime = CreateRuntime();
  int checked = 0;
  for (const auto& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != "cpu_x86" && plugin.name != "sparse_mla") continue;
    std::string fact, isa;
    for (const auto& [key, value] : plugin.facts) {
      if (key == "avx512_bf16") fact = value;
      if (key == "isa") isa = "," + value + ",";
    }
    SCOPED_TRACE(plugin.name + ": avx512_bf16 = '" + fact + "', isa " + isa);
    EXPECT_EQ(fact == "usable", expected) << "/proc/cpuinfo avx512_bf16: " << expected;
    EXPECT_FALSE(fact.empty());
    EXPECT_EQ(isa.find(",avx512bf16,") != std::string::npos, expected);
    ++checked;
  }
  EXPECT_EQ(checked, 2) << "the cpu_x86 and sparse_mla plugins";
}

// AVX512-VBMI (gqa.flash.amx's float8 table decoding): "avx512vbmi" in the cpu_x86 isa list exactly
// when /proc/cpuinfo lists it (Linux clears the AVX-512 flags when the OS does not save ZMM state).
TEST(CpuProbe, Avx512VbmiInTheIsaListMatchesCpuinfo) {
  bool readable = false;
  const bool expected = CpuinfoFlag("avx512vbmi", &readable);
  if (!readable) GTEST_SKIP() << "/proc/cpuinfo has no flags line here";
  RuntimePtr runtime = CreateRuntime();
  int checked = 0;
  for (const auto& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != "cpu_x86") continue;
    std::string isa;
    for (const auto& [key, value] : plugin.facts) {
      if (key == "isa") isa = "," + value + ",";
    }
    SCOPED_TRACE("isa " + isa);
    EXPECT_EQ(isa.find(",avx512vbmi,") != std::string::npos, expected)
        << "/proc/cpuinfo avx512vbmi: " << expected;
    ++checked;
  }
  EXPECT_EQ(checked, 1) << "the cpu_x86 plugin";
}

}  // namespace
}  // namespace attnrt_test
