// CPU feature probe of AArch64 (attnrt_cpu_probe, linked by cpu_arm and sparse_mla; include it
// through cpu_probe.h). Compiled for the baseline AArch64 ISA (Armv8.0-A with Advanced SIMD): it
// runs before any kernel is chosen, on whatever CPU loaded the plugin.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnrt::cpu {

// What the CPU offers, as cpuinfo reports it (on Linux cpuinfo takes the ISA flags from the
// kernel's AT_HWCAP/AT_HWCAP2, so a feature is listed only when the OS exposes it to user space).
// All are false when cpuinfo could not initialize.
struct CpuFeatures {
  bool neon = false;        // Advanced SIMD (ASIMD): the gqa.*.neon kernels
  bool fp16_arith = false;  // FEAT_FP16: half-precision arithmetic
  bool dotprod = false;     // FEAT_DotProd: SDOT/UDOT int8 dot products
  bool bf16 = false;        // FEAT_BF16
  bool sve = false;
  // Comma-separated names of the flags above that are set, e.g. "neon,fp16,dotprod".
  std::string isa;
  // Probe facts in report order: isa, cpu, cores, l1d/l2/l3_cache_bytes, and "cpuinfo" when its
  // initialization failed.
  std::vector<std::pair<std::string, std::string>> facts;
};

// Queries cpuinfo. Never fails: where cpuinfo cannot read the CPU, only the scalar kernels remain.
CpuFeatures ProbeCpu();

}  // namespace attnrt::cpu
