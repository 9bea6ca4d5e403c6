// CPU feature probe of the cpu_x86 plugin. Compiled for the baseline x86-64 ISA: it runs before any
// kernel is chosen, on whatever CPU loaded the plugin.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnrt::cpu {

// What the kernels may use here. A SIMD flag is set only when the CPU reports the instructions AND
// the OS saves their register state (XCR0); all are false when cpuinfo could not initialize.
struct CpuFeatures {
  bool sse42 = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512bf16 = false;
  // Comma-separated names of the flags above that are set, e.g. "sse4.2,avx2,fma,f16c".
  std::string isa;
  // Probe facts in report order: isa, cpu, cores, l1d/l2/l3_cache_bytes, os_avx_state,
  // os_avx512_state, and "cpuinfo" when its initialization failed.
  std::vector<std::pair<std::string, std::string>> facts;
};

// Queries cpuinfo and XCR0. Never fails: on a CPU or OS cpuinfo cannot read, only the baseline
// remains.
CpuFeatures ProbeCpu();

}  // namespace attnrt::cpu
