// CPU probe of AArch64 (cpu_arm, sparse_mla): cpuinfo (Debian's libcpuinfo0:arm64). On Linux it
// reads the ISA flags from AT_HWCAP/AT_HWCAP2, which the kernel sets only for features it enables
// for user space, so no separate OS check is needed (unlike XCR0 on x86); cache sizes come from
// sysfs and are 0 where the kernel does not describe them (then the flash kernels use a fixed L2
// size).
#include <cpuinfo.h>

#include <string>

#include "cpu_probe_arm.h"
#include "cpuinfo_facts.h"

namespace attnrt::cpu {

CpuFeatures ProbeCpu() {
  CpuFeatures f;
  const CpuinfoBasics basics = InitializeCpuinfo();
  if (basics.ok) {
    f.neon = cpuinfo_has_arm_neon();
    f.fp16_arith = cpuinfo_has_arm_neon_fp16_arith();
    f.dotprod = cpuinfo_has_arm_neon_dot();
    f.bf16 = cpuinfo_has_arm_bf16();
    f.sve = cpuinfo_has_arm_sve();
  }
  AppendIsa(f.isa, f.neon, "neon");
  AppendIsa(f.isa, f.fp16_arith, "fp16");
  AppendIsa(f.isa, f.dotprod, "dotprod");
  AppendIsa(f.isa, f.bf16, "bf16");
  AppendIsa(f.isa, f.sve, "sve");
  f.facts = CpuFacts(f.isa, basics);
  return f;
}

}  // namespace attnrt::cpu
