// paged_gqa.flash, paged_gqa.naive and the acceptance of paged_gqa_varlen (baseline ISA):
// supports(), workspace and run of GroupQueryAttention over a paged KV cache with the gqa.flash
// algorithm or the gqa.naive row pipeline (see gqa_paged.h); the varlen runs are in
// gqa_paged_varlen.cpp.
#include "gqa_paged.h"

#include <string>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "gqa_decline.h"
#include "gqa_naive.h"
#include "gqa_paged_stage.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

enum class PagedKernel { kFlash, kNaive, kVarlenFlash, kVarlenNaive };

bool IsVarlen(PagedKernel kernel) {
  return kernel == PagedKernel::kVarlenFlash || kernel == PagedKernel::kVarlenNaive;
}

bool IsFlash(PagedKernel kernel) {
  return kernel == PagedKernel::kFlash || kernel == PagedKernel::kVarlenFlash;
}

// Two cache types (ABI 1.9): the value cache's must be one this plugin reads, and only the row
// pipeline reads each pool as its own type (the flash block operations take one row type per
// call). "" when the kernel takes the problem's types.
std::string ValueCacheTypeDeclineReason(PagedKernel kernel, const attnrt_paged_gqa_problem& p) {
  if (!GqaPagedTypesDiffer(p)) return {};
  GqaCacheType key_type = GqaCacheType::kFloat32;
  if (!GqaPagedKeyCacheType(p, &key_type)) {
    return "key_cache of dtype code " + std::to_string(p.gqa.cache_dtype.code) + " bits " +
           std::to_string(p.gqa.cache_dtype.bits) + " with k_quant_type " +
           std::to_string(p.gqa.attributes.k_quant_type) +
           " is not a key cache type of independent types this plugin reads";
  }
  GqaCacheType value_type = GqaCacheType::kFloat32;
  if (!GqaPagedValueCacheType(p, &value_type)) {
    return "value_cache of dtype code " + std::to_string(p.value_cache_dtype.code) + " bits " +
           std::to_string(p.value_cache_dtype.bits) + " with v_quant_type " +
           std::to_string(p.gqa.attributes.v_quant_type) + " and v_cache_bit_width " +
           std::to_string(p.v_cache_bit_width) + " is not a value cache type this plugin reads";
  }
  if (IsFlash(kernel)) {
    return "key_cache and value_cache of independent types are run by the naive kernels (the row "
           "pipeline reads each pool as its own type; the flash block operations read T's or one "
           "quantized type)";
  }
  return {};
}

// Head sizes that are not multiples of 8 (ABI 1.9, unquantized caches): the row pipeline reads rows
// of any length; the flash tiles are laid out in whole vectors of 8 or 16 floats.
std::string HeadSizeDeclineReason(PagedKernel kernel, const attnrt_paged_gqa_problem& p) {
  if (!IsFlash(kernel) || (p.gqa.head_size % 8 == 0 && p.v_head_size % 8 == 0)) return {};
  return "head_size " + std::to_string(p.gqa.head_size) + " and v_head_size " +
         std::to_string(p.v_head_size) +
         ": head sizes that are not multiples of 8 are run by the naive kernels";
}

// What a value head size other than head_size needs of the value rows (validation checks it;
// checked again, as every field a kernel relies on): a multiple of 8, of 32 for PER_BLOCK_32
// blocks, and a per-channel v_scale of one scale per value element. "" when they hold.
std::string ValueHeadSizeDeclineReason(const attnrt_paged_gqa_problem& p) {
  const int64_t hv = p.v_head_size;
  const attnrt_gqa_attributes& a = p.gqa.attributes;
  if (hv <= 0) return "v_head_size " + std::to_string(hv) + " is not positive";
  if (a.v_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32 &&
      hv % ATTNRT_GQA_QUANT_BLOCK_ELEMENTS != 0) {
    return "v_head_size " + std::to_string(hv) + " is not a multiple of 32 (PER_BLOCK_32)";
  }
  if (a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL &&
      p.gqa.v_scale_count != p.gqa.kv_num_heads * hv) {
    return "v_scale with " + std::to_string(p.gqa.v_scale_count) +
           " elements is not supported with k_quant_type=PER_CHANNEL and v_head_size " +
           std::to_string(hv) + " (expected " + std::to_string(p.gqa.kv_num_heads * hv) + ")";
  }
  return {};
}

// The paged problem of a paged (or, `varlen`, a paged varlen) problem, or NULL with the reason
// where the caller's struct is smaller than the one this plugin was built with.
const attnrt_paged_gqa_problem* PagedProblem(const void* problem, bool varlen, char* reason,
                                             size_t reason_capacity) {
  if (varlen) {
    const auto& v = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
    if (v.struct_size < sizeof(attnrt_paged_gqa_varlen_problem)) {
      WriteMessage(reason, reason_capacity,
                   "attnrt_paged_gqa_varlen_problem struct_size " + std::to_string(v.struct_size) +
                       " is smaller than the " +
                       std::to_string(sizeof(attnrt_paged_gqa_varlen_problem)) +
                       " bytes this kernel was built with");
      return nullptr;
    }
    problem = &v.paged;
  }
  if (!PagedGqaProblemFits(problem, reason, reason_capacity)) return nullptr;
  return static_cast<const attnrt_paged_gqa_problem*>(problem);
}

// The paged kernels compute what the contiguous kernel of the same algorithm and ISA computes:
// its acceptance (`contiguous_supports`), on the equivalent contiguous problem. What gqa.flash
// leaves to the naive path goes to the paged naive kernels. A varlen problem's packed rows are
// rows of sequences of any length: the prompt problem decides (a decode step is accepted wherever
// a prompt is). A value head size other than head_size (ABI 1.8) is served by both algorithms.
int32_t Supports(PagedKernel kernel, void* plugin_context, const void* problem, char* reason,
                 size_t reason_capacity, GqaSupportsFn contiguous_supports) noexcept {
  try {
    const attnrt_paged_gqa_problem* paged =
        PagedProblem(problem, IsVarlen(kernel), reason, reason_capacity);
    if (paged == nullptr) return 0;
    for (const std::string& why :
         {ValueCacheTypeDeclineReason(kernel, *paged), HeadSizeDeclineReason(kernel, *paged)}) {
      if (!why.empty()) {
        WriteMessage(reason, reason_capacity, why);
        return 0;
      }
    }
    // The contiguous supports() knows one head size. With a value head size Hv (ABI 1.8) the
    // value rows' own rules are checked here, and it is handed the problem with the per-channel
    // v_scale count its checks expect (Nkv * H for Nkv * Hv).
    attnrt_gqa_problem equivalent = paged->gqa;
    const attnrt_gqa_problem* gqa = &equivalent;
    // It knows one cache type too: the key cache's (a float one as T), each pool's own having
    // been checked above.
    if (GqaPagedTypesDiffer(*paged)) {
      equivalent.attributes.v_quant_type = equivalent.attributes.k_quant_type;
      if (equivalent.attributes.k_quant_type == ATTNRT_GQA_QUANT_NONE) {
        equivalent.cache_dtype = equivalent.query_dtype;
      }
    }
    const int64_t hv = paged->v_head_size;
    if (hv != gqa->head_size) {
      const std::string why = ValueHeadSizeDeclineReason(*paged);
      if (!why.empty()) {
        WriteMessage(reason, reason_capacity, why);
        return 0;
      }
      if (gqa->attributes.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL) {
        equivalent.v_scale_count = gqa->kv_num_heads * gqa->head_size;
      }
    }
    char why[512] = {0};
    if (contiguous_supports(plugin_context, gqa, why, sizeof(why))) return 1;
    why[sizeof(why) - 1] = '\0';
    std::string message;
    switch (kernel) {
      case PagedKernel::kFlash:
        message =
            std::string("the paged flash kernels run the gqa.flash algorithm, which declines: ") +
            why;
        // Pointing at the paged naive kernels only where their pipeline takes the problem (ISA
        // aside).
        if (GqaNaiveDeclineReason(*gqa).empty()) message += " (paged_gqa.naive runs such problems)";
        break;
      case PagedKernel::kNaive:
        message =
            std::string("the paged naive kernels run the gqa.naive pipeline, which declines: ") +
            why;
        break;
      case PagedKernel::kVarlenFlash:
      case PagedKernel::kVarlenNaive:
        message = std::string("declines the packed rows: ") + why;
        break;
    }
    WriteMessage(reason, reason_capacity, message);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity,
                          kernel == PagedKernel::kFlash   ? "paged_gqa.flash supports()"
                          : kernel == PagedKernel::kNaive ? "paged_gqa.naive supports()"
                                                          : "paged_gqa_varlen supports()");
  }
  return 0;
}

}  // namespace

int32_t PagedGqaFlashSupports(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity, GqaSupportsFn contiguous_supports) noexcept {
  return Supports(PagedKernel::kFlash, plugin_context, problem, reason, reason_capacity,
                  contiguous_supports);
}

int32_t PagedGqaNaiveSupports(void* plugin_context, const void* problem, char* reason,
                              size_t reason_capacity, GqaSupportsFn contiguous_supports) noexcept {
  return Supports(PagedKernel::kNaive, plugin_context, problem, reason, reason_capacity,
                  contiguous_supports);
}

int32_t PagedGqaVarlenFlashSupports(void* plugin_context, const void* problem, char* reason,
                                    size_t reason_capacity,
                                    GqaSupportsFn contiguous_supports) noexcept {
  return Supports(PagedKernel::kVarlenFlash, plugin_context, problem, reason, reason_capacity,
                  contiguous_supports);
}

int32_t PagedGqaVarlenNaiveSupports(void* plugin_context, const void* problem, char* reason,
                                    size_t reason_capacity,
                                    GqaSupportsFn contiguous_supports) noexcept {
  return Supports(PagedKernel::kVarlenNaive, plugin_context, problem, reason, reason_capacity,
                  contiguous_supports);
}

size_t PagedGqaFlashWorkspaceSize(void* plugin_context, const void* problem,
                                  const GqaFlashOps& ops) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_problem)) return 0;
  const GqaFlashPaging layout{nullptr,
                              0,
                              p.block_size,
                              PagedGqaPoolStrides(p, p.key_cache_strides, false),
                              PagedGqaPoolStrides(p, p.value_cache_strides, true),
                              nullptr,
                              nullptr,
                              p.v_head_size};
  return GqaFlashPagedWorkspaceSize(plugin_context, p.gqa, layout, ops);
}

int32_t PagedGqaFlashRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                         const GqaFlashOps& ops) noexcept {
  try {
    const auto& a = *static_cast<const attnrt_paged_gqa_args*>(args);
    const int32_t fits = PagedGqaArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const attnrt_paged_gqa_problem& p = *a.problem;
    const PagedStageInput stage{&a, nullptr, nullptr, nullptr, nullptr, 0};
    const GqaFlashPaging paging{a.block_table,
                                p.max_blocks_per_seq,
                                p.block_size,
                                PagedGqaPoolStrides(p, p.key_cache_strides, false),
                                PagedGqaPoolStrides(p, p.value_cache_strides, true),
                                &PagedGqaStage,
                                &stage,
                                p.v_head_size};
    return GqaFlashRunPaged(plugin_context, a.gqa, paging, ops, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

// gqa.naive's per-thread scratch for key rows up to max_blocks_per_seq * block_size (the problem's
// present_sequence_length); no staging, the pools are the caches.
size_t PagedGqaNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_problem)) return 0;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  return GqaWorkspaceSize(context.host, p.gqa, p.v_head_size);
}

// The workspace is checked before PagedGqaStage writes the first row, so a failing run leaves the
// pools and outputs as they were.
int32_t PagedGqaNaiveRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                         GqaAttendRowsFn rows) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_paged_gqa_args*>(args);
    const int32_t fits = PagedGqaArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedStageInput stage{&a, nullptr, nullptr, nullptr, nullptr, 0};
    return RunGqaStaged(context.host, a.gqa, a.problem->v_head_size, &PagedGqaStage, &stage, rows,
                        error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa.naive run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

}  // namespace attnrt::cpu
