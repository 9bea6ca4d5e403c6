// The CPU feature probe of the architecture being built: CpuFeatures and ProbeCpu() (and, on
// x86-64, AmxTileDataReason()). One library per architecture, attnrt_cpu_probe (plugins/cpu_common/
// CMakeLists.txt), built once from cpu_probe_<arch>.cpp and cpuinfo_facts.cpp and linked by the
// architecture's CPU plugin and by sparse_mla.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include "cpu_probe_x86.h"
#elif defined(__aarch64__) || defined(_M_ARM64)
#include "cpu_probe_arm.h"
#else
#error "attnrt_cpu_probe: no CPU feature probe for this architecture (x86-64 and AArch64 only)"
#endif
