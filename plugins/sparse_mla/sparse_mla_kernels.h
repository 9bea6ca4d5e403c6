// The sparse_mla plugin's context and its kernels' run functions (one per ISA file; the x86-64
// build has the scalar, AVX2, AVX-512 and AVX512-BF16 kernels, the AArch64 build the scalar and
// NEON kernels).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "attnrt/plugin.h"
#include "cpu_probe.h"

namespace attnrt::sparse_mla {

// State of one init(): everything mutable lives here (two runtimes may init the same library).
struct PluginContext {
  attnrt_host_services host;
  cpu::CpuFeatures cpu;
  std::vector<attnrt_plugin_fact> facts;  // points into cpu.facts
};

int32_t RunScalar(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity);
#if defined(__aarch64__)
int32_t RunNeon(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity);
#else
int32_t RunAmxBf16(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                   char* error, size_t error_capacity);
int32_t RunAvx512Bf16(const attnrt_host_services& host, const attnrt_sparse_mla_args& args,
                      char* error, size_t error_capacity);
int32_t RunAvx512(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                  size_t error_capacity);
int32_t RunAvx2(const attnrt_host_services& host, const attnrt_sparse_mla_args& args, char* error,
                size_t error_capacity);
#endif

}  // namespace attnrt::sparse_mla
