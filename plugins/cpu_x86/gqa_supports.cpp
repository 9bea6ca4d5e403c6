// supports() of the cpu_x86 GroupQueryAttention kernels (gqa_supports.h): what each ISA needs of
// the CPU, and why a kernel declines.
#include "gqa_supports.h"

#include <string>

#include "attnrt/ops/gqa.h"
#include "cpu_probe.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

std::string Avx2DeclineReason(const CpuFeatures& cpu) {
  if (cpu.avx2 && cpu.fma) return {};
  return "requires AVX2 and FMA with OS-enabled AVX state; this CPU/OS provides: " +
         (cpu.isa.empty() ? std::string("the x86-64 baseline only") : cpu.isa);
}

// The AVX-512 files are built with -mavx512f -mavx512bw -mavx512vl -mfma: all four must be usable.
// (They convert float16 with the AVX512F forms of VCVTPH2PS/VCVTPS2PH, so F16C is not needed.)
std::string Avx512DeclineReason(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.fma) return {};
  return "requires AVX-512 F/BW/VL and FMA with OS-enabled opmask/ZMM state; this CPU/OS "
         "provides: " +
         (cpu.isa.empty() ? std::string("the x86-64 baseline only") : cpu.isa);
}

// gqa_flash_amx.cpp adds -mamx-tile -mamx-bf16 to the AVX-512 flags and gqa_flash_amx_fp8.cpp
// -mavx512vbmi (every CPU with AMX-BF16 has it); the tile data also needs the process's permission
// (asked for here, once, the first time a kernel needs it).
std::string AmxDeclineReason(const CpuFeatures& cpu) {
  if (!(cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512vbmi && cpu.fma && cpu.amx_bf16)) {
    return "requires AVX-512 F/BW/VL/VBMI, FMA and AMX-TILE/AMX-BF16 with OS-enabled opmask/ZMM "
           "and tile state; this CPU/OS provides: " +
           (cpu.isa.empty() ? std::string("the x86-64 baseline only") : cpu.isa);
  }
  return AmxTileDataReason();
}

}  // namespace

std::string IsaDeclineReason(Isa isa, const CpuFeatures& cpu) {
  switch (isa) {
    case Isa::kAvx2:
      return Avx2DeclineReason(cpu);
    case Isa::kAvx512:
      return Avx512DeclineReason(cpu);
    case Isa::kAmx:
      return AmxDeclineReason(cpu);
    case Isa::kScalar:
      break;
  }
  return {};
}

// T float16 is the only way to float16 tensors, but for the float16 scales of Q8_0/Q4_0 blocks.
std::string F16cDeclineReason(const CpuFeatures& cpu, const attnrt_gqa_problem& p) {
  const bool float16 = p.query_dtype.code == ATTNRT_DTYPE_CODE_FLOAT && p.query_dtype.bits == 16;
  const bool blocks = p.attributes.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32;
  if ((!float16 && !blocks) || cpu.f16c) return {};
  return std::string(float16 ? "query dtype float16" : "a PER_BLOCK_32 KV cache (float16 scales)") +
         " requires F16C with OS-enabled AVX state; this CPU/OS provides: " + cpu.isa;
}

// The bfloat16 tile product, and the float8 caches' table decoding; gqa.flash.avx512 computes every
// other problem the same way without them.
std::string BFloat16DeclineReason(const attnrt_gqa_problem& p) {
  GqaFloatType type = GqaFloatType::kFloat32;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  if (GqaElementTypes(p, &type, &cache_type) &&
      ((type == GqaFloatType::kBFloat16 && cache_type == GqaCacheType::kBFloat16) ||
       cache_type == GqaCacheType::kFloat8E4M3Fn || cache_type == GqaCacheType::kFloat8E5M2)) {
    return {};
  }
  return "runs a bfloat16 query with a bfloat16 cache (its scores are AMX-BF16 tile products) or "
         "a float8 cache (e4m3fn, e5m2) only; the other flash kernels and the naive ones run the "
         "other dtypes";
}

}  // namespace attnrt::cpu
