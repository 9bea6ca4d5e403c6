#include "cpuinfo_facts.h"

#include <cpuinfo.h>
#include <dlfcn.h>

namespace attnrt::cpu {
namespace {

std::string CacheBytes(const cpuinfo_cache* cache) {
  return std::to_string(cache != nullptr ? cache->size : 0u);
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

CpuinfoBasics InitializeCpuinfo() {
  CpuinfoBasics basics;
  basics.ok = cpuinfo_initialize();
  PinCpuinfo();
  if (!basics.ok) return basics;
  const cpuinfo_package* package = cpuinfo_get_package(0);
  if (package != nullptr && package->name[0] != '\0') basics.cpu = package->name;
  basics.cores = std::to_string(cpuinfo_get_cores_count());
  basics.l1d_cache_bytes = CacheBytes(cpuinfo_get_l1d_cache(0));
  basics.l2_cache_bytes = CacheBytes(cpuinfo_get_l2_cache(0));
  basics.l3_cache_bytes = CacheBytes(cpuinfo_get_l3_cache(0));
  return basics;
}

void AppendIsa(std::string& list, bool usable, const char* name) {
  if (!usable) return;
  if (!list.empty()) list += ',';
  list += name;
}

ProbeFacts CpuFacts(const std::string& isa, const CpuinfoBasics& basics, ProbeFacts extra) {
  ProbeFacts facts = {{"isa", isa},
                      {"cpu", basics.cpu},
                      {"cores", basics.cores},
                      {"l1d_cache_bytes", basics.l1d_cache_bytes},
                      {"l2_cache_bytes", basics.l2_cache_bytes},
                      {"l3_cache_bytes", basics.l3_cache_bytes}};
  for (auto& fact : extra) facts.push_back(std::move(fact));
  if (!basics.ok) facts.emplace_back("cpuinfo", "initialization failed");
  return facts;
}

}  // namespace attnrt::cpu
