// The kernels of this build's CPU plugin (cpu_x86 or cpu_arm, ATTNRT_TEST_CPU_PLUGIN) that the
// paged tests pin by name: the ISA suffixes of its exact flash and naive kernels, widest first,
// and the prefix of its parameterized suites (CpuX86, CpuArm).
#pragma once

#include <string>
#include <vector>

namespace attnrt_test {

#if defined(__aarch64__)
#define ATTNRT_TEST_CPU_SUITE CpuArm
// gqa.flash.<isa> and paged_gqa.flash.<isa>.
inline std::vector<std::string> CpuFlashIsas() { return {"neon", "scalar"}; }
// gqa.naive.<isa> and paged_gqa.naive.<isa>.
inline std::vector<std::string> CpuNaiveIsas() { return {"neon", "scalar"}; }
#else
#define ATTNRT_TEST_CPU_SUITE CpuX86
inline std::vector<std::string> CpuFlashIsas() { return {"amx", "avx512", "avx2", "scalar"}; }
inline std::vector<std::string> CpuNaiveIsas() { return {"avx512", "avx2", "scalar"}; }
#endif

// INSTANTIATE_TEST_SUITE_P whose prefix may be a macro (ATTNRT_TEST_CPU_SUITE): expanded before
// gtest pastes it into its names.
#define ATTNRT_TEST_INSTANTIATE_SUITE_P(prefix, ...) INSTANTIATE_TEST_SUITE_P(prefix, __VA_ARGS__)

// "<plugin>.<rest>": a kernel of this build's CPU plugin ("gqa.flash.scalar" ->
// "cpu_x86.gqa.flash.scalar").
inline std::string CpuKernel(const std::string& rest) {
  return std::string(ATTNRT_TEST_CPU_PLUGIN) + "." + rest;
}

}  // namespace attnrt_test
