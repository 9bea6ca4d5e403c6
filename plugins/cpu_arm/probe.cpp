// CPU probe of cpu_arm: cpuinfo (Debian's libcpuinfo0:arm64). On Linux it reads the ISA flags from
// AT_HWCAP/AT_HWCAP2, which the kernel sets only for features it enables for user space, so no
// separate OS check is needed (unlike XCR0 on x86); cache sizes come from sysfs and are 0 where the
// kernel does not describe them (then the flash kernels use a fixed L2 size).
#include <cpuinfo.h>
#include <dlfcn.h>

#include <string>

#include "probe.h"

namespace attnrt::cpu {
namespace {

std::string CacheBytes(const cpuinfo_cache* cache) {
  return std::to_string(cache != nullptr ? cache->size : 0u);
}

void AppendIsa(std::string& list, bool usable, const char* name) {
  if (!usable) return;
  if (!list.empty()) list += ',';
  list += name;
}

// cpuinfo builds process-lifetime tables it can never free (cpuinfo_deinitialize is a no-op in the
// Debian 12 library). Were libcpuinfo unloaded together with this plugin, they would leak, and
// LeakSanitizer would fail every test that unloads plugins; RTLD_NODELETE keeps it loaded.
void PinCpuinfo() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cpuinfo_isa), &info) != 0 &&
      info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
}

}  // namespace

CpuFeatures ProbeCpu() {
  CpuFeatures f;
  const bool cpuinfo_ok = cpuinfo_initialize();
  PinCpuinfo();

  std::string cpu = "unknown";
  std::string cores = "0";
  std::string l1d = "0", l2 = "0", l3 = "0";
  if (cpuinfo_ok) {
    f.neon = cpuinfo_has_arm_neon();
    f.fp16_arith = cpuinfo_has_arm_neon_fp16_arith();
    f.dotprod = cpuinfo_has_arm_neon_dot();
    f.bf16 = cpuinfo_has_arm_bf16();
    f.sve = cpuinfo_has_arm_sve();
    const cpuinfo_package* package = cpuinfo_get_package(0);
    if (package != nullptr && package->name[0] != '\0') cpu = package->name;
    cores = std::to_string(cpuinfo_get_cores_count());
    l1d = CacheBytes(cpuinfo_get_l1d_cache(0));
    l2 = CacheBytes(cpuinfo_get_l2_cache(0));
    l3 = CacheBytes(cpuinfo_get_l3_cache(0));
  }
  AppendIsa(f.isa, f.neon, "neon");
  AppendIsa(f.isa, f.fp16_arith, "fp16");
  AppendIsa(f.isa, f.dotprod, "dotprod");
  AppendIsa(f.isa, f.bf16, "bf16");
  AppendIsa(f.isa, f.sve, "sve");

  f.facts = {{"isa", f.isa},           {"cpu", cpu},           {"cores", cores},
             {"l1d_cache_bytes", l1d}, {"l2_cache_bytes", l2}, {"l3_cache_bytes", l3}};
  if (!cpuinfo_ok) f.facts.emplace_back("cpuinfo", "initialization failed");
  return f;
}

}  // namespace attnrt::cpu
