// Kernel descriptors of the cpu_x86 GroupQueryAttention family: what each accepts (and why not),
// its workspace, and the dispatch to the ISA row pipeline.
#include "gqa_kernels.h"

#include <iterator>
#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_decline.h"
#include "gqa_flash.h"
#include "gqa_kernel_entry.h"
#include "gqa_naive.h"
#include "gqa_paged_entry.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// Ranking scheme of the CPU kernels (docs/plugins.md: flash > naive, then AVX-512 > AVX2 > scalar):
// naive 100, flash 200; +0 scalar, +20 AVX2, +40 AVX-512, +50 AVX-512 with AMX-BF16 (flash only,
// bfloat16 problems only).
constexpr int32_t kNaivePriority = 100;
constexpr int32_t kFlashPriority = 200;
constexpr int32_t kAvx2Bonus = 20;
constexpr int32_t kAvx512Bonus = 40;
constexpr int32_t kAmxBonus = 50;

enum class Isa { kScalar, kAvx2, kAvx512, kAmx };

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

// gqa_flash_amx.cpp adds -mamx-tile -mamx-bf16 to the AVX-512 flags; the tile data also needs the
// process's permission (asked for here, once, the first time a kernel needs it).
std::string AmxDeclineReason(const CpuFeatures& cpu) {
  if (!(cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.fma && cpu.amx_bf16)) {
    return "requires AVX-512 F/BW/VL, FMA and AMX-TILE/AMX-BF16 with OS-enabled opmask/ZMM and "
           "tile state; this CPU/OS provides: " +
           (cpu.isa.empty() ? std::string("the x86-64 baseline only") : cpu.isa);
  }
  return AmxTileDataReason();
}

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

// The AVX2 pipeline converts float16 rows with F16C; T float16 is the only way to float16 tensors.
std::string F16cDeclineReason(const CpuFeatures& cpu, const attnrt_gqa_problem& p) {
  const bool float16 = p.query_dtype.code == ATTNRT_DTYPE_CODE_FLOAT && p.query_dtype.bits == 16;
  if (!float16 || cpu.f16c) return {};
  return "query dtype float16 requires F16C with OS-enabled AVX state; this CPU/OS provides: " +
         cpu.isa;
}

// The bfloat16 tile product serves a bfloat16 query with a bfloat16 cache; gqa.flash.avx512
// computes every other problem the same way without it.
std::string BFloat16DeclineReason(const attnrt_gqa_problem& p) {
  GqaFloatType type = GqaFloatType::kFloat32;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  if (GqaElementTypes(p, &type, &cache_type) && type == GqaFloatType::kBFloat16 &&
      cache_type == GqaCacheType::kBFloat16) {
    return {};
  }
  return "runs a bfloat16 query with a bfloat16 cache only (its scores are AMX-BF16 tile "
         "products); the other flash kernels and the naive ones run the other dtypes";
}

// A naive kernel (kFlash false: GqaNaiveDeclineReason) or a flash one (GqaFlashDeclineReason); the
// AVX2 ones need F16C for float16 problems, the AMX one bfloat16 problems.
template <Isa kIsa, bool kFlash>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& p = *static_cast<const attnrt_gqa_problem*>(problem);
    std::string why = IsaDeclineReason(kIsa, context.cpu);
    if (why.empty()) why = kFlash ? GqaFlashDeclineReason(p) : GqaNaiveDeclineReason(p);
    // After DeclineReason: it checked struct_size before any other field is read.
    if (why.empty() && kIsa == Isa::kAvx2) why = F16cDeclineReason(context.cpu, p);
    if (why.empty() && kIsa == Isa::kAmx) why = BFloat16DeclineReason(p);
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "gqa supports()");
  }
  return 0;
}

constexpr attnrt_kernel_desc kKernels[] = {
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.naive.scalar",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority,
     .supports = &Supports<Isa::kScalar, false>,
     .workspace_size = &GqaNaiveWorkspaceSize,
     .run = &GqaNaiveRunWith<&GqaAttendRowsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.naive.avx2",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority + kAvx2Bonus,
     .supports = &Supports<Isa::kAvx2, false>,
     .workspace_size = &GqaNaiveWorkspaceSize,
     .run = &GqaNaiveRunWith<&GqaAttendRowsAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.naive.avx512",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kNaivePriority + kAvx512Bonus,
     .supports = &Supports<Isa::kAvx512, false>,
     .workspace_size = &GqaNaiveWorkspaceSize,
     .run = &GqaNaiveRunWith<&GqaAttendRowsAvx512>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.flash.scalar",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority,
     .supports = &Supports<Isa::kScalar, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsScalar>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.flash.avx2",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority + kAvx2Bonus,
     .supports = &Supports<Isa::kAvx2, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsAvx2>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.flash.avx512",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority + kAvx512Bonus,
     .supports = &Supports<Isa::kAvx512, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsAvx512>},
    {.struct_size = sizeof(attnrt_kernel_desc),
     .name = "cpu_x86.gqa.flash.amx",
     .op_kind = ATTNRT_OP_GQA,
     .device_type = ATTNRT_DEVICE_CPU,
     .priority = kFlashPriority + kAmxBonus,
     .supports = &Supports<Isa::kAmx, true>,
     .workspace_size = &GqaFlashWorkspaceSize,
     .run = &GqaFlashRunWith<kGqaFlashOpsAmx>},
};

// The paged kernels (plugins/cpu_common/gqa_paged.h) of each algorithm and ISA, with the
// acceptance and operations of the contiguous kernel they mirror and its rank.
constexpr attnrt_kernel_desc kPagedKernels[] = {
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kScalar, true>, kGqaFlashOpsScalar>(
        "cpu_x86.paged_gqa.flash.scalar", kFlashPriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kAvx2, true>, kGqaFlashOpsAvx2>(
        "cpu_x86.paged_gqa.flash.avx2", kFlashPriority + kAvx2Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kAvx512, true>, kGqaFlashOpsAvx512>(
        "cpu_x86.paged_gqa.flash.avx512", kFlashPriority + kAvx512Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kAmx, true>, kGqaFlashOpsAmx>(
        "cpu_x86.paged_gqa.flash.amx", kFlashPriority + kAmxBonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kScalar, false>,
                       GqaAttendRowsPagedScalar>("cpu_x86.paged_gqa.naive.scalar", kNaivePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kAvx2, false>, GqaAttendRowsPagedAvx2>(
        "cpu_x86.paged_gqa.naive.avx2", kNaivePriority + kAvx2Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA, Supports<Isa::kAvx512, false>,
                       GqaAttendRowsPagedAvx512>("cpu_x86.paged_gqa.naive.avx512",
                                                 kNaivePriority + kAvx512Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kScalar, true>,
                       kGqaFlashOpsScalar>("cpu_x86.paged_gqa_varlen.flash.scalar", kFlashPriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kAvx2, true>, kGqaFlashOpsAvx2>(
        "cpu_x86.paged_gqa_varlen.flash.avx2", kFlashPriority + kAvx2Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kAvx512, true>,
                       kGqaFlashOpsAvx512>("cpu_x86.paged_gqa_varlen.flash.avx512",
                                           kFlashPriority + kAvx512Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kAmx, true>, kGqaFlashOpsAmx>(
        "cpu_x86.paged_gqa_varlen.flash.amx", kFlashPriority + kAmxBonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kScalar, false>,
                       GqaAttendRowsPagedScalar>("cpu_x86.paged_gqa_varlen.naive.scalar",
                                                 kNaivePriority),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kAvx2, false>,
                       GqaAttendRowsPagedAvx2>("cpu_x86.paged_gqa_varlen.naive.avx2",
                                               kNaivePriority + kAvx2Bonus),
    PagedGqaKernelDesc<ATTNRT_OP_PAGED_GQA_VARLEN, Supports<Isa::kAvx512, false>,
                       GqaAttendRowsPagedAvx512>("cpu_x86.paged_gqa_varlen.naive.avx512",
                                                 kNaivePriority + kAvx512Bonus),
};

}  // namespace

size_t GqaKernelCount() noexcept { return std::size(kKernels) + std::size(kPagedKernels); }

const attnrt_kernel_desc* GqaKernel(size_t index) noexcept {
  if (index < std::size(kKernels)) return &kKernels[index];
  index -= std::size(kKernels);
  return index < std::size(kPagedKernels) ? &kPagedKernels[index] : nullptr;
}

}  // namespace attnrt::cpu
