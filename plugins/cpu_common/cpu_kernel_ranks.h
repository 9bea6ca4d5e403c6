// The priorities of the CPU plugins' kernels (docs/plugins.md, Names and ranking), defined once for
// cpu_x86 and cpu_arm: an algorithm's base rank plus its ISA's bonus. Flash ranks above naive and,
// within each, a wider ISA above a narrower one; the naive kernels accept every problem of their
// op, so a case a flash kernel declines still runs. Each plugin's kernel_list.cpp is the only user.
#pragma once

#include <cstdint>

namespace attnrt::cpu::rank {

inline constexpr int32_t kNaive = 100;
inline constexpr int32_t kFlash = 200;

// ISA bonuses. NEON takes AVX2's place (128-bit vectors with FMA); AMX-BF16 serves bfloat16
// problems only (flash).
inline constexpr int32_t kScalar = 0;
inline constexpr int32_t kAvx2 = 20;
inline constexpr int32_t kNeon = 20;
inline constexpr int32_t kAvx512 = 40;
inline constexpr int32_t kAmx = 50;

// Approximate kernels rank below every exact one (naive.scalar accepts everything), so the runtime
// never chooses one by itself: only a pin (ATTNRT_KERNEL or attnrt_runtime_options::kernel) opts
// in.
inline constexpr int32_t kApproximate = kNaive - 10;

}  // namespace attnrt::cpu::rank
