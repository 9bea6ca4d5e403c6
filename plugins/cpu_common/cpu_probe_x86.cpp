// CPU probe: cpuinfo for what the CPU has, XCR0 for what the OS lets us use. CPUID alone is not
// enough: a kernel that boots with AVX disabled (or a hypervisor hiding the state) faults on the
// first VEX instruction even though CPUID advertises AVX2.
#include <cpuid.h>
#include <cpuinfo.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "cpu_probe_x86.h"
#include "cpuinfo_facts.h"

namespace attnrt::cpu {
namespace {

// XCR0 state-component bits (Intel SDM vol. 1, 13.1).
constexpr uint64_t kXcr0SseAvx = (1u << 1) | (1u << 2);              // XMM, upper YMM
constexpr uint64_t kXcr0Avx512 = (1u << 5) | (1u << 6) | (1u << 7);  // opmask, ZMM_Hi256, Hi16_ZMM
constexpr uint64_t kXcr0Amx = (1u << 17) | (1u << 18);               // XTILECFG, XTILEDATA
// CPUID.(EAX=7,ECX=0):EDX (Intel SDM vol. 2A, CPUID).
constexpr unsigned kCpuidAmxBf16 = 1u << 22;
constexpr unsigned kCpuidAmxTile = 1u << 24;
// Linux arch_prctl codes (arch/x86/include/uapi/asm/prctl.h) and the tile data's state component.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// AVX512_BF16 (VCVTNE2PS2BF16, VCVTNEPS2BF16, VDPBF16PS): CPUID.(EAX=7, ECX=1):EAX bit 5 (Intel
// SDM vol. 2, CPUID). Read here rather than through cpuinfo, whose older releases do not know the
// bit; subleaf 1 exists only when the maximum basic leaf is at least 7 and CPUID.(7, 0):EAX (the
// highest subleaf of leaf 7) is at least 1.
bool CpuidAvx512Bf16() {
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  if (eax < 1) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax & (1u << 5)) != 0;
}

bool CpuidAmxBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & kCpuidAmxBf16) != 0 && (edx & kCpuidAmxTile) != 0;
}

// XCR0, or 0 when the OS has not enabled XSAVE (XGETBV would then raise #UD).
uint64_t ReadXcr0() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return 0;
  uint32_t low = 0, high = 0;
  // Inline asm rather than _xgetbv: the intrinsic needs -mxsave, and this file stays baseline ISA.
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

}  // namespace

CpuFeatures ProbeCpu() {
  CpuFeatures f;
  const uint64_t xcr0 = ReadXcr0();
  const bool os_avx = (xcr0 & kXcr0SseAvx) == kXcr0SseAvx;
  const bool os_avx512 = os_avx && (xcr0 & kXcr0Avx512) == kXcr0Avx512;
  const CpuinfoBasics basics = InitializeCpuinfo();
  if (basics.ok) {
    f.sse42 = cpuinfo_has_x86_sse4_2();
    f.avx2 = os_avx && cpuinfo_has_x86_avx2();
    f.fma = os_avx && cpuinfo_has_x86_fma3();
    f.f16c = os_avx && cpuinfo_has_x86_f16c();
    f.avx512f = os_avx512 && cpuinfo_has_x86_avx512f();
    f.avx512bw = os_avx512 && cpuinfo_has_x86_avx512bw();
    f.avx512vl = os_avx512 && cpuinfo_has_x86_avx512vl();
    f.avx512vbmi = os_avx512 && cpuinfo_has_x86_avx512vbmi();
  }
  // The bf16 instructions use the AVX-512 registers: usable only where the OS saves ZMM state.
  const bool cpuid_bf16 = CpuidAvx512Bf16();
  f.avx512bf16 = os_avx512 && cpuid_bf16;
  const bool cpuid_amx = CpuidAmxBf16();
  f.amx_bf16 = f.avx512f && (xcr0 & kXcr0Amx) == kXcr0Amx && cpuid_amx;
  AppendIsa(f.isa, f.sse42, "sse4.2");
  AppendIsa(f.isa, f.avx2, "avx2");
  AppendIsa(f.isa, f.fma, "fma");
  AppendIsa(f.isa, f.f16c, "f16c");
  AppendIsa(f.isa, f.avx512f, "avx512f");
  AppendIsa(f.isa, f.avx512bw, "avx512bw");
  AppendIsa(f.isa, f.avx512vl, "avx512vl");
  AppendIsa(f.isa, f.avx512vbmi, "avx512vbmi");
  AppendIsa(f.isa, f.avx512bf16, "avx512bf16");
  AppendIsa(f.isa, f.amx_bf16, "amx_bf16");
  f.facts = CpuFacts(f.isa, basics,
                     {{"os_avx_state", os_avx ? "enabled" : "disabled"},
                      {"os_avx512_state", os_avx512 ? "enabled" : "disabled"},
                      {"avx512_bf16", f.avx512bf16 ? "usable"
                                      : cpuid_bf16 ? "no ZMM state enabled by the OS"
                                                   : "not reported by CPUID"},
                      {"amx_bf16", f.amx_bf16  ? "usable"
                                   : cpuid_amx ? "no tile state (or AVX-512) enabled by the OS"
                                               : "not reported by CPUID"}});
  return f;
}

std::string AmxTileDataReason() {
  // A function-local static: asked once per process, by the first thread that gets here.
  static const std::string reason = [] {
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return std::string();
    return "the OS refused this process the AMX tile data, an XCR0 feature (arch_prctl "
           "ARCH_REQ_XCOMP_PERM: " +
           std::string(std::strerror(errno)) + ")";
  }();
  return reason;
}

}  // namespace attnrt::cpu
