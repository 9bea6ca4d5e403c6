// What every CPU plugin's probe reads from cpuinfo besides its ISA flags: initialization (with the
// library kept loaded), the CPU name, core count and cache sizes, and the facts list built from
// them. Baseline ISA code, like the probes that call it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnrt::cpu {

using ProbeFacts = std::vector<std::pair<std::string, std::string>>;

struct CpuinfoBasics {
  bool ok = false;  // cpuinfo_initialize succeeded; the other fields keep their defaults otherwise
  std::string cpu = "unknown";
  std::string cores = "0";
  std::string l1d_cache_bytes = "0";
  std::string l2_cache_bytes = "0";
  std::string l3_cache_bytes = "0";
};

// Initializes cpuinfo (idempotent) and reads the basics. Call before any cpuinfo_has_* query.
CpuinfoBasics InitializeCpuinfo();

// Appends `name` to the comma-separated `list` when `usable`.
void AppendIsa(std::string& list, bool usable, const char* name);

// Facts in report order: isa, cpu, cores, l1d/l2/l3_cache_bytes, then `extra`, then
// ("cpuinfo", "initialization failed") when cpuinfo could not be initialized.
ProbeFacts CpuFacts(const std::string& isa, const CpuinfoBasics& basics, ProbeFacts extra = {});

}  // namespace attnrt::cpu
