// CPU feature probe of x86-64 (attnrt_cpu_probe, linked by cpu_x86 and sparse_mla; include it
// through cpu_probe.h). Compiled for the baseline x86-64 ISA: it runs before any kernel is chosen,
// on whatever CPU loaded the plugin.
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
  bool avx512vbmi = false;  // VPERMB/VPERMI2B (byte-table lookups), with OS-enabled ZMM state
  bool avx512bf16 = false;  // CPUID.(EAX=7, ECX=1):EAX[5] read directly, and ZMM state saved
  // AMX-TILE and AMX-BF16 (CPUID.(7,0):EDX bits 24 and 22) with the tile state enabled in XCR0
  // (bits 17 and 18) and AVX-512 usable. Linux still requires each process to ask before it
  // touches the tile data: AmxTileDataReason().
  bool amx_bf16 = false;
  // Comma-separated names of the flags above that are set, e.g. "sse4.2,avx2,fma,f16c".
  std::string isa;
  // Probe facts in report order: isa, cpu, cores, l1d/l2/l3_cache_bytes, os_avx_state,
  // os_avx512_state, avx512_bf16 and amx_bf16 ("usable", or why not), and "cpuinfo" when its
  // initialization failed.
  std::vector<std::pair<std::string, std::string>> facts;
};

// Queries cpuinfo and XCR0. Never fails: on a CPU or OS cpuinfo cannot read, only the baseline
// remains.
CpuFeatures ProbeCpu();

// Empty when this process may use the AMX tile data: asks Linux once (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA) and remembers the answer; otherwise why not. Call
// only when CpuFeatures::amx_bf16 is set.
std::string AmxTileDataReason();

}  // namespace attnrt::cpu
