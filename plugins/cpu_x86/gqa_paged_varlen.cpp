// paged_gqa_varlen kernels (baseline ISA): packed variable-length batches over a paged cache
// (attnrt/ops/paged_gqa_varlen.h) through the paged kernels' algorithms. The flash kernels run the
// gqa.flash driver on the packed rows (tiles of one sequence's rows; a step whose every sequence
// has one query row takes the decode path, split-KV and grouped heads included); the naive kernels
// run the gqa.naive row pipeline. The new K/V rows are appended by the paged staging step, which
// follows query_start_loc and skips rows slot_mapping marks -1.
#include "gqa_paged_varlen.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "gqa_decline.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"
#include "gqa_naive.h"
#include "gqa_paged_stage.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// The paged kernels' ranks: flash above naive, AVX-512 above AVX2 above scalar.
constexpr int32_t kFlashPriority = 200;
constexpr int32_t kNaivePriority = 100;
constexpr int32_t kAvx2Bonus = 20;
constexpr int32_t kAvx512Bonus = 40;
constexpr int32_t kAmxBonus = 50;

using SupportsFn = int32_t (*)(void*, const void*, char*, size_t) noexcept;

bool ProblemFits(const void* problem, char* reason, size_t reason_capacity) {
  const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
  if (p.struct_size >= sizeof(attnrt_paged_gqa_varlen_problem)) {
    return PagedGqaProblemFits(&p.paged, reason, reason_capacity);
  }
  WriteMessage(reason, reason_capacity,
               "attnrt_paged_gqa_varlen_problem struct_size " + std::to_string(p.struct_size) +
                   " is smaller than the " +
                   std::to_string(sizeof(attnrt_paged_gqa_varlen_problem)) +
                   " bytes this kernel was built with");
  return false;
}

int32_t ArgsFit(const attnrt_paged_gqa_varlen_args& a, char* error, size_t error_capacity) {
  if (a.struct_size >= sizeof(attnrt_paged_gqa_varlen_args)) {
    return PagedGqaArgsFit(a.paged, error, error_capacity);
  }
  WriteMessage(error, error_capacity,
               "attnrt_paged_gqa_varlen_args struct_size " + std::to_string(a.struct_size) +
                   " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_varlen_args)) +
                   " bytes this kernel was built with");
  return ATTNRT_ERROR_ABI_MISMATCH;
}

// The paged problem of a step whose every sequence has one query row: S = 1 (and L = 1 when rows
// are appended), so the drivers take their decode paths.
attnrt_paged_gqa_problem DecodeProblem(const attnrt_paged_gqa_varlen_problem& p) {
  attnrt_paged_gqa_problem d = p.paged;
  d.gqa.sequence_length = 1;
  if (d.gqa.kv_sequence_length > 0) d.gqa.kv_sequence_length = 1;
  return d;
}

// Every sequence has exactly one query row, at row b: the packed batch is a padded one of S = 1.
bool AllDecode(const attnrt_paged_gqa_varlen_args& a) {
  const int64_t batch = a.problem->paged.gqa.batch_size;
  return a.max_query_len == 1 && a.query_start_loc[batch] == batch;
}

// A varlen call in the paged kernels' terms: the paged arguments (for an all-decode step, of the
// S = 1 problem) and the staging input that lays out the packed rows.
struct PagedCall {
  attnrt_paged_gqa_problem decode;
  attnrt_paged_gqa_args paged;
  PagedStageInput stage;

  explicit PagedCall(const attnrt_paged_gqa_varlen_args& a)
      : decode(DecodeProblem(*a.problem)),
        paged(a.paged),
        stage{&paged, a.query_start_loc, a.slot_mapping, a.max_query_len} {
    if (AllDecode(a)) {
      paged.problem = &decode;
      paged.gqa.problem = &decode.gqa;
      stage.query_start_loc = nullptr;  // row b of every packed tensor is sequence b's
    }
  }
  PagedCall(const PagedCall&) = delete;
  PagedCall& operator=(const PagedCall&) = delete;
};

template <SupportsFn kGqaSupports>
int32_t Supports(void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity) noexcept {
  try {
    if (!ProblemFits(problem, reason, reason_capacity)) return 0;
    const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
    // The packed rows are rows of sequences of any length: the prompt problem decides (a decode
    // step is accepted wherever a prompt is).
    char why[512] = {0};
    if (kGqaSupports(plugin_context, &p.paged.gqa, why, sizeof(why))) return 1;
    why[sizeof(why) - 1] = '\0';
    WriteMessage(reason, reason_capacity, std::string("declines the packed rows: ") + why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, "paged_gqa_varlen supports()");
  }
  return 0;
}

GqaFlashPaging Paging(const attnrt_paged_gqa_problem& p, const int32_t* table,
                      const PagedStageInput* stage) {
  return GqaFlashPaging{table,
                        p.max_blocks_per_seq,
                        p.block_size,
                        PagedGqaPoolStrides(p, p.key_cache_strides),
                        PagedGqaPoolStrides(p, p.value_cache_strides),
                        &PagedGqaStage,
                        stage};
}

// Room for the prompt form and for the decode form of the problem.
template <const GqaFlashOps& kOps>
size_t FlashWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_varlen_problem)) return 0;
  const attnrt_paged_gqa_problem decode = DecodeProblem(p);
  return std::max(GqaFlashPagedWorkspaceSize(plugin_context, p.paged.gqa,
                                             Paging(p.paged, nullptr, nullptr), kOps),
                  GqaFlashPagedWorkspaceSize(plugin_context, decode.gqa,
                                             Paging(decode, nullptr, nullptr), kOps));
}

size_t NaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_varlen_problem)) return 0;
  return GqaNaiveWorkspaceSize(plugin_context, &p.paged.gqa);
}

template <const GqaFlashOps& kOps>
int32_t FlashRun(void* plugin_context, const void* args, char* error,
                 size_t error_capacity) noexcept {
  try {
    const auto& a = *static_cast<const attnrt_paged_gqa_varlen_args*>(args);
    const int32_t fits = ArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedCall call(a);
    const GqaFlashPaging paging = Paging(*call.paged.problem, call.paged.block_table, &call.stage);
    return GqaFlashRunPaged(plugin_context, call.paged.gqa, paging, kOps, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa_varlen.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

template <GqaAttendRowsFn kRows>
int32_t NaiveRun(void* plugin_context, const void* args, char* error,
                 size_t error_capacity) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_paged_gqa_varlen_args*>(args);
    const int32_t fits = ArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedCall call(a);
    return RunGqaStaged(context.host, call.paged.gqa, &PagedGqaStage, &call.stage, kRows, error,
                        error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa_varlen.naive run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

constexpr attnrt_kernel_desc Kernel(const char* name, int32_t priority, SupportsFn supports,
                                    size_t (*workspace)(void*, const void*) noexcept,
                                    int32_t (*run)(void*, const void*, char*, size_t) noexcept) {
  return {.struct_size = sizeof(attnrt_kernel_desc),
          .name = name,
          .op_kind = ATTNRT_OP_PAGED_GQA_VARLEN,
          .device_type = ATTNRT_DEVICE_CPU,
          .priority = priority,
          .supports = supports,
          .workspace_size = workspace,
          .run = run};
}

constexpr attnrt_kernel_desc kKernels[] = {
    Kernel("cpu_x86.paged_gqa_varlen.flash.scalar", kFlashPriority,
           &Supports<&GqaFlashSupportsScalar>, &FlashWorkspaceSize<kGqaFlashOpsScalar>,
           &FlashRun<kGqaFlashOpsScalar>),
    Kernel("cpu_x86.paged_gqa_varlen.flash.avx2", kFlashPriority + kAvx2Bonus,
           &Supports<&GqaFlashSupportsAvx2>, &FlashWorkspaceSize<kGqaFlashOpsAvx2>,
           &FlashRun<kGqaFlashOpsAvx2>),
    Kernel("cpu_x86.paged_gqa_varlen.flash.avx512", kFlashPriority + kAvx512Bonus,
           &Supports<&GqaFlashSupportsAvx512>, &FlashWorkspaceSize<kGqaFlashOpsAvx512>,
           &FlashRun<kGqaFlashOpsAvx512>),
    Kernel("cpu_x86.paged_gqa_varlen.flash.amx", kFlashPriority + kAmxBonus,
           &Supports<&GqaFlashSupportsAmx>, &FlashWorkspaceSize<kGqaFlashOpsAmx>,
           &FlashRun<kGqaFlashOpsAmx>),
    Kernel("cpu_x86.paged_gqa_varlen.naive.scalar", kNaivePriority,
           &Supports<&GqaNaiveSupportsScalar>, &NaiveWorkspaceSize,
           &NaiveRun<&GqaAttendRowsPagedScalar>),
    Kernel("cpu_x86.paged_gqa_varlen.naive.avx2", kNaivePriority + kAvx2Bonus,
           &Supports<&GqaNaiveSupportsAvx2>, &NaiveWorkspaceSize,
           &NaiveRun<&GqaAttendRowsPagedAvx2>),
    Kernel("cpu_x86.paged_gqa_varlen.naive.avx512", kNaivePriority + kAvx512Bonus,
           &Supports<&GqaNaiveSupportsAvx512>, &NaiveWorkspaceSize,
           &NaiveRun<&GqaAttendRowsPagedAvx512>),
};

}  // namespace

size_t PagedGqaVarlenKernelCount() noexcept { return std::size(kKernels); }

const attnrt_kernel_desc* PagedGqaVarlenKernel(size_t index) noexcept {
  return index < std::size(kKernels) ? &kKernels[index] : nullptr;
}

}  // namespace attnrt::cpu
